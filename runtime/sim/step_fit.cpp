#include "runtime/sim/step_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/common/error.h"

namespace troupe::sim {

namespace {

// A prefill of n tokens as one step: each reads the positions up to its own.
step_sample prefill_step(std::int64_t n, double seconds) { return {n, n * (n + 1) / 2, seconds}; }

constexpr int fit_terms = 4;  // base, per token, per context position, per decode token

// A sample's row, divided by its measured time: the fit then minimizes relative errors, so a
// 0.2 ms decode step counts as much as a 50 ms prefill (absolute errors would let the prefill
// decide alone). Its target is then 1.
std::array<double, fit_terms> fit_row(const step_sample& s) {
  return {1.0 / s.seconds, double(s.tokens) / s.seconds, double(s.context_reads) / s.seconds, double(s.decode_tokens) / s.seconds};
}

// Least squares over the rows above, in the columns `use` names, each column scaled to its
// largest value so that a column of ones and one of millions are solved alike; unused columns
// get 0. Gaussian elimination with partial pivoting on the normal equations (at most 3x3). A
// singular column (all zero, or a multiple of one kept before it) gets 0.
std::array<double, fit_terms> fit_solve(std::span<const step_sample> samples, const std::array<bool, fit_terms>& use) {
  std::array<double, fit_terms> scale{};
  for (const auto& s : samples) {
    const auto r = fit_row(s);
    for (int j = 0; j < fit_terms; ++j) scale[std::size_t(j)] = std::max(scale[std::size_t(j)], std::abs(r[std::size_t(j)]));
  }
  double a[fit_terms][fit_terms + 1] = {};
  for (const auto& s : samples) {
    const auto r = fit_row(s);
    for (int i = 0; i < fit_terms; ++i) {
      if (!use[std::size_t(i)] || scale[std::size_t(i)] == 0) continue;
      const double xi = r[std::size_t(i)] / scale[std::size_t(i)];
      for (int j = 0; j < fit_terms; ++j)
        if (use[std::size_t(j)] && scale[std::size_t(j)] > 0) a[i][j] += xi * r[std::size_t(j)] / scale[std::size_t(j)];
      a[i][fit_terms] += xi;
    }
  }
  std::array<double, fit_terms> x{};
  std::array<bool, fit_terms> solved{};
  for (int col = 0; col < fit_terms; ++col) {
    int pivot = -1;
    for (int i = col; i < fit_terms; ++i)
      if (pivot < 0 || std::abs(a[i][col]) > std::abs(a[pivot][col])) pivot = i;
    if (std::abs(a[pivot][col]) < 1e-12) continue;  // nothing left in this column
    std::swap(a[pivot], a[col]);
    for (int i = 0; i < fit_terms; ++i) {
      if (i == col || a[i][col] == 0) continue;
      const double f = a[i][col] / a[col][col];
      for (int j = col; j <= fit_terms; ++j) a[i][j] -= f * a[col][j];
    }
    solved[std::size_t(col)] = true;
  }
  for (int i = 0; i < fit_terms; ++i)
    if (solved[std::size_t(i)]) x[std::size_t(i)] = a[i][fit_terms] / a[i][i] / scale[std::size_t(i)];
  return x;
}

double fit_predicted(const step_profile& p, const step_sample& s) { return p.seconds(s.tokens, s.context_reads, s.decode_tokens); }

}  // namespace

step_profile fit_step_profile(std::span<const step_sample> samples) {
  bool any = false;
  for (const auto& s : samples) {
    if (!(s.seconds > 0) || !std::isfinite(s.seconds)) throw input_error("step profile: a sample's time must be a positive number of seconds");
    any = any || s.tokens > 0;
  }
  if (!any) throw input_error("step profile: no measured step with tokens to fit");
  // Drop the most negative coefficient until none is: at most four solves.
  std::array<bool, fit_terms> use{true, true, true, true};
  std::array<double, fit_terms> x = fit_solve(samples, use);
  for (int round = 0; round < fit_terms; ++round) {
    const auto worst = std::min_element(x.begin(), x.end());
    if (*worst >= 0) break;
    use[std::size_t(worst - x.begin())] = false;
    x = fit_solve(samples, use);
  }
  for (double& v : x) v = std::max(v, 0.0);
  return {x[0], x[1], x[2], x[3]};
}

std::vector<step_sample> engine_bench_samples(const nlohmann::json& bench, const std::string& source) {
  auto need = [&](const nlohmann::json& o, const char* key, const std::string& where) -> const nlohmann::json& {
    if (!o.is_object() || !o.contains(key) || !o[key].is_number())
      throw input_error(source + ": " + where + key + " is missing or not a number (is this troupe bench engine --json?)");
    return o[key];
  };
  std::vector<step_sample> out;
  if (!bench.is_object() || !bench.contains("prefill") || !bench.contains("decode") || !bench["decode"].is_array())
    throw input_error(source + ": no prefill and decode results (is this troupe bench engine --json?)");
  const auto& pre = bench["prefill"];
  const std::int64_t p = need(pre, "tokens", "prefill.").get<std::int64_t>();
  const double tps = need(pre, "tokens_per_second", "prefill.").get<double>();
  if (p > 0 && tps > 0) out.push_back(prefill_step(p, double(p) / tps));
  if (bench.contains("prefill_fit") && bench["prefill_fit"].is_array())  // shorter prompts: the context term apart from the token's
    for (const auto& row : bench["prefill_fit"]) {
      const std::int64_t n = need(row, "tokens", "prefill_fit[].").get<std::int64_t>();
      const double secs = need(row, "seconds", "prefill_fit[].").get<double>();
      if (n > 0 && secs > 0) out.push_back(prefill_step(n, secs));
    }
  for (const auto& row : bench["decode"]) {
    const std::int64_t b = need(row, "batch", "decode[].").get<std::int64_t>();
    const std::int64_t c = need(row, "context", "decode[].").get<std::int64_t>();
    out.push_back({b, b * (c + 1), need(row, "step_ms", "decode[].").get<double>() * 1e-3, b});
  }
  return out;
}

profile_file fit_profile_file(std::span<const step_sample> samples, const std::string& source) {
  profile_file f;
  f.step = fit_step_profile(samples);
  f.samples = samples.size();
  f.source = source;
  for (const auto& s : samples) f.worst_error = std::max(f.worst_error, std::abs(fit_predicted(f.step, s) - s.seconds) / s.seconds);
  return f;
}

transfer_fit fit_transfer(std::span<const transfer_sample> samples, const std::string& source) {
  std::vector<step_sample> as_steps;
  for (const auto& t : samples) as_steps.push_back({std::int64_t(t.bytes), 0, t.seconds});
  const step_profile f = fit_step_profile(as_steps);
  return {f.base_s, f.per_token_s, source};
}

step_profile profile_file::served_step() const {
  step_profile s = step;
  if (serving) s.base_s += serving->step_s;
  return s;
}

void profile_file::price_serving(sim_config& c) const {
  if (!serving) return;
  c.first_token_s = serving->first_token_s;
  c.stream_s = serving->stream_s;
  c.first_token_jitter_s = serving->first_token_jitter_s;
  c.itl_jitter_s = serving->itl_jitter_s;
}

transfer_profile profile_file::copy_cost(const std::string& path) const {
  if (!transfer) throw input_error(path + ": no \"transfer\" fit to price a disaggregated topology (troupe bench kv-transfer --fit-profile " + path + ")");
  if (!(kv_bytes_per_token > 0)) throw input_error(path + ": no kv_bytes_per_token to price a KV transfer (troupe bench engine --fit-profile writes it)");
  return {transfer->base_s, transfer->per_byte_s * kv_bytes_per_token};
}

transfer_profile profile_file::transfer_cost(const std::string& path) const {
  transfer_profile t = copy_cost(path);
  if (serving) t.base_s += serving->handoff_s;
  return t;
}

std::string format_profile_file(const profile_file& p) {
  nlohmann::json j{{"step", {{"base_s", p.step.base_s}, {"per_token_s", p.step.per_token_s}, {"per_context_s", p.step.per_context_s},
                             {"per_decode_token_s", p.step.per_decode_token_s}}},
                   {"samples", p.samples},
                   {"worst_error", p.worst_error},
                   {"source", p.source},
                   {"kv_bytes_per_token", p.kv_bytes_per_token},
                   {"tensor_parallel", p.tensor_parallel}};
  if (p.transfer) j["transfer"] = {{"base_s", p.transfer->base_s}, {"per_byte_s", p.transfer->per_byte_s}, {"source", p.transfer->source}};
  if (p.serving) {
    j["serving"] = {{"step_s", p.serving->step_s}, {"first_token_s", p.serving->first_token_s}, {"source", p.serving->source}};
    if (p.serving->handoff_s > 0) j["serving"]["handoff_s"] = p.serving->handoff_s;
    if (p.serving->stream_s > 0) j["serving"]["stream_s"] = p.serving->stream_s;
    if (!p.serving->first_token_jitter_s.empty()) j["serving"]["first_token_jitter_s"] = p.serving->first_token_jitter_s;
    if (!p.serving->itl_jitter_s.empty()) j["serving"]["itl_jitter_s"] = p.serving->itl_jitter_s;
  }
  return j.dump(2) + "\n";
}

namespace {

// serving.KEY: a list of finite numbers of seconds (of either sign), at most 4,096; absent: empty.
std::vector<double> seconds_list(const nlohmann::json& serving, const char* key, const std::string& path) {
  std::vector<double> out;
  if (!serving.contains(key)) return out;
  const auto& v = serving[key];
  if (!v.is_array() || v.size() > 4096) throw input_error(path + ": serving." + key + " must be a list of at most 4096 numbers of seconds");
  for (const auto& x : v) {
    if (!x.is_number() || !std::isfinite(x.get<double>())) throw input_error(path + ": serving." + key + " must hold numbers of seconds");
    out.push_back(x.get<double>());
  }
  return out;
}

}  // namespace

profile_file parse_profile_file(const std::string& text, const std::string& path) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) throw input_error(path + ": not JSON (a step profile is what troupe bench engine --fit-profile writes)");
  if (!j.is_object() || !j.contains("step") || !j["step"].is_object()) throw input_error(path + ": no \"step\" object");
  profile_file p;
  for (auto [key, out] : {std::pair{"base_s", &p.step.base_s}, std::pair{"per_token_s", &p.step.per_token_s},
                          std::pair{"per_context_s", &p.step.per_context_s}}) {
    const auto& v = j["step"].value(key, nlohmann::json());
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
      throw input_error(path + ": step." + key + " must be a number of seconds, at least 0");
    *out = v.get<double>();
  }
  if (j["step"].contains("per_decode_token_s")) {  // files written before it have none: 0
    const auto& v = j["step"]["per_decode_token_s"];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
      throw input_error(path + ": step.per_decode_token_s must be a number of seconds, at least 0");
    p.step.per_decode_token_s = v.get<double>();
  }
  if (p.step.base_s == 0 && p.step.per_token_s == 0 && p.step.per_context_s == 0) throw input_error(path + ": every step would take no time");
  // What the fit was made from: shown, never computed with.
  if (j.contains("samples") && j["samples"].is_number_unsigned()) p.samples = j["samples"].get<std::size_t>();
  if (j.contains("worst_error") && j["worst_error"].is_number()) p.worst_error = j["worst_error"].get<double>();
  if (j.contains("source") && j["source"].is_string()) p.source = j["source"].get<std::string>();
  auto number = [&](const nlohmann::json& o, const char* key, const std::string& where) {
    const auto& v = o.value(key, nlohmann::json());
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
      throw input_error(path + ": " + where + key + " must be a number, at least 0");
    return v.get<double>();
  };
  if (j.contains("kv_bytes_per_token")) p.kv_bytes_per_token = number(j, "kv_bytes_per_token", "");
  if (j.contains("tensor_parallel")) {
    if (!j["tensor_parallel"].is_number_integer() || j["tensor_parallel"].get<int>() < 1)
      throw input_error(path + ": tensor_parallel must be a whole number of ranks, at least 1");
    p.tensor_parallel = j["tensor_parallel"].get<int>();
  }
  if (j.contains("transfer")) {
    if (!j["transfer"].is_object()) throw input_error(path + ": \"transfer\" must be an object");
    transfer_fit t{number(j["transfer"], "base_s", "transfer."), number(j["transfer"], "per_byte_s", "transfer."), ""};
    if (j["transfer"].contains("source") && j["transfer"]["source"].is_string()) t.source = j["transfer"]["source"].get<std::string>();
    p.transfer = t;
  }
  if (j.contains("serving")) {
    if (!j["serving"].is_object()) throw input_error(path + ": \"serving\" must be an object");
    profile_file::serving_fit f{number(j["serving"], "step_s", "serving."), number(j["serving"], "first_token_s", "serving."), ""};
    if (j["serving"].contains("source") && j["serving"]["source"].is_string()) f.source = j["serving"]["source"].get<std::string>();
    if (j["serving"].contains("handoff_s")) f.handoff_s = number(j["serving"], "handoff_s", "serving.");
    if (j["serving"].contains("stream_s")) f.stream_s = number(j["serving"], "stream_s", "serving.");
    f.first_token_jitter_s = seconds_list(j["serving"], "first_token_jitter_s", path);
    f.itl_jitter_s = seconds_list(j["serving"], "itl_jitter_s", path);
    p.serving = f;
  }
  return p;
}

