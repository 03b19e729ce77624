// What the frontend holds of each request in flight (its book: a group per client request, a
// live_request per sub-request), and how an answer opens. Apart from frontend.cpp, which routes
// the requests and their tokens, because the opening must come first whatever order the owner's
// acceptance and the first tokens arrive in.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/api/http_server.h"
#include "runtime/api/choices.h"
#include "runtime/api/openai.h"
#include "runtime/metrics/metrics.h"

namespace troupe::actors {

// What the sub-requests of one request share: one per choice (n, best_of, a list of prompts),
// one in all for most requests.
struct choice_group {
  api::choice_plan plan;
  std::vector<std::string> ids;     // sub-request k's id
  std::vector<nlohmann::json> fulls;          // non-streaming: each one's answer
  std::vector<double> cumulative;   // each one's summed logprob (best_of)
  int left = 0;                     // not finished yet
  bool began = false;               // the stream's 200 went out
  bool labelled = false;            // the answer's X-Troupe-Model header is added
  bool failed = false;              // answered with an error: the others' ends are dropped
  long long prompt_tokens = 0, completion_tokens = 0;  // a stream's usage
  // /v1/embeddings: each input's vector as it finishes, and the answer's encoding.
  bool embeddings = false, base64 = false;
  std::vector<std::vector<float>> vectors;
  std::string model;  // the served model that answers (the base's name or an adapter's)
  const char* endpoint = nullptr;  // completions or chat, for the request trace (null: embeddings)
};

struct live_request {
  std::shared_ptr<choice_group> group;
  int sub = 0;             // which of the group's sub-requests
  double cumulative = 0;   // its tokens' summed logprob
  std::shared_ptr<http::exchange> ex;
  std::unique_ptr<api::response_writer> w;
  bool stream = false, include_usage = false, logprobs = false;
  bool submitted = false, gone = false;
  bool opened = false;                   // a stream: its choice's opening (the role chunk of a chat) went out
  std::string text;                      // non-streaming: the whole output
  std::vector<api::token_logprob> lps;   // non-streaming: every token's
  int prompt_tokens = 0, output_tokens = 0;
  std::chrono::steady_clock::time_point arrived, first_token, last_token;
  metrics::labels labels;
  std::string fell_back_from;  // the model asked, when its fallback answers (labels name the fallback)
};

// The opening of a request's answer: which model answers (its fallback's, under overload), and
// for a stream the 200 and its headers (once per group), then this choice's role chunk (a
// chat). It comes when the owner accepts the request, or with the request's first tokens if
// those come sooner: they reach the frontend from the replica through the owner, the acceptance
// when the owner decides (a request placed late, or moved), in no set order. A chunk once went
// out ahead of the status line that way, and the client read its size as one.
void open_answer(live_request& r);

// One server-sent event carrying j.
void sse(const std::shared_ptr<http::exchange>& ex, const nlohmann::json& j);

}  // namespace troupe::actors
