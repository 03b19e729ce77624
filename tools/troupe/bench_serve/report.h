// The results of a serving benchmark: per-request timings in, the summary vLLM's
// benchmark_serving reports out (TTFT, TPOT, ITL and E2E latency percentiles, throughput,
// goodput under SLOs), as text, JSON and gnuplot-drawn PNGs.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace troupe::bench {

struct request_result {
  bool ok = false;
  int status = 0;  // the HTTP status (0: no answer)
  std::string error;
  double start = 0;                // seconds after the benchmark began
  double ttft = 0, e2e = 0;        // seconds
  std::vector<double> chunk_times; // arrival of each content chunk, seconds after start
  int prompt_tokens = 0, output_tokens = 0;
  std::string tenant;
  std::string model;  // the answer's `model`: which model answered (a fallback under overload)
};

struct slo {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
};
// Parses "ttft:500 tpot:50 e2el:2000" (any subset).
slo parse_slo(const std::vector<std::string>& parts);

struct summary {
  int completed = 0, failed = 0;
  int refused = 0;  // of the failed, answered 429 or 503 (overload): their latency is "rejection"
  double duration = 0;
  long long input_tokens = 0, output_tokens = 0;
  std::map<std::string, std::map<std::string, double>> latency_ms;  // metric -> {mean, median, std, p50, p90, p99}
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  std::optional<double> goodput;  // requests/s meeting every SLO
  std::vector<std::string> errors;  // first few
  // When more than one model answered (a fallback): per answering model, its count and TTFT
  // percentiles {completed, mean, median, p90, p99}.
  std::map<std::string, std::map<std::string, double>> by_model;
};

summary summarize(const std::vector<request_result>& results, double duration, const slo& goal);
nlohmann::json to_json(const summary& s);
std::string to_text(const summary& s);

// A canary's run beside a baseline's (`bench serve --baseline`): for TTFT, TPOT, ITL and E2E
// latency at p50 and p99, the throughputs and the failed and refused shares, both values and
// canary / baseline (null where the baseline's is 0). As JSON rows {metric, canary, baseline,
// ratio}, and as a table.
nlohmann::json versus_json(const summary& canary, const summary& baseline);
std::string versus_text(const summary& canary, const summary& baseline, const std::string& canary_name, const std::string& baseline_name);

// Writes PREFIX-latency.png (TTFT and E2E over the run) and PREFIX-cdf.png (latency CDFs)
// with gnuplot. Returns the files written; throws input_error if gnuplot fails.
std::vector<std::string> plot(const std::vector<request_result>& results, const std::string& prefix);

double percentile(std::vector<double> v, double p);  // linear interpolation, like numpy

}  // namespace troupe::bench
