#include "tools/troupe/bench_serve/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>

#include "runtime/common/error.h"

namespace troupe::bench {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * double(v.size() - 1);
  const std::size_t lo = std::size_t(std::floor(pos)), hi = std::size_t(std::ceil(pos));
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

slo parse_slo(const std::vector<std::string>& parts) {
  slo s;
  for (const auto& p : parts) {
    const auto colon = p.find(':');
    if (colon == std::string::npos) throw input_error("--goodput: expected METRIC:MS (ttft, tpot or e2el), got '" + p + "'");
    const std::string k = p.substr(0, colon);
    double v = 0;
    try {
      v = std::stod(p.substr(colon + 1));
    } catch (const std::exception&) {
      throw input_error("--goodput: '" + p + "' has no number of milliseconds");
    }
    if (v <= 0) throw input_error("--goodput: '" + p + "' must be positive");
    if (k == "ttft") s.ttft_ms = v;
    else if (k == "tpot") s.tpot_ms = v;
    else if (k == "e2el") s.e2el_ms = v;
    else throw input_error("--goodput: unknown metric '" + k + "' (ttft, tpot or e2el)");
  }
  return s;
}

namespace {

double tpot_of(const request_result& r) {
  return r.output_tokens > 1 ? (r.e2e - r.ttft) / (r.output_tokens - 1) : 0;
}

std::map<std::string, double> stats(const std::vector<double>& v) {
  std::map<std::string, double> m;
  if (v.empty()) return {{"mean", 0}, {"median", 0}, {"std", 0}, {"p50", 0}, {"p90", 0}, {"p99", 0}};
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  double var = 0;
  for (double x : v) var += (x - mean) * (x - mean);
  m["mean"] = mean;
  m["std"] = std::sqrt(var / double(v.size()));
  m["median"] = m["p50"] = percentile(v, 50);
  m["p90"] = percentile(v, 90);
  m["p99"] = percentile(v, 99);
  return m;
}

// Completed requests by the model that answered, with its TTFT figures; empty when one did.
std::map<std::string, std::map<std::string, double>> by_answering_model(const std::vector<request_result>& results) {
  std::map<std::string, std::vector<double>> ttft;
  for (const auto& r : results)
    if (r.ok) ttft[r.model].push_back(r.ttft * 1e3);
  std::map<std::string, std::map<std::string, double>> out;
  if (ttft.size() < 2) return out;
  for (auto& [model, v] : ttft) {
    out[model] = stats(v);
    out[model]["completed"] = double(v.size());
  }
  return out;
}

}  // namespace

summary summarize(const std::vector<request_result>& results, double duration, const slo& goal) {
  summary s;
  s.duration = duration;
  std::vector<double> ttft, tpot, itl, e2el, rejection;
  int good = 0;
  for (const auto& r : results) {
    if (!r.ok) {
      ++s.failed;
      if (r.status == 429 || r.status == 503) {
        ++s.refused;
        rejection.push_back(r.e2e * 1e3);
      }
      if (s.errors.size() < 5) s.errors.push_back(r.error);
      continue;
    }
    ++s.completed;
    s.input_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    ttft.push_back(r.ttft * 1e3);
    e2el.push_back(r.e2e * 1e3);
    if (r.output_tokens > 1) tpot.push_back(tpot_of(r) * 1e3);
    for (std::size_t i = 1; i < r.chunk_times.size(); ++i) itl.push_back((r.chunk_times[i] - r.chunk_times[i - 1]) * 1e3);
    const bool ok = (!goal.ttft_ms || r.ttft * 1e3 <= *goal.ttft_ms) && (!goal.tpot_ms || tpot_of(r) * 1e3 <= *goal.tpot_ms) &&
                    (!goal.e2el_ms || r.e2e * 1e3 <= *goal.e2el_ms);
    good += ok;
  }
  s.by_model = by_answering_model(results);
  s.latency_ms["ttft"] = stats(ttft);
  s.latency_ms["tpot"] = stats(tpot);
  s.latency_ms["itl"] = stats(itl);
  s.latency_ms["e2el"] = stats(e2el);
  s.latency_ms["rejection"] = stats(rejection);
  if (duration > 0) {
    s.request_throughput = s.completed / duration;
    s.output_throughput = double(s.output_tokens) / duration;
    s.total_token_throughput = double(s.input_tokens + s.output_tokens) / duration;
    if (goal.ttft_ms || goal.tpot_ms || goal.e2el_ms) s.goodput = good / duration;
  }
  return s;
}

nlohmann::json to_json(const summary& s) {
  nlohmann::json j = {{"completed", s.completed},
                      {"failed", s.failed},
                      {"refused", s.refused},
                      {"duration", s.duration},
                      {"total_input_tokens", s.input_tokens},
                      {"total_output_tokens", s.output_tokens},
                      {"request_throughput", s.request_throughput},
                      {"output_throughput", s.output_throughput},
                      {"total_token_throughput", s.total_token_throughput},
                      {"request_goodput", s.goodput ? nlohmann::json(*s.goodput) : nlohmann::json(nullptr)},
                      {"errors", s.errors}};
  for (const auto& [metric, st] : s.latency_ms)
    for (const auto& [k, v] : st) j[k + "_" + metric + "_ms"] = v;
  for (const auto& [model, st] : s.by_model) {
    j["by_model"][model]["completed"] = st.at("completed");
    for (const char* k : {"mean", "median", "p90", "p99"}) j["by_model"][model][std::string(k) + "_ttft_ms"] = st.at(k);
  }
  return j;
}

std::string to_text(const summary& s) {
  char buf[256];
  std::string out = "============ Serving Benchmark Result ============\n";
  auto line = [&](const char* k, const std::string& v) {
    std::snprintf(buf, sizeof buf, "%-40s %s\n", k, v.c_str());
    out += buf;
  };
  auto num = [](double v, int prec = 2) {
    char b[64];
    std::snprintf(b, sizeof b, "%.*f", prec, v);
    return std::string(b);
  };
  line("Successful requests:", std::to_string(s.completed));
  line("Failed requests:", std::to_string(s.failed));
  if (s.refused > 0) {
    line("  of them refused (429/503):", std::to_string(s.refused));
    const auto& r = s.latency_ms.at("rejection");
    line("  rejection latency p50 / p99 (ms):", num(r.at("p50")) + " / " + num(r.at("p99")));
  }
  line("Benchmark duration (s):", num(s.duration));
  line("Total input tokens:", std::to_string(s.input_tokens));
  line("Total generated tokens:", std::to_string(s.output_tokens));
  line("Request throughput (req/s):", num(s.request_throughput));
  if (s.goodput) line("Request goodput (req/s):", num(*s.goodput));
  line("Output token throughput (tok/s):", num(s.output_throughput));
  line("Total token throughput (tok/s):", num(s.total_token_throughput));
  const std::pair<const char*, const char*> sections[] = {
      {"ttft", "Time to First Token"}, {"tpot", "Time per Output Token (excl. 1st token)"},
      {"itl", "Inter-token Latency"}, {"e2el", "End-to-end Latency"}};
  for (auto [key, title] : sections) {
    out += std::string("---------------") + title + "---------------\n";
    const auto& st = s.latency_ms.at(key);
    for (const char* k : {"mean", "median", "p90", "p99"}) {
      std::string label = std::string(k == std::string("mean") ? "Mean" : k == std::string("median") ? "Median" : k) + " " +
                          (std::string(key) == "e2el" ? "E2EL" : std::string(key) == "itl" ? "ITL" : std::string(key) == "tpot" ? "TPOT" : "TTFT") + " (ms):";
      line(label.c_str(), num(st.at(k)));
    }
  }
  if (!s.by_model.empty()) {
    out += "---------------Answered by model---------------\n";
    for (const auto& [model, st] : s.by_model) {
      const std::string label = "  " + model + ": requests, TTFT p50 / p99 (ms):";
      line(label.c_str(), std::to_string(int(st.at("completed"))) + ", " + num(st.at("median")) + " / " + num(st.at("p99")));
    }
  }
  for (const auto& e : s.errors) out += "error: " + e + "\n";
  out += "==================================================\n";
  return out;
}

std::vector<std::string> plot(const std::vector<request_result>& results, const std::string& prefix) {
  const std::string data = prefix + "-requests.dat", cdf = prefix + "-cdf.dat";
  {
    std::ofstream d(data);
    d << "# start_s ttft_ms e2el_ms tpot_ms\n";
    for (const auto& r : results)
      if (r.ok) d << r.start << ' ' << r.ttft * 1e3 << ' ' << r.e2e * 1e3 << ' ' << tpot_of(r) * 1e3 << '\n';
  }
  {
    std::ofstream c(cdf);
    auto block = [&](const std::string& name, std::vector<double> v) {
      std::sort(v.begin(), v.end());
      c << "# " << name << '\n';
      for (std::size_t i = 0; i < v.size(); ++i) c << std::max(v[i], 1e-3) << ' ' << double(i + 1) / double(v.size()) << '\n';
      c << "\n\n";
    };
    std::vector<double> ttft, tpot, itl, e2el;
    for (const auto& r : results) {
      if (!r.ok) continue;
      ttft.push_back(r.ttft * 1e3);
      e2el.push_back(r.e2e * 1e3);
      if (r.output_tokens > 1) tpot.push_back(tpot_of(r) * 1e3);
      for (std::size_t i = 1; i < r.chunk_times.size(); ++i) itl.push_back((r.chunk_times[i] - r.chunk_times[i - 1]) * 1e3);
    }
    block("ttft", ttft);
    block("tpot", tpot);
    block("itl", itl);
    block("e2el", e2el);
  }
  const std::string script = prefix + ".gp";
  {
    std::ofstream g(script);
    g << "set terminal pngcairo size 1000,600 noenhanced\n"
      << "set grid\n"
      << "set output '" << prefix << "-latency.png'\n"
      << "set title 'Latency over the run'\nset xlabel 'request start (s)'\nset ylabel 'ms'\nset logscale y\n"
      << "plot '" << data << "' using 1:3 with points pt 7 ps 0.5 title 'E2E latency', '" << data
      << "' using 1:2 with points pt 7 ps 0.5 title 'TTFT'\n"
      << "set output '" << prefix << "-cdf.png'\n"
      << "set title 'Latency CDFs'\nset xlabel 'ms'\nset ylabel 'fraction of samples'\nunset logscale y\nset logscale x\n"
      << "set key bottom right\n"
      << "plot '" << cdf << "' index 0 using 1:2 with lines lw 2 title 'TTFT', '' index 1 using 1:2 with lines lw 2 title 'TPOT', "
      << "'' index 2 using 1:2 with lines lw 2 title 'ITL', '' index 3 using 1:2 with lines lw 2 title 'E2E'\n";
  }
  const int rc = std::system(("gnuplot '" + script + "' 2>&1").c_str());
  if (rc != 0) throw input_error("gnuplot failed on " + script + " (is gnuplot-nox installed?)");
  return {prefix + "-latency.png", prefix + "-cdf.png"};
}

namespace {

struct compared {
  std::string metric;
  double canary = 0, baseline = 0;
};

std::vector<compared> compared_rows(const summary& c, const summary& b) {
  std::vector<compared> out;
  for (const char* m : {"ttft", "tpot", "itl", "e2el"})
    for (const char* p : {"p50", "p99"}) {
      auto get = [&](const summary& s) {
        auto it = s.latency_ms.find(m);
        return it == s.latency_ms.end() || !it->second.count(p) ? 0.0 : it->second.at(p);
      };
      out.push_back({std::string(m) + "_" + p + "_ms", get(c), get(b)});
    }
  auto share = [](int n, const summary& s) { return s.completed + s.failed > 0 ? double(n) / double(s.completed + s.failed) : 0.0; };
  out.push_back({"request_throughput", c.request_throughput, b.request_throughput});
  out.push_back({"output_throughput", c.output_throughput, b.output_throughput});
  out.push_back({"failed_share", share(c.failed, c), share(b.failed, b)});
  out.push_back({"refused_share", share(c.refused, c), share(b.refused, b)});
  return out;
}

}  // namespace

nlohmann::json versus_json(const summary& canary, const summary& baseline) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : compared_rows(canary, baseline))
    out.push_back({{"metric", r.metric}, {"canary", r.canary}, {"baseline", r.baseline},
                   {"ratio", r.baseline > 0 ? nlohmann::json(r.canary / r.baseline) : nlohmann::json(nullptr)}});
  return out;
}

std::string versus_text(const summary& canary, const summary& baseline, const std::string& canary_name, const std::string& baseline_name) {
  std::string out = "============ " + canary_name + " against " + baseline_name + " ============\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-24s %14s %14s %10s\n", "", "canary", "baseline", "ratio");
  out += buf;
  for (const auto& r : compared_rows(canary, baseline)) {
    const std::string ratio = r.baseline > 0 ? [&] {
      char b[32];
      std::snprintf(b, sizeof b, "%.2fx", r.canary / r.baseline);
      return std::string(b);
    }()
                                             : std::string("-");
    std::snprintf(buf, sizeof buf, "%-24s %14.3f %14.3f %10s\n", r.metric.c_str(), r.canary, r.baseline, ratio.c_str());
    out += buf;
  }
  return out + "==================================================\n";
}

}  // namespace troupe::bench
