// troupe plan: the cheapest topology that serves a trace within an SLO, found by simulating the
// cluster (runtime/sim/planner.h) on step and transfer profiles measured on the target hardware;
// prints the choice, the Pareto table of devices against goodput and SLO attainment with a text
// plot, optionally an SVG plot, and writes the chosen topology for `troupe deploy kubernetes`.
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <thread>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "kernels/cpu/thread_pool.h"
#include "runtime/common/error.h"
#include "runtime/kv/kv_cache.h"
#include "runtime/sim/planner.h"
#include "topology/engine_settings.h"
#include "topology/topology.h"
#include "tools/troupe/args.h"
#include "tools/troupe/commands.h"

namespace troupe::cli {

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

struct plan_inputs {
  sim::plan_space space;
  std::vector<std::string> profile_paths;
  std::string disagg_note;  // why disaggregated shapes were not searched, when they were not
};

plan_inputs read_space(const args& a) {
  plan_inputs in;
  sim::plan_space& s = in.space;
  s.max_replicas = int(a.get_int("max-replicas", 8));
  if (s.max_replicas < 1 || s.max_replicas > 4096) throw input_error("--max-replicas: 1 to 4096");
  s.chunks = int_list({"chunks", "token counts", "256,512,1024", "chunk", 1, 1 << 20}, a.get("chunks", "256,512,1024"));
  s.budgets = int_list({"budgets", "token counts", "1024,2048,4096", "budget", 1, 1 << 20}, a.get("budgets", "1024,2048,4096"));
  const std::string modes = a.get("modes", "agg,disagg");
  s.aggregated = s.disaggregated = false;
  for (const auto& m : split_commas(modes)) {
    if (m == "agg")
      s.aggregated = true;
    else if (m == "disagg")
      s.disaggregated = true;
    else
      throw input_error("--modes: agg and/or disagg, not " + m);
  }
  const auto profiles = a.get("profile");
  if (!profiles) throw input_error("--profile FILE is required (troupe bench engine --fit-profile FILE writes one)");
  in.profile_paths = split_commas(*profiles);
  for (const auto& path : in.profile_paths) {
    s.profiles.push_back(sim::read_profile_file(path, "profile"));
    const auto& p = s.profiles.back();
    if (s.disaggregated && !(p.transfer && p.kv_bytes_per_token > 0)) {
      const std::string why = path + " has no KV transfer fit (troupe bench kv-transfer --fit-profile " + path + ")";
      if (a.has("modes")) throw input_error("--modes disagg: " + why);
      in.disagg_note += "disaggregated topologies not searched for " + why + "\n";
    }
  }
  s.base.policy = a.get("policy", "least_loaded");
  s.base.kv_blocks = int(a.get_int("kv-blocks", 4096));
  s.base.sched.max_num_seqs = int(a.get_int("max-seqs", 128));
  s.base.report_interval_s = a.get_double("report-interval", 0);
  if (s.base.kv_blocks < 1) throw input_error("--kv-blocks: must be positive");
  if (s.base.sched.max_num_seqs < 1) throw input_error("--max-seqs: must be positive");
  if (!(s.base.report_interval_s >= 0)) throw input_error("--report-interval: seconds, at least 0");
  return in;
}

nlohmann::json point_json(const sim::plan_space& s, const std::vector<sim::slo_target>& slo, const sim::plan_point& p) {
  nlohmann::json observed = nlohmann::json::object();
  const auto names = split_commas(sim::format_slo(slo));
  for (std::size_t i = 0; i < slo.size(); ++i)
    observed[names[i].substr(0, names[i].find('='))] = std::isfinite(p.observed[i]) ? nlohmann::json(p.observed[i]) : nlohmann::json(nullptr);
  return {{"topology", p.candidate.describe(s)}, {"prefill_replicas", p.candidate.prefill_replicas}, {"replicas", p.candidate.replicas},
          {"chunk", p.candidate.chunk}, {"budget", p.candidate.budget},
          {"tensor_parallel", s.profiles[p.candidate.profile].tensor_parallel}, {"devices", p.devices}, {"meets", p.meets},
          {"goodput", p.goodput}, {"attainment", p.attainment}, {"observed_s", observed}, {"refused", p.refused}};
}

std::string seconds_text(double s) {
  char b[32];
  if (!std::isfinite(s)) return "endless";
  if (s < 1)
    std::snprintf(b, sizeof b, "%.0f ms", s * 1e3);
  else
    std::snprintf(b, sizeof b, "%.2f s", s);
  return b;
}

void print_table(const sim::plan_space& s, const std::vector<sim::slo_target>& slo, const std::vector<sim::plan_point>& rows) {
  std::printf("%7s  %-46s %10s %11s", "devices", "topology", "goodput/s", "attainment");
  for (const auto& name : split_commas(sim::format_slo(slo))) std::printf(" %10s", name.substr(0, name.find('=')).c_str());
  std::printf("  meets\n");
  for (const auto& p : rows) {
    std::printf("%7d  %-46s %10.2f %10.1f%%", p.devices, p.candidate.describe(s).c_str(), p.goodput, 100 * p.attainment);
    for (double o : p.observed) std::printf(" %10s", seconds_text(o).c_str());
    std::printf("  %s\n", p.meets ? "yes" : "no");
  }
}

// Attainment as a bar per Pareto row: the plot a terminal shows.
void print_plot(const std::vector<sim::plan_point>& rows) {
  std::printf("\nSLO attainment by devices (each # is 2.5%%; * marks a topology meeting the SLO)\n");
  for (const auto& p : rows) {
    const int n = int(std::lround(p.attainment * 40));
    std::printf("%4d |%s%s %5.1f%%%s\n", p.devices, std::string(std::size_t(n), '#').c_str(), std::string(std::size_t(40 - n), ' ').c_str(),
                100 * p.attainment, p.meets ? " *" : "");
  }
}

std::string xml_text(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return out;
}

// Every point tried: devices across, goodput up; the Pareto frontier joined by a line, points
// meeting the SLO filled.
std::string plot_svg(const sim::plan_space& s, const sim::plan_result& r, const std::string& title) {
  const double w = 640, h = 400, left = 60, bottom = 50, top = 40, right = 20;
  int max_dev = 1;
  double max_good = 1e-9;
  for (const auto& p : r.tried) max_dev = std::max(max_dev, p.devices), max_good = std::max(max_good, p.goodput);
  auto x = [&](double d) { return left + (w - left - right) * d / max_dev; };
  auto y = [&](double g) { return h - bottom - (h - bottom - top) * g / (max_good * 1.1); };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"" << left << "\" y=\"24\" font-size=\"14\">" << xml_text(title) << "</text>\n"
    << "<line x1=\"" << left << "\" y1=\"" << y(0) << "\" x2=\"" << w - right << "\" y2=\"" << y(0) << "\" stroke=\"black\"/>\n"
    << "<line x1=\"" << left << "\" y1=\"" << y(0) << "\" x2=\"" << left << "\" y2=\"" << top << "\" stroke=\"black\"/>\n"
    << "<text x=\"" << (w / 2) << "\" y=\"" << h - 12 << "\" text-anchor=\"middle\">devices</text>\n"
    << "<text x=\"16\" y=\"" << h / 2 << "\" transform=\"rotate(-90 16 " << h / 2 << ")\" text-anchor=\"middle\">goodput (requests/s within the SLO)</text>\n";
  for (int d = 1; d <= max_dev; ++d)
    o << "<text x=\"" << x(d) << "\" y=\"" << y(0) + 16 << "\" text-anchor=\"middle\">" << d << "</text>\n";
  for (int k = 0; k <= 4; ++k)
    o << "<text x=\"" << left - 6 << "\" y=\"" << y(max_good * k / 4) + 4 << "\" text-anchor=\"end\">" << std::lround(max_good * k / 4 * 100) / 100.0
      << "</text>\n";
  o << "<polyline fill=\"none\" stroke=\"#1f77b4\" points=\"";
  for (const auto& p : r.pareto) o << x(p.devices) << "," << y(p.goodput) << " ";
  o << "\"/>\n";
  for (const auto& p : r.tried)
    o << "<circle cx=\"" << x(p.devices) << "\" cy=\"" << y(p.goodput) << "\" r=\"4\" stroke=\"#1f77b4\" fill=\""
      << (p.meets ? "#1f77b4" : "white") << "\"><title>" << p.candidate.describe(s) << "</title></circle>\n";
  o << "</svg>\n";
  return o.str();
}

// --config: what the simulator runs for a topology: its pools (one aggregated, or one prefill
// and one decode), scheduler, KV blocks (kv_memory over the model's KV per token), router and
// admission. On the CPU backend, replicas placed on one node share its cores (one device) when
// their kernel threads (TROUPE_THREADS, as a node started here would use) outnumber this
// machine's cores; else each has its own.
sim::sim_config sim_config_of(const topology::topology_config& t, const sim::profile_file& profile, const std::string& profile_path) {
  sim::sim_config c;
  const topology::pool_spec *both = nullptr, *prefill = nullptr, *decode = nullptr;
  for (const auto& p : t.pools) {
    const topology::pool_spec*& slot = p.role == topology::pool_role::both ? both : p.role == topology::pool_role::prefill ? prefill : decode;
    if (slot || !p.model.empty())
      throw input_error("--config: pool " + p.name + ": the simulator runs one pool that does both, or one prefill and one decode pool");
    slot = &p;
  }
  if (both ? (prefill || decode) : !(prefill && decode))
    throw input_error("--config: the simulator runs one pool that does both, or one prefill and one decode pool");
  std::vector<const topology::pool_spec*> pools = both ? std::vector{both} : std::vector{prefill, decode};
  std::map<std::string, std::uint32_t> node_device;
  for (const auto* p : pools)
    for (int i = 0; i < p->replicas; ++i) {
      const std::string& node = p->nodes[std::size_t(i) % p->nodes.size()];
      c.device.push_back(node_device.emplace(node, std::uint32_t(node_device.size())).first->second);
    }
  c.replicas = int(c.device.size());
  std::map<std::uint32_t, int> on_device;
  for (auto d : c.device) ++on_device[d];
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  bool crowded = false;
  for (const auto& [d, n] : on_device) crowded = crowded || n * kernels::num_threads() > cores;
  if (t.model.backend != topology::backend_kind::cpu || !crowded) c.device.clear();  // a device per replica
  c.prefill_replicas = both ? 0 : prefill->replicas;
  c.sched = t.scheduler.limits;
  c.prefix_caching = t.scheduler.prefix_caching;
  const model::model_config m = topology::sim_shape(t);
  c.kv_blocks = kv::kv_cache::blocks_in(t.scheduler.kv_memory_bytes, c.sched.block_size, t.scheduler.kv_dtype, m.num_hidden_layers,
                                        m.num_key_value_heads, m.head_dim);
  c.policy = t.router.policy;
  c.params = t.router.params;
  c.max_queued = t.admission.cfg.max_queued;
  if (t.autoscaler.cfg.enabled) {  // its replicas start warm (the pool's warm_replicas keep them loaded)
    if (!both) throw input_error("--config: [autoscaler]: the simulator scales a pool that does both only");
    c.autoscale = t.autoscaler.cfg;
    c.autoscale_min = both->min_replicas;
    c.autoscale_max = both->max_replicas;
    c.device.clear();  // slots beyond the replicas at the start: a device each
  }
  profile.price_serving(c);
  if (prefill) {
    const double kv_bytes = double(kv::kv_cache::bytes_per_token(t.scheduler.kv_dtype, m.num_hidden_layers, m.num_key_value_heads, m.head_dim));
    sim::profile_file priced = profile;
    priced.kv_bytes_per_token = kv_bytes;  // the topology's KV type, not the one measured
    c.transfer = priced.transfer_cost(profile_path);
  }
  return c;
}

nlohmann::json spread(std::vector<double> v) {
  nlohmann::json j = nlohmann::json::object();
  if (!v.empty())
    for (auto [name, p] : {std::pair{"p50", 0.5}, std::pair{"p90", 0.9}, std::pair{"p99", 0.99}}) j[name] = sim::nearest_rank(v, p);
  return j;
}

// troupe plan --config TOPOLOGY: one topology's predicted latencies and goodput on the trace.
int predict_topology(const args& a, const std::string& path, const std::vector<sim::slo_target>& slo, const workload::public_trace& trace) {
  for (const char* flag : {"max-replicas", "modes", "chunks", "budgets", "policy", "kv-blocks", "max-seqs", "report-interval", "out",
                           "plot", "exhaustive"})
    if (a.has(flag)) throw input_error(std::string("--") + flag + ": a search setting; with --config the topology gives it");
  const auto profiles = split_commas(a.get("profile", ""));
  if (profiles.size() != 1) throw input_error("--config: one --profile, measured for the topology's replicas");
  const sim::profile_file profile = sim::read_profile_file(profiles[0], "profile");
  topology::topology_config topo = topology::load_topology(path);
  if (const auto model = a.get("model")) topo.model.path = *model;  // as troupe serve --model
  const sim::sim_config cfg = sim_config_of(topo, profile, profiles[0]);
  const auto requests = sim::trace_requests(trace, cfg.sched.block_size);
  const sim::sim_result r = sim::simulate(cfg, profile.served_step(), requests);
  std::vector<double> ttft, itl, e2e;
  const sim::slo_limits limits(slo);
  std::size_t met = 0;
  for (const auto& o : r.requests) {
    if (o.refused) continue;
    ttft.push_back(o.ttft_s);
    e2e.push_back(o.e2e_s);
    if (o.mean_itl_s > 0) itl.push_back(o.mean_itl_s);
    met += limits.met(o);
  }
  const double duration = r.end_s - requests.front().arrival_s;
  const nlohmann::json j{{"config", path}, {"requests", requests.size()}, {"refused", r.refused}, {"replicas", cfg.replicas},
                         {"prefill_replicas", cfg.prefill_replicas}, {"kv_blocks", cfg.kv_blocks},
                         {"devices", cfg.device.empty() ? cfg.replicas : int(std::set(cfg.device.begin(), cfg.device.end()).size())},
                         {"duration_s", duration}, {"ttft_s", spread(ttft)}, {"itl_s", spread(itl)}, {"e2e_s", spread(e2e)},
                         {"goodput", duration > 0 ? double(met) / duration : 0.0}, {"attainment", double(met) / double(requests.size())},
                         {"replica_seconds", r.replica_seconds}, {"scale_events", r.scaling.size()}};
  if (a.has("json")) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s on %s: %zu requests, %zu refused, over %.1f s simulated\n", path.c_str(), profiles[0].c_str(), requests.size(), r.refused, duration);
  for (auto [key, name] : {std::pair{"ttft_s", "TTFT"}, std::pair{"itl_s", "ITL"}, std::pair{"e2e_s", "E2E"}})
    if (!j[key].empty())
      std::printf("  %-4s p50 %s  p90 %s  p99 %s\n", name, seconds_text(j[key]["p50"].get<double>()).c_str(),
                  seconds_text(j[key]["p90"].get<double>()).c_str(), seconds_text(j[key]["p99"].get<double>()).c_str());
  std::printf("  goodput %.2f requests/s, attainment %.1f%% (%s)\n", j["goodput"].get<double>(), 100 * j["attainment"].get<double>(),
              sim::format_slo(slo).c_str());
  return 0;
}

}  // namespace

