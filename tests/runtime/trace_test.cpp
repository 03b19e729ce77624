// Arrival traces (runtime/workload/trace.h): a file round-trips; each malformation is refused
// naming its line; generated traces repeat with their seed and follow their rate profile.
#define BOOST_TEST_MODULE trace
#include <boost/test/unit_test.hpp>

#include "runtime/common/error.h"
#include "runtime/workload/request_trace.h"
#include "runtime/workload/trace.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

using namespace troupe::workload;

namespace {

std::string error_of(const std::string& text) {
  try {
    parse_trace(text, "t.csv");
  } catch (const troupe::input_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_trace_round_trips_and_each_malformation_is_named) {
  const std::vector<arrival> t{{0.5, 100, 20}, {0.5, 7, 1}, {2.25, 4096, 300}};
  const auto back = parse_trace(format_trace(t), "t.csv");
  BOOST_TEST_REQUIRE(back.size() == 3u);
  BOOST_TEST(back[2].at_s == 2.25);
  BOOST_TEST(back[2].prompt_tokens == 4096);
  BOOST_TEST(back[1].max_tokens == 1);
  const std::string h = "seconds,prompt_tokens,max_tokens\n";
  BOOST_TEST(error_of("") == "t.csv:0: empty: expected the header \"seconds,prompt_tokens,max_tokens\"");
  BOOST_TEST(error_of("time,p,o\n1,2,3\n").find("t.csv:1: expected the header") == 0);
  BOOST_TEST(error_of(h + "1,2\n") == "t.csv:2: expected three fields: seconds,prompt_tokens,max_tokens");
  BOOST_TEST(error_of(h + "1,2,3,4\n") == "t.csv:2: expected three fields: seconds,prompt_tokens,max_tokens");
  BOOST_TEST(error_of(h + "x,2,3\n") == "t.csv:2: seconds: \"x\" is not a number");
  BOOST_TEST(error_of(h + "1,2x,3\n") == "t.csv:2: prompt_tokens: \"2x\" is not a number");
  BOOST_TEST(error_of(h + "-1,2,3\n") == "t.csv:2: seconds: must not be negative");
  BOOST_TEST(error_of(h + "2,2,3\n1,2,3\n") == "t.csv:3: seconds: arrivals must be in time order");
  BOOST_TEST(error_of(h + "1,0,3\n").find("t.csv:2: prompt_tokens: expected a whole number") == 0);
  BOOST_TEST(error_of(h + "1,2,2.5\n").find("t.csv:2: max_tokens: expected a whole number") == 0);
  BOOST_TEST(error_of(h + "nan,2,3\n") == "t.csv:2: seconds: \"nan\" is not a number");
}

BOOST_AUTO_TEST_CASE(generated_traces_repeat_with_their_seed_and_follow_the_profile) {
  double duration = 0;
  const auto profile = shape_profile("ramp-spike-quiet", 40, duration);
  BOOST_TEST(duration == 80);
  const auto a = poisson_trace(profile, duration, {128, 384}, {16, 48}, 7);
  const auto b = poisson_trace(profile, duration, {128, 384}, {16, 48}, 7);
  const auto c = poisson_trace(profile, duration, {128, 384}, {16, 48}, 8);
  BOOST_TEST(format_trace(a) == format_trace(b));
  BOOST_TEST(format_trace(a) != format_trace(c));
  int in_spike = 0, quiet = 0;
  for (const auto& x : a) {
    BOOST_TEST((x.prompt_tokens >= 128 && x.prompt_tokens <= 384));
    BOOST_TEST((x.max_tokens >= 16 && x.max_tokens <= 48));
    in_spike += x.at_s >= 20 && x.at_s < 40;
    quiet += x.at_s >= 40;
  }
  // 20 s at 40/s and 40 s at 0.8/s: Poisson counts within 5 standard deviations.
  BOOST_TEST(std::abs(in_spike - 800) < 5 * 28.3, in_spike);
  BOOST_TEST(std::abs(quiet - 32) < 5 * 5.7, quiet);
  BOOST_CHECK_THROW(shape_profile("sawtooth", 1, duration), troupe::input_error);
}

// The request log: one JSON line per request, its file private to the user, and bounded.
BOOST_AUTO_TEST_CASE(the_request_trace_is_one_line_per_request_and_bounded) {
  const std::string path = (std::filesystem::temp_directory_path() / ("troupe-request-trace-" + std::to_string(::getpid()))).string();
  std::filesystem::remove(path);
  const trace_record r{1796398700.5, 212, 64, "alice", "kjv", "completions", "length"};
  const std::string line = trace_line(r);
  const auto j = nlohmann::json::parse(line);
  BOOST_TEST(j["prompt_len"] == 212);
  BOOST_TEST(j["output_len"] == 64);
  BOOST_TEST(j["tenant"] == "alice");
  BOOST_TEST(j["endpoint"] == "completions");
  BOOST_TEST(line.back() == '\n');
  {
    request_trace t(path, 3 * line.size());
    for (int i = 0; i < 5; ++i) t.record(r);
    BOOST_TEST(t.recorded() == 3u);
    BOOST_TEST(t.dropped() == 2u);
  }
  {
    request_trace t(path, 4 * line.size());  // appends, counting what the file already holds
    t.record(r);
    t.record(r);
    BOOST_TEST(t.recorded() == 1u);
  }
  std::ifstream in(path);
  int lines = 0;
  for (std::string l; std::getline(in, l);) ++lines;
  BOOST_TEST(lines == 4);
  struct stat s {};
  BOOST_TEST_REQUIRE(::stat(path.c_str(), &s) == 0);
  BOOST_TEST((s.st_mode & 0777) == 0600u);
  std::filesystem::remove(path);
  BOOST_CHECK_THROW(request_trace("/no/such/dir/trace.jsonl", 100), troupe::input_error);
}
