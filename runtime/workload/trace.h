// Request arrival traces, for replaying load against a cluster (`troupe bench autoscale`): what
// arrives when, with its prompt and output lengths. A trace file is CSV, one arrival per line
// after the header `seconds,prompt_tokens,max_tokens`, in time order, so a trace recorded
// elsewhere (a production log reduced to these columns) replays as it is. Shapes generate
// traces from a rate profile with seeded Poisson arrivals, so a run repeats exactly.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace troupe::workload {

struct arrival {
  double at_s = 0;  // since the trace's start
  int prompt_tokens = 0;
  int max_tokens = 0;
};

// Throws input_error as "SOURCE:LINE: what is wrong" (a missing or different header, a field
// that is not a number, a negative time, lengths outside 1..1,048,576, time going backwards).
std::vector<arrival> parse_trace(const std::string& text, const std::string& source);
std::vector<arrival> read_trace(const std::string& path);  // input_error naming the file when unreadable
std::string format_trace(const std::vector<arrival>& trace);

// What every trace reader shares: a file's whole text (input_error "PATH: cannot read the
// trace"), and a field that is a finite number and nothing else.
std::string read_trace_text(const std::string& path);
std::optional<double> number_field(const std::string& s);

// Requests per second at a time, linear between points, held after the last.
struct rate_point {
  double at_s = 0, per_s = 0;
};

struct length_range {
  int min = 1, max = 1;  // uniform, inclusive
};

// Poisson arrivals over [0, duration_s) following the profile (by thinning), with prompt and
// output lengths drawn uniformly; the same seed gives the same trace.
std::vector<arrival> poisson_trace(const std::vector<rate_point>& profile, double duration_s, length_range prompt,
                                   length_range output, std::uint64_t seed);

// A named profile scaled to `peak` requests/s: "ramp-spike-quiet" (80 s: a ramp from 10% to 25%
// of peak, 20 s at peak, 40 s at 2%) or "hour" (a day's shape in an hour: night, a morning ramp,
// a plateau at 60% with two spikes to peak, an evening decline). Throws input_error for
// another name.
std::vector<rate_point> shape_profile(const std::string& name, double peak, double& duration_s);
const std::vector<std::string>& shape_names();

}  // namespace troupe::workload