// The cheapest topology found, as TOML with a comment saying how it was chosen.
std::string chosen_topology(const args& a, const plan_inputs& in, const sim::plan_space& s, const std::vector<sim::slo_target>& slo,
                            const sim::plan_result& r, const std::string& trace_path) {
  std::ostringstream comment;
  comment << "Written by troupe plan --trace " << trace_path << " --slo " << sim::format_slo(slo) << "\n"
          << "The cheapest topology meeting the SLO in simulation: " << r.best.candidate.describe(s) << "; goodput "
          << r.best.goodput << " requests/s, attainment " << 100 * r.best.attainment << "%.\n"
          << "Step profile: " << in.profile_paths[r.best.candidate.profile] << " (" << s.profiles[r.best.candidate.profile].source << ").";
  sim::topology_options t;
  t.model = a.get("model", "models/kjv");
  t.kv_blocks = s.base.kv_blocks;
  t.kv_bytes_per_token = s.profiles[r.best.candidate.profile].kv_bytes_per_token;
  t.policy = s.base.policy;
  t.max_seqs = s.base.sched.max_num_seqs;
  t.block_size = s.base.sched.block_size;
  t.comment = comment.str();
  return sim::plan_topology_toml(s, r.best.candidate, t);
}

int cmd_plan(const args& a) {
  const auto trace_path = a.get("trace");
  if (!trace_path) throw input_error("--trace FILE is required (Azure, Mooncake, BurstGPT or troupe CSV)");
  const auto slo_spec = a.get("slo");
  if (!slo_spec) throw input_error("--slo is required, as ttft_p99=2s,itl_p99=100ms");
  const std::vector<sim::slo_target> slo = sim::parse_slo(*slo_spec);
  const workload::public_trace trace = workload::read_public_trace(*trace_path);
  if (trace.arrivals.empty()) throw input_error("--trace: " + *trace_path + " holds no request");
  if (const auto config = a.get("config")) return predict_topology(a, *config, slo, trace);
  const plan_inputs in = read_space(a);
  const sim::plan_space& s = in.space;
  const auto requests = sim::trace_requests(trace, s.base.sched.block_size);
  std::fputs(in.disagg_note.c_str(), stderr);

  const sim::plan_result r = a.has("exhaustive") ? sim::brute_force_plan(s, slo, requests) : sim::plan(s, slo, requests);
  // Nothing is written where the command happens to run: the topology goes to --out, else to stdout.
  const std::optional<std::string> out_path = a.get("out");
  const bool json_out = a.has("json");
  if (const auto svg = a.get("plot")) {
    std::ofstream f(*svg);
    f << plot_svg(s, r, "troupe plan: " + *trace_path + ", " + sim::format_slo(slo));
    if (!f) throw input_error("--plot: cannot write " + *svg);
  }
  const std::string topology_text = r.found ? chosen_topology(a, in, s, slo, r, *trace_path) : std::string();
  if (r.found && out_path) {
    std::ofstream f(*out_path);
    f << topology_text;
    if (!f) throw input_error("--out: cannot write " + *out_path);
  }
  if (json_out) {
    nlohmann::json pareto = nlohmann::json::array(), tried = nlohmann::json::array();
    for (const auto& p : r.pareto) pareto.push_back(point_json(s, slo, p));
    for (const auto& p : r.tried) tried.push_back(point_json(s, slo, p));
    std::printf("%s\n", nlohmann::json{{"trace", *trace_path},
                                       {"format", workload::trace_format_name(trace.format)},
                                       {"requests", requests.size()},
                                       {"slo", sim::format_slo(slo)},
                                       {"found", r.found},
                                       {"best", r.found ? point_json(s, slo, r.best) : nlohmann::json(nullptr)},
                                       {"topology_file", r.found && out_path ? nlohmann::json(*out_path) : nlohmann::json(nullptr)},
                                       {"topology", r.found ? nlohmann::json(topology_text) : nlohmann::json(nullptr)},
                                       {"pareto", pareto},
                                       {"tried", tried}}
                            .dump(2)
                            .c_str());
    return r.found ? 0 : 1;
  }
  std::printf("trace %s: %s, %zu requests over %.1f s; SLO %s; %zu topologies simulated\n\n", trace_path->c_str(),
              workload::trace_format_name(trace.format), requests.size(), requests.back().arrival_s, sim::format_slo(slo).c_str(),
              r.tried.size());
  std::printf("Pareto frontier (devices against goodput; no cheaper topology serves more within the SLO):\n");
  print_table(s, slo, r.pareto);
  print_plot(r.pareto);
  if (!r.found) {
    std::printf("\nno topology of at most %d replicas meets the SLO: raise --max-replicas or relax --slo\n", s.max_replicas);
    return 1;
  }
  std::printf("\ncheapest meeting the SLO: %s on %d device%s, goodput %.2f requests/s, attainment %.1f%%\n",
              r.best.candidate.describe(s).c_str(), r.best.devices, r.best.devices == 1 ? "" : "s", r.best.goodput, 100 * r.best.attainment);
  if (out_path)
    std::printf("wrote %s (troupe deploy kubernetes %s -o DIR turns it into manifests)\n", out_path->c_str(), out_path->c_str());
  else
    std::printf("\nits topology (-o FILE writes it to a file):\n\n%s", topology_text.c_str());
  return 0;
}

}  // namespace troupe::cli
