// What `troupe bench serve` sends: each request's arrival time, prompt (token ids or text),
// output length and tenant. Built from options (arrival process, length distributions,
// shared prefixes) or replayed from a JSONL trace. Deterministic for a seed.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace troupe::bench {

enum class arrival { poisson, fixed, burst };     // burst: all at t = 0 (use with concurrency)
enum class length_dist { fixed, uniform, longtail };

struct workload_options {
  int requests = 64;
  arrival process = arrival::burst;
  double rate = 0;  // requests per second (poisson, fixed)
  int prompt_len = 200;
  length_dist prompt_dist = length_dist::fixed;
  int output_len = 64;
  length_dist output_dist = length_dist::fixed;
  // Shared-prefix workloads: `systems` system prompts of `prefix_len` tokens, each used by
  // `users` users; request i uses system prompt (i / users) % systems.
  int systems = 0, users = 1, prefix_len = 0;
  // Shuffle which request gets which system prompt (and user), deterministically for the seed:
  // users of all system prompts interleave instead of arriving system by system.
  bool shuffle = false;
  int vocab = 32000;  // token ids are drawn from [100, vocab - 100)
  // Real text through the server's tokenizer: when set and not empty, every prompt (system
  // prompts too) is a run of this many consecutive tokens from it, at a seeded offset
  // (wrapping), instead of random ids.
  const std::vector<std::int32_t>* corpus = nullptr;
  std::uint64_t seed = 0;
};

struct planned_request {
  double at = 0;  // seconds after the start
  std::vector<std::int32_t> prompt_ids;  // or
  std::string prompt_text;
  int prompt_len = 0;  // tokens (for text prompts from a trace: the trace's figure, if given)
  int output_len = 0;
  std::string tenant;
  std::string model;     // from a trace line: the model it asked (sent unless --model is given)
  std::string endpoint;  // from a trace line: "completions" or "chat" (it must match --chat)
};

// Draws a length with mean `mean`: fixed; uniform on [mean/2, 3*mean/2]; or long-tailed
// (log-normal, sigma 1, scaled to the mean, clamped to [1, 16 * mean]).
int draw_length(length_dist d, int mean, std::uint64_t seed, std::uint64_t index);

std::vector<planned_request> plan_workload(const workload_options& o);

// `n` consecutive tokens of `corpus` from an offset drawn for (seed, stream), wrapping at its end.
std::vector<std::int32_t> corpus_window(const std::vector<std::int32_t>& corpus, int n, std::uint64_t seed, std::uint64_t stream);

// Fits every request into a context of `max_model_len` tokens, `overhead` of which the server
// adds to each prompt (a chat template's): a prompt longer than leaves room for an output of
// min(its length, a quarter of the room) is cut from its end to that, and the output then takes
// what is left. Returns how many requests were changed.
int fit_to_context(std::vector<planned_request>& plan, int max_model_len, int overhead);

// A ShareGPT-format file (a JSON array of {"conversations": [{"from": "human"|"gpt", "value"}]})
// as (first human turn, the reply to it) pairs; conversations without both are skipped.
// Throws input_error naming the file for anything that is not that shape.
struct conversation_turn {
  std::string prompt, reply;
};
std::vector<conversation_turn> read_sharegpt(const std::string& path);

// A trace: one JSON object per line with "timestamp" (seconds; or "arrival"), "prompt" (text)
// or "prompt_len"/"input_len" (tokens), "output_len" (or "max_tokens") and optional "tenant".
// Throws input_error naming the line for anything else.
std::vector<planned_request> read_trace(const std::string& path, int vocab, std::uint64_t seed);

length_dist parse_length_dist(const std::string& s);
arrival parse_arrival(const std::string& s);

}  // namespace troupe::bench
