// The load generator's HTTP side: streams every planned request to an OpenAI-compatible
// server at its arrival time (or as slots free up, with a concurrency limit) over one I/O
// thread, and times each server-sent chunk.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tools/troupe/bench_serve/report.h"
#include "tools/troupe/bench_serve/workload.h"

namespace troupe::bench {

struct client_options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8000;
  std::string prefix;        // path before /v1/... (from the URL)
  std::string model;         // sent as "model" when set
  bool chat = false;         // /v1/chat/completions with the prompt as one user message (text only)
  bool ignore_eos = true;    // so every request produces its planned output length
  int max_concurrency = 0;   // 0: no limit (requests start at their arrival times)
  double request_timeout_s = 1800;
  std::string api_key;       // sent as 'Authorization: Bearer KEY' when set
  std::string split;         // sent as 'X-Troupe-Split: SIDE' when set (canary or baseline)
  // The field /tokenize takes text in: "prompt" (vLLM, troupe serve) or "content" (llama.cpp's
  // server), as discover() found.
  std::string tokenize_field = "prompt";
};

// Parses http://HOST:PORT[/PREFIX]; throws input_error otherwise.
client_options parse_url(const std::string& url);

// From now until run_requests takes them over, SIGINT and SIGTERM are noted rather than lost
// or fatal: a stop that comes while the plan is made (seconds for a large one) makes
// run_requests send nothing. Also in a process that started with SIGINT ignored, as every
// background job of a shell script does.
void note_stops_until_run();

// Runs the workload; `progress(done, total)` is called after each request ends. SIGINT or
// SIGTERM stops sending: requests not yet started never are, those in flight finish, and the
// results then hold only the requests that were sent (`*stopped` says so). A second signal gets
// the default action. This is how a benchmark keeps a background load running for exactly as
// long as something else takes (tools/bench/interference.sh).
std::vector<request_result> run_requests(const client_options& o, const std::vector<planned_request>& plan,
                                         const std::function<void(std::size_t, std::size_t)>& progress, double* duration,
                                         bool* stopped = nullptr);

// GET PATH on the server: (status, body). Throws input_error if it cannot connect.
std::pair<int, std::string> http_get(const client_options& o, const std::string& path);
// POST PATH with a JSON body: (status, body). Throws input_error if it cannot connect.
std::pair<int, std::string> http_post(const client_options& o, const std::string& path, const std::string& body);

}  // namespace troupe::bench