namespace {

double median_at_least_0(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
  return std::max(0.0, v[v.size() / 2]);
}

// A served request's decode steps on `step`, each priced at the context halfway through its answer.
double decode_seconds(const step_profile& step, const served_request& r) {
  return double(r.output_tokens - 1) * step.seconds(1, r.prompt_tokens + r.output_tokens / 2 + 1, 1);
}

// y = slope x + intercept through points (x, y), by medians (Theil-Sen): the slope is the median
// of the slopes between every two points of different x (all x equal: the median of y / x, the
// intercept 0), at least 0; the intercept the median of y - slope x, at least 0.
struct median_line {
  double slope = 0, intercept = 0;
};
median_line fit_median_line(std::span<const std::pair<double, double>> xy) {
  std::vector<double> slopes;
  for (std::size_t i = 0; i < xy.size(); ++i)
    for (std::size_t j = i + 1; j < xy.size(); ++j)
      if (xy[i].first != xy[j].first) slopes.push_back((xy[j].second - xy[i].second) / (xy[j].first - xy[i].first));
  if (slopes.empty()) {
    for (const auto& [x, y] : xy) slopes.push_back(y / x);
    return {median_at_least_0(std::move(slopes)), 0};
  }
  const double slope = median_at_least_0(std::move(slopes));
  std::vector<double> intercepts;
  for (const auto& [x, y] : xy) intercepts.push_back(y - slope * x);
  return {slope, median_at_least_0(std::move(intercepts))};
}

}  // namespace

