// The request log `troupe serve` records when the topology asks ([frontend] request_trace): one
// JSON line per finished completion or chat request, in the trace format `troupe bench serve
// --trace` replays (docs/serving.md):
//   {"timestamp": 1796398700.125, "prompt_len": 212, "output_len": 64, "tenant": "default",
//    "model": "kjv", "endpoint": "completions", "outcome": "length"}
// timestamp: Unix seconds of its arrival; output_len: the tokens it was given (a replay asks
// for as many, with ignore_eos). No prompt or output text is written: the log says what work
// came and when, not what anyone wrote. The file is bounded: past max_bytes, lines are dropped
// and counted rather than filling the disk.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace troupe::workload {

struct trace_record {
  double timestamp = 0;  // Unix seconds of arrival
  int prompt_len = 0, output_len = 0;
  std::string tenant, model, endpoint, outcome;
};

std::string trace_line(const trace_record& r);  // one JSON object and a newline

class request_trace {
 public:
  // Appends to `path` (made with mode 0600: tenants' names are in it). Throws input_error naming
  // the path when it cannot be opened.
  request_trace(const std::string& path, std::size_t max_bytes);
  ~request_trace();
  request_trace(const request_trace&) = delete;
  request_trace& operator=(const request_trace&) = delete;

  // Writes one line (flushed, so a crash loses none), or drops it once the file holds max_bytes.
  void record(const trace_record& r);
  std::uint64_t recorded() const { return recorded_; }
  std::uint64_t dropped() const { return dropped_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  std::size_t bytes_ = 0, max_bytes_ = 0;
  std::uint64_t recorded_ = 0, dropped_ = 0;
};

}  // namespace troupe::workload
