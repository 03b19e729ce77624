// troupe bench engine: prefill and decode throughput against the machine's own roofline.
#include <algorithm>
#include <fstream>
#include <functional>
#include <chrono>
#include <map>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kquant.h"
#include "kernels/cpu/kquant_weight.h"
#include "kernels/cpu/roofline.h"
#include "kernels/cpu/thread_pool.h"
#include "runtime/common/error.h"
#include "runtime/kv/block_hash.h"
#include "tools/troupe/kv_held.h"
#include "runtime/model/llama_model.h"
#include "runtime/model/op_profile.h"
#include "runtime/sim/step_fit.h"
#include "tools/troupe/args.h"
#include "tools/troupe/commands.h"
#include "tools/troupe/model_folder.h"

namespace troupe::cli {

namespace {

using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

// Sequences laid out in a private cache: sequence s owns blocks [s * per_seq, (s+1) * per_seq).
struct bench_cache {
  int block_size = 16, per_seq;
  std::vector<std::vector<std::int32_t>> tables;
  kv::kv_cache cache;
  bench_cache(const model::model_config& c, int seqs, int max_len, kernels::dtype kv_type)
      : per_seq((max_len + 15) / 16),
        cache({seqs * ((max_len + 15) / 16), 16, kv_type}, c.num_hidden_layers, c.num_key_value_heads, c.head_dim) {
    for (int s = 0; s < seqs; ++s) {
      tables.emplace_back(std::size_t(per_seq));
      std::iota(tables.back().begin(), tables.back().end(), s * per_seq);
    }
  }
};

// Attention multiply-adds for `tokens` queries at positions p0.. over their causal context.
// The int8 rate the projections could reach if each format ran at the ceiling of its own scale
// run (kernels::measure_scaled_dot_ceiling), or 0 when a projection is not a K-quant.
double kquant_projection_ceiling(const std::map<std::string, std::size_t>& bytes_by_format) {
  std::map<std::size_t, double> ceiling_by_run;
  double weights = 0, seconds = 0;  // per weight at the ceiling rates
  for (auto& [name, bytes] : bytes_by_format) {
    const auto t = kernels::parse_kquant_type(name);
    if (!t) return 0;
    const std::size_t run = kernels::kquant_scale_run(*t);
    if (!ceiling_by_run.count(run)) ceiling_by_run[run] = kernels::measure_scaled_dot_ceiling(run);
    const double record = kernels::kquant_panelled(*t) ? double(kernels::kquant_record_bytes(*t)) / kernels::kquant_panel
                                                       : double(kernels::kquant_block_bytes(*t));
    const double n = double(bytes) / record * kernels::kquant_block;
    weights += n;
    seconds += n / ceiling_by_run[run];
  }
  return seconds > 0 ? weights / seconds : 0;
}

double attention_flops(const model::model_config& c, double queries, double mean_context) {
  return 4.0 * c.num_hidden_layers * c.num_attention_heads * c.head_dim * queries * mean_context;
}

// `seqs` prompts of `len` made-up tokens in bc's sequences, one batch; logits of its last row.
model::forward_batch prompts(const bench_cache& bc, int seqs, int len, int vocab) {
  model::forward_batch b;
  for (int s = 0; s < seqs; ++s)
    for (int p = 0; p < len; ++p) {
      b.tokens.push_back((s * 31 + p * 7919 + 13) % vocab);
      b.positions.push_back(p);
      b.tables.push_back(bc.tables[std::size_t(s)].data());
    }
  b.logit_rows.push_back(std::int32_t(b.tokens.size() - 1));
  return b;
}

// Median seconds of a decode step of `seqs` sequences at `context`, each feeding `rows` positions
// (1: plain decode; 1 + k: a verify step of k proposals, every row's logits computed).
double decode_step_seconds(const model::llama_model& m, kernels::dtype kv_type, int seqs, int rows, int context,
                           int steps, std::vector<float>& logits, model::forward_workspace& ws) {
  const auto& c = m.config();
  bench_cache bc(c, seqs, context + (steps + 2) * rows, kv_type);
  m.forward(prompts(bc, seqs, context, c.vocab_size), bc.cache, logits.data(), ws);
  logits.resize(std::max(logits.size(), std::size_t(c.vocab_size) * std::size_t(seqs * rows)));
  std::vector<double> times;
  for (int st = 0; st <= steps; ++st) {  // step 0 warms up
    if (st == 1) model::op_profile::reset();
    model::forward_batch d;
    for (int s = 0; s < seqs; ++s)
      for (int r = 0; r < rows; ++r) {
        d.logit_rows.push_back(std::int32_t(d.tokens.size()));
        d.tokens.push_back((s * 17 + st * 101 + r * 7) % c.vocab_size);
        d.positions.push_back(context + st * rows + r);
        d.tables.push_back(bc.tables[std::size_t(s)].data());
      }
    auto t0 = clock_type::now();
    m.forward(d, bc.cache, logits.data(), ws);
    if (st > 0) times.push_back(since(t0));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// "1,4,16,32" as batch sizes.
std::vector<int> batch_sizes(const std::string& b) {
  std::vector<int> out;
  for (std::size_t pos = 0; pos < b.size();) {
    std::size_t comma = b.find(',', pos);
    out.push_back(std::stoi(b.substr(pos, comma - pos)));
    pos = comma == std::string::npos ? b.size() : comma + 1;
  }
  return out;
}

// The projections' formats by share of their bytes (a GGUF mix holds several), the
// embeddings' dtype and the head's format.
std::string weight_format_of(const model::llama_model& m) {
  std::string out;
  const auto by = m.projection_bytes_by_format();
  std::size_t total = 0;
  for (auto& [f, b] : by) total += b;
  for (auto& [f, b] : by)
    out += (out.empty() ? "" : ", ") + f + (by.size() > 1 ? " " + std::to_string(int(100.0 * double(b) / double(total) + 0.5)) + "%" : "");
  return out + " projections, " + std::string(kernels::dtype_name(m.weight_type())) + " embeddings, " + m.lm_head_format() + " head";
}

// One sequence's prefill of `prompt_len` tokens: best of 3 after a warm-up.
// Seconds per token to key a prompt's full blocks for the prefix cache (16-token blocks, best of
// 5): what the router and the replica each spend on a prompt, against the prefill's time.
double block_hash_seconds_per_token(int prompt_len, int vocab) {
  std::vector<std::int32_t> tokens(std::size_t(std::max(prompt_len, 16)));
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = std::int32_t((i * 7919) % std::size_t(std::max(vocab, 1)));
  const kv::hash_keys keys{kv::root_hash("bench"), kv::salt_key(""), 0};
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<kv::block_hash> hashes;
    for (int k = 0; k < 100; ++k) {
      hashes.clear();
      kv::extend_block_hashes(hashes, tokens, 16, keys);
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 100 / double(tokens.size()));
  }
  return best;
}

double prefill_seconds(const model::llama_model& m, kernels::dtype kv_type, int prompt_len, std::vector<float>& logits,
                       model::forward_workspace& ws) {
  double best = 1e30;
  bench_cache bc(m.config(), 1, prompt_len, kv_type);
  const model::forward_batch b = prompts(bc, 1, prompt_len, m.config().vocab_size);
  for (int r = 0; r < 4; ++r) {
    if (r == 1) model::op_profile::reset();
    auto t0 = clock_type::now();
    m.forward(b, bc.cache, logits.data(), ws);
    if (r > 0) best = std::min(best, since(t0));
  }
  return best;
}

// The int8 dot peak, and with K-quant projections their formats' own ceiling (both in op/s).
void measure_int8_ceilings(const model::llama_model& m, bool any_int8, double& int8_peak, double& scaled_ceiling) {
  int8_peak = any_int8 ? kernels::measure_int8_dot_peak() : 0;
  // K-quant formats scale every 16 or 32 weights, which caps them below the int8 peak even in
  // registers. When every projection is a K-quant, measure that cap for each format's own run
  // (not the kernels' unpacked form, which splits 32-runs in two) and weigh the formats by their
  // weights: a prefill's fraction then has the formats' own ceiling beside it.
  // Each is a best of trials that a neighbour's burst can only lower; take both twice, in turn,
  // so one burst does not make their ratio.
  scaled_ceiling = 0;
  if (m.projections_int8_dot()) {
    const auto by = m.projection_bytes_by_format();
    scaled_ceiling = kquant_projection_ceiling(by);
    if (scaled_ceiling > 0) {
      int8_peak = std::max(int8_peak, kernels::measure_int8_dot_peak());
      scaled_ceiling = std::max(scaled_ceiling, kquant_projection_ceiling(by));
      // The scaled loop does the peak's dots and more: if it still ran faster, the peak's
      // trials were all disturbed, and the peak is at least its rate.
      int8_peak = std::max(int8_peak, scaled_ceiling);
    }
  }
}

// What the decode rows measure.
struct decode_plan {
  std::vector<int> batches;
  int context = 0, steps = 0, verify = 0;
  kernels::dtype kv_type;
  double weight_bytes = 0, flops_per_token = 0, head_flops = 0;
  bool profile = false, quiet = false;
};

template <class... Ts>
void say(bool on, const char* fmt, Ts... xs) {
  if (on) std::fprintf(stderr, fmt, xs...);
}

// One row per batch size: its decode step against the bandwidth roofline (measured right before
// and after it) and the compute peak (`compute_bound(projection, head, attention flops)` in s).
nlohmann::json decode_rows(const model::llama_model& m, const decode_plan& p,
                           const std::function<double(double, double, double)>& compute_bound, std::vector<float>& logits,
                           model::forward_workspace& ws) {
  const auto& c = m.config();
  nlohmann::json decode = nlohmann::json::array();
  double tps_batch1 = 0;
  const double kv_bytes_per_token =
      double(kv::kv_cache::bytes_per_token(p.kv_type, c.num_hidden_layers, c.num_key_value_heads, c.head_dim));
  for (int B : p.batches) {
    const double bw_before = kernels::measure_read_bandwidth(std::size_t(1) << 30, 3);
    const double step_s = decode_step_seconds(m, p.kv_type, B, 1, p.context, p.steps, logits, ws);
    if (p.profile) say(!p.quiet, "  decode batch %d profile (%d steps): %s\n", B, p.steps, model::op_profile::report().c_str());
    // This machine's bandwidth drifts with its neighbours: judge each batch against the better
    // of two measurements taken right before and right after it, not only the one at start.
    const double bw_here = std::max(bw_before, kernels::measure_read_bandwidth(std::size_t(1) << 30, 3));
    const double ctx = p.context + p.steps / 2.0;
    const double kv_bytes = double(B) * ctx * kv_bytes_per_token;
    const double roofline_s = (p.weight_bytes + kv_bytes) / bw_here;
    const double tps = B / step_s;
    if (B == 1) tps_batch1 = tps;
    const double compute_frac = compute_bound(p.flops_per_token * B, p.head_flops * B, attention_flops(c, B, ctx)) / step_s;
    say(!p.quiet, "decode batch %2d (context %d): %8.1f tok/s, step %.2f ms, %.0f%% of bandwidth roofline (%.1f GB/s), %.0f%% of compute peak\n",
        B, p.context, tps, step_s * 1e3, 100 * roofline_s / step_s, bw_here / 1e9, 100 * compute_frac);
    nlohmann::json row = {{"batch", B}, {"context", p.context}, {"tokens_per_second", tps}, {"step_ms", step_s * 1e3},
                          {"read_bandwidth_gb_s", bw_here / 1e9},
                          {"bandwidth_roofline_fraction", roofline_s / step_s}, {"compute_peak_fraction", compute_frac},
                          {"speedup_vs_batch_1", tps_batch1 > 0 ? tps / tps_batch1 : 0.0}};
    if (p.verify > 0) {  // the same batch verifying `verify` proposals per sequence
      const double verify_s = decode_step_seconds(m, p.kv_type, B, 1 + p.verify, p.context, p.steps, logits, ws);
      say(!p.quiet, "verify batch %2d (%d rows each): step %.2f ms, %.2fx the decode step\n", B, 1 + p.verify, verify_s * 1e3,
          verify_s / step_s);
      row["verify"] = {{"proposals", p.verify}, {"step_ms", verify_s * 1e3}, {"vs_decode_step", verify_s / step_s}};
    }
    decode.push_back(std::move(row));
  }
  return decode;
}

// The human-readable form of the JSON report.
void print_engine_report(const nlohmann::json& j) {
  const auto& mach = j["machine"];
  const auto& pre = j["prefill"];
  const double int8_peak = mach["int8_dot_peak_gop_s"].is_null() ? 0 : mach["int8_dot_peak_gop_s"].get<double>();
  const double scaled = mach["kquant_scaled_dot_gop_s"].is_null() ? 0 : mach["kquant_scaled_dot_gop_s"].get<double>();
  const double ceiling = pre["format_ceiling_fraction"].is_null() ? 0 : pre["format_ceiling_fraction"].get<double>();
  std::printf("model %s (%s weights, %.2f GB read per decode step, KV cache %s)\n", j["model"].get<std::string>().c_str(),
              j["weights"]["format"].get<std::string>().c_str(), j["weights"]["bytes_per_step"].get<double>() / 1e9,
              j["kv_dtype"].get<std::string>().c_str());
  std::printf("machine: %d threads, %s, read bandwidth %.1f GB/s, FP32 FMA peak %.1f GFLOP/s", mach["threads"].get<int>(),
              mach["isa"].get<std::string>().c_str(), mach["read_bandwidth_gb_s"].get<double>(), mach["fma_peak_gflop_s"].get<double>());
  if (int8_peak > 0) std::printf(", int8 dot peak %.1f GOP/s", int8_peak);
  if (scaled > 0) std::printf(" (%.1f with the projections' K-quant scales)", scaled);
  std::printf("\n");
  std::printf("prefill %d tokens: %.1f tok/s (%.0f%% of compute peak", pre["tokens"].get<int>(), pre["tokens_per_second"].get<double>(),
              100 * pre["compute_peak_fraction"].get<double>());
  if (ceiling > 0) std::printf("; the formats' scales allow at most %.0f%%", 100 * ceiling);
  std::printf(")\n");
  if (const auto& h = j["kv_held"]; !h.is_null())
    std::printf("KV held at %d positions: %.0f bytes/token with the windowed layers' pages freed, %.0f with every position kept (%.3fx)\n",
                h["context"].get<int>(), h["window_pages_bytes_per_token"].get<double>(), h["every_position_bytes_per_token"].get<double>(),
                h["ratio"].get<double>());
  std::printf("prompt block hashes: %.1f ns/token, %.4f%% of the prefill's time\n", pre["block_hash_ns_per_token"].get<double>(),
              100 * pre["block_hash_fraction"].get<double>());
  for (auto& d : j["decode"])
    std::printf("decode batch %2d: %8.1f tok/s (%.0f%% of bandwidth roofline at %.1f GB/s, %.0f%% of compute peak, %.2fx batch 1)\n",
                d["batch"].get<int>(), d["tokens_per_second"].get<double>(),
                100 * d["bandwidth_roofline_fraction"].get<double>(), d["read_bandwidth_gb_s"].get<double>(),
                100 * d["compute_peak_fraction"].get<double>(), d["speedup_vs_batch_1"].get<double>());
}

// Prefills of a quarter and a half of the prompt, for the step profile: one prefill length
// cannot tell attention's quadratic cost from the per-token one.
nlohmann::json shorter_prefills(const model::llama_model& m, kernels::dtype kv_type, int prompt_len, std::vector<float>& logits,
                                model::forward_workspace& ws) {
  nlohmann::json rows = nlohmann::json::array();
  for (int n : {prompt_len / 4, prompt_len / 2})
    if (n >= 16) rows.push_back({{"tokens", n}, {"seconds", prefill_seconds(m, kv_type, n, logits, ws)}});
  return rows;
}

// --fit-profile FILE: the simulator's step profile fitted to the steps just measured.
void write_step_profile(const nlohmann::json& bench, const std::string& path, const std::string& model) {
  const auto samples = sim::engine_bench_samples(bench, "troupe bench engine");
  auto f = sim::fit_profile_file(samples, "troupe bench engine --model " + model + " on " + bench["machine"]["isa"].get<std::string>() +
                                              ", " + std::to_string(bench["machine"]["threads"].get<int>()) + " threads");
  f.kv_bytes_per_token = bench["kv_bytes_per_token"].get<double>();
  sim::write_profile_file(path, f, "fit-profile");
  std::fprintf(stderr,
               "step profile: %.3f ms + %.2f us/token + %.3f ns/context position + %.2f us/decode token (worst error %.0f%% over %zu "
               "steps) -> %s\n",
               f.step.base_s * 1e3, f.step.per_token_s * 1e6, f.step.per_context_s * 1e9, f.step.per_decode_token_s * 1e6,
               100 * f.worst_error, f.samples, path.c_str());
}

// Prefill: one sequence, prompt_len tokens, best of 3 after a warm-up, against the time its work
// needs at the machine's peaks (`compute_bound_s`: projection, head and attention FLOPs at a
// projection rate).
using compute_bound_fn = std::function<double(double, double, double, double)>;
nlohmann::json prefill_row(const model::llama_model& m, kernels::dtype kv_type, int prompt_len, const compute_bound_fn& compute_bound_s,
                           double int8_peak, double scaled_ceiling, std::vector<float>& logits, model::forward_workspace& ws,
                           bool profile, bool json_out) {
  const auto& c = m.config();
  const double flops_tok = double(m.layer_flops_per_token()), head_flops = double(m.lm_head_flops());
  const double prefill_s = prefill_seconds(m, kv_type, prompt_len, logits, ws);
  if (profile) say(!json_out, "  prefill profile (3 runs): %s\n", model::op_profile::report().c_str());
  const double attention = attention_flops(c, prompt_len, (prompt_len + 1) / 2.0);
  const double flops = flops_tok * prompt_len + head_flops + attention;
  const double tps = prompt_len / prefill_s;
  const double frac = compute_bound_s(flops_tok * prompt_len, head_flops, attention, int8_peak) / prefill_s;
  // The same pass's ceiling when the projections run at the scaled-dot rate: the most the
  // formats' arithmetic allows, as a fraction of the peak-judged time.
  const double ceiling = scaled_ceiling > 0 ? compute_bound_s(flops_tok * prompt_len, head_flops, attention, int8_peak) /
                                                  compute_bound_s(flops_tok * prompt_len, head_flops, attention, scaled_ceiling)
                                            : 0;
  say(!json_out, "prefill %d tokens: %.1f tok/s, %.1f GFLOP/s = %.0f%% of compute peak\n", prompt_len, tps, flops / prefill_s / 1e9,
      100 * frac);
  const double hash_s = block_hash_seconds_per_token(prompt_len, c.vocab_size);
  return {{"tokens", prompt_len},
          {"tokens_per_second", tps},
          {"gflop_s", flops / prefill_s / 1e9},
          {"compute_peak_fraction", frac},
          {"block_hash_ns_per_token", hash_s * 1e9},
          {"block_hash_fraction", hash_s * prompt_len / prefill_s},
          {"format_ceiling_fraction", ceiling > 0 ? nlohmann::json(ceiling) : nlohmann::json(nullptr)}};
}

}  // namespace

int cmd_bench_engine(const args& a) {
  auto dir = a.get("model");
  if (!dir) throw input_error("--model DIR is required");
  const int context = int(a.get_int("context", 128));
  const int prompt_len = int(a.get_int("prompt", 512));
  const int steps = int(a.get_int("steps", 8));
  const std::vector<int> batches = batch_sizes(a.get("batches", "1,4,16,32"));
  const int verify = int(a.get_int("verify", 0));
  if (verify < 0) throw input_error("--verify must be 0 or more proposals");
  const bool json_out = a.has("json");
  model::op_profile::enable(a.has("profile"));
  say(!json_out, "measuring memory read bandwidth and compute peaks (%d threads, %s)...\n", kernels::num_threads(),
      kernels::isa_name(kernels::active_isa()));
  const double bw = kernels::measure_read_bandwidth(), peak = kernels::measure_fma_peak();
  say(!json_out, "loading %s...\n", dir->c_str());
  auto m = model::llama_model::load(*dir);
  const auto& c = m->config();
  // KV in the weights' dtype unless told otherwise, as vLLM's "auto" does.
  const std::string kv_name = a.get("kv-dtype", kernels::dtype_name(m->weight_type()));
  const kernels::dtype kv_type = parse_kv_dtype(kv_name);
  const double weight_bytes = double(m->weight_bytes_per_step());
  const std::string weight_format = weight_format_of(*m);
  const double flops_tok = double(m->layer_flops_per_token());
  const double head_flops = double(m->lm_head_flops());
  // Projections in a quantized format (a `troupe model quantize` folder's, or a GGUF file's
  // Q8_0/Q4_0/K-quant tensors) run int8 dot products, whose peak is about four times the FP32
  // FMA peak: judge them, and a quantized head, against it (attention stays FP32). The compute
  // roofline of a pass is the time its work needs at both peaks.
  const bool int8_projections = m->projections_int8_dot(), int8_head = m->lm_head_int8_dot();
  double int8_peak = 0, scaled_ceiling = 0;
  measure_int8_ceilings(*m, int8_projections || int8_head, int8_peak, scaled_ceiling);
  auto compute_bound_s = [&](double projection_flops, double head, double attention, double int8_rate) {
    return projection_flops / (int8_projections ? int8_rate : peak) + head / (int8_head ? int8_rate : peak) + attention / peak;
  };
  model::forward_workspace ws;
  std::vector<float> logits(std::size_t(c.vocab_size) * std::size_t(std::max(32, *std::max_element(batches.begin(), batches.end()))));
  const nlohmann::json prefill = prefill_row(*m, kv_type, prompt_len, compute_bound_s, int8_peak, scaled_ceiling, logits, ws, a.has("profile"),
                                            json_out);
  decode_plan dp{batches, context, steps, verify, kv_type, weight_bytes, flops_tok, head_flops, a.has("profile"), json_out};
  const nlohmann::json decode = decode_rows(*m, dp, [&](double pf, double hf, double af) { return compute_bound_s(pf, hf, af, int8_peak); },
                                            logits, ws);
  nlohmann::json j = {
      {"model", *dir},
      {"weights", {{"dtype", kernels::dtype_name(m->weight_type())}, {"format", weight_format}, {"bytes_per_step", weight_bytes}}},
      {"kv_dtype", kv_name},
      {"kv_bytes_per_token", kv::kv_cache::bytes_per_token(kv_type, c.num_hidden_layers, c.num_key_value_heads, c.head_dim)},
      {"machine", {{"threads", kernels::num_threads()}, {"isa", kernels::isa_name(kernels::active_isa())},
                   {"read_bandwidth_gb_s", bw / 1e9}, {"fma_peak_gflop_s", peak / 1e9},
                   {"int8_dot_peak_gop_s", int8_peak > 0 ? nlohmann::json(int8_peak / 1e9) : nlohmann::json(nullptr)},
                   {"kquant_scaled_dot_gop_s", scaled_ceiling > 0 ? nlohmann::json(scaled_ceiling / 1e9) : nlohmann::json(nullptr)}}},
      {"prefill", prefill},
      {"decode", decode},
  };
  j["kv_held"] = kv_held_per_token(c, kv_type, int(a.get_int("kv-context", 32768)));
  if (a.has("fit-profile")) j["prefill_fit"] = shorter_prefills(*m, kv_type, prompt_len, logits, ws);
  if (json_out)
    std::printf("%s\n", j.dump(2).c_str());
  else
    print_engine_report(j);
  if (const auto out = a.get("fit-profile")) write_step_profile(j, *out, *dir);
  return 0;
}

}  // namespace troupe::cli