bool tells_stream_apart(std::span<const served_request> served) {
  return std::any_of(served.begin(), served.end(), [&](const served_request& r) { return r.output_tokens != served.front().output_tokens; });
}

profile_file::serving_fit fit_serving(const profile_file& p, std::span<const served_request> served, const std::string& source) {
  std::vector<std::pair<double, double>> decode;  // (decode steps, first-to-last-token time less their forward)
  std::vector<double> first;
  for (const auto& r : served) {
    decode.emplace_back(r.output_tokens - 1, r.e2e_s - r.ttft_s - decode_seconds(p.step, r));
    first.push_back(r.ttft_s - fit_predicted(p.step, prefill_step(r.prompt_tokens, 0)));
  }
  const median_line line = fit_median_line(decode);
  profile_file::serving_fit f{line.slope, median_at_least_0(first), source, p.serving ? p.serving->handoff_s : 0.0};
  f.stream_s = line.intercept;
  for (std::size_t i = 0; i < served.size(); ++i) {
    f.first_token_jitter_s.push_back(first[i] - f.first_token_s);
    f.itl_jitter_s.push_back((decode[i].second - f.stream_s) / decode[i].first - f.step_s);
  }
  return f;
}

double fit_handoff(const profile_file& p, std::span<const served_request> served, const std::string& path) {
  const transfer_profile copy = p.copy_cost(path);
  const step_profile step = p.served_step();
  std::vector<double> handoff;
  for (const auto& r : served)
    handoff.push_back(r.e2e_s - r.ttft_s - decode_seconds(step, r) - p.serving->stream_s - copy.seconds(r.prompt_tokens));
  return median_at_least_0(std::move(handoff));
}

profile_file read_profile_file(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw input_error("--" + flag + ": cannot read " + path + " (troupe bench engine --fit-profile " + path + " writes one)");
  return parse_profile_file(text.str(), path);
}

void write_profile_file(const std::string& path, const profile_file& p, const std::string& flag) {
  std::ofstream out(path);
  out << format_profile_file(p);
  if (!out) throw input_error("--" + flag + ": cannot write " + path);
}

}  // namespace troupe::sim
