// Public trace formats (runtime/workload/public_trace.h): Azure's, Mooncake's and BurstGPT's files
// read into arrivals relative to their first request, with Mooncake's prefix blocks; rows that are
// no request are skipped and counted; malformed rows and unknown formats are refused naming the
// line. The samples are written here in each format's published layout.
#define BOOST_TEST_MODULE public_trace
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>

#include "runtime/common/error.h"
#include "runtime/workload/public_trace.h"

using namespace troupe::workload;

namespace {

std::string error_of(const std::string& text) {
  try {
    parse_public_trace(text, "t");
  } catch (const troupe::input_error& e) {
    return e.what();
  }
  return "";
}

bool near(double a, double b) { return std::abs(a - b) < 1e-6; }

}  // namespace

BOOST_AUTO_TEST_CASE(an_azure_trace_reads_with_times_from_its_first_request) {
  const auto t = parse_public_trace("TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                                    "2023-11-16 18:15:46.6805900,374,44\r\n"
                                    "2023-11-16 18:15:50.9951690,396,109\r\n"
                                    "2023-11-16 23:59:59.5000000,879,0\r\n"  // no answer: skipped
                                    "2023-11-17 00:00:00.5000000,1000,1\r\n",  // across midnight
                                    "azure.csv");
  BOOST_TEST(trace_format_name(t.format) == std::string("azure"));
  BOOST_TEST_REQUIRE(t.arrivals.size() == 3u);
  BOOST_TEST(t.skipped == 1u);
  BOOST_TEST(t.arrivals[0].at_s == 0.0);
  BOOST_TEST(near(t.arrivals[1].at_s, 4.314579));
  BOOST_TEST(t.arrivals[1].prompt_tokens == 396);
  BOOST_TEST(t.arrivals[1].max_tokens == 109);
  BOOST_TEST(near(t.arrivals[2].at_s, 5 * 3600 + 44 * 60 + 13.8194100));
  BOOST_TEST(t.prefix_blocks.empty());
}

BOOST_AUTO_TEST_CASE(a_mooncake_trace_keeps_each_requests_prefix_blocks) {
  const auto t = parse_public_trace("{\"timestamp\": 27482, \"input_length\": 6955, \"output_length\": 52, \"hash_ids\": [46, 47, 2353]}\n"
                                    "{\"timestamp\": 30535, \"input_length\": 6472, \"output_length\": 26, \"hash_ids\": [46, 47, 2366]}\n"
                                    "\n"
                                    "{\"timestamp\": 30535, \"input_length\": 100, \"output_length\": 5}\n",
                                    "m.jsonl");
  BOOST_TEST(trace_format_name(t.format) == std::string("mooncake"));
  BOOST_TEST_REQUIRE(t.arrivals.size() == 3u);
  BOOST_TEST_REQUIRE(t.prefix_blocks.size() == 3u);
  BOOST_TEST(near(t.arrivals[1].at_s, 3.053));
  BOOST_TEST(t.arrivals[0].prompt_tokens == 6955);
  BOOST_TEST((t.prefix_blocks[1] == std::vector<std::int64_t>{46, 47, 2366}));
  BOOST_TEST(t.prefix_blocks[2].empty());
  BOOST_TEST(error_of("{\"timestamp\": 1, \"input_length\": 5}\n") == "t:1: expected a number \"output_length\"");
  BOOST_TEST(error_of("{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 2}\n{oops\n") == "t:2: not a JSON object");
  BOOST_TEST(error_of("{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 2, \"hash_ids\": [\"a\"]}\n") ==
             "t:1: \"hash_ids\": expected an array of integers");
}

BOOST_AUTO_TEST_CASE(a_burstgpt_trace_skips_failed_requests) {
  const auto t = parse_public_trace("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                                    "5,ChatGPT,472,18,490,Conversation log\n"
                                    "45,ChatGPT,1087,0,1087,Conversation log\n"
                                    "118.5,GPT-4,417,276,693,API log\n",
                                    "b.csv");
  BOOST_TEST(trace_format_name(t.format) == std::string("burstgpt"));
  BOOST_TEST_REQUIRE(t.arrivals.size() == 2u);
  BOOST_TEST(t.skipped == 1u);
  BOOST_TEST(t.arrivals[1].at_s == 113.5);
  BOOST_TEST(t.arrivals[1].max_tokens == 276);
}

BOOST_AUTO_TEST_CASE(malformed_rows_and_unknown_formats_are_refused_naming_the_line) {
  const std::string az = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  BOOST_TEST(error_of(az + "2023-11-16 18:15:46,1,1\n2023-11-16 18:15:45,1,1\n") == "t:3: arrivals must be in time order");
  BOOST_TEST(error_of(az + "yesterday,1,1\n") == "t:2: TIMESTAMP: expected \"YYYY-MM-DD HH:MM:SS.fffffff\", got \"yesterday\"");
  BOOST_TEST(error_of(az + "2023-11-16 18:15:46,1\n") == "t:2: expected three fields: TIMESTAMP,ContextTokens,GeneratedTokens");
  BOOST_TEST(error_of(az + "2023-11-16 18:15:46,1.5,1\n") == "t:2: ContextTokens: expected a whole number from 0 to 1048576");
  BOOST_TEST(error_of("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,m,x,1,1,l\n") ==
             "t:2: Request tokens: \"x\" is not a number");
  BOOST_TEST(error_of("time,in,out\n").find("t:1: not a trace this reads") == 0u);
  // Troupe's own format reads through the same door.
  const auto own = parse_public_trace("seconds,prompt_tokens,max_tokens\n0.5,10,2\n", "t");
  BOOST_TEST(trace_format_name(own.format) == std::string("troupe"));
  BOOST_TEST(own.arrivals.size() == 1u);
}

// Requests that share prefix block ids share those prompt tokens, and only those.
BOOST_AUTO_TEST_CASE(prompts_share_the_blocks_their_ids_share) {
  const arrival a{0, 1100, 4}, b{0, 1100, 4}, c{0, 300, 4};
  const auto pa = trace_prompt(a, {46, 47, 2353}, 0, 32000), pb = trace_prompt(b, {46, 47, 2366}, 1, 32000);
  const auto pc = trace_prompt(c, {46}, 2, 32000), plain = trace_prompt(c, {}, 2, 32000);
  BOOST_TEST_REQUIRE(pa.size() == 1100u);
  BOOST_TEST(pc.size() == 300u);
  BOOST_TEST(std::equal(pa.begin(), pa.begin() + 1024, pb.begin()));   // blocks 46 and 47
  BOOST_TEST(!std::equal(pa.begin() + 1024, pa.end(), pb.begin() + 1024));  // 2353 against 2366
  BOOST_TEST(std::equal(pc.begin(), pc.end(), pa.begin()));             // a part of block 46
  BOOST_TEST(plain != pc);
  for (auto t : pa) BOOST_TEST_REQUIRE((t >= 0 && t < 32000));
}
