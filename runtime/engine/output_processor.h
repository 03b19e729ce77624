// From a sequence's newest token to what its client sees: incremental detokenization, stop
// conditions (EOS, stop tokens, stop strings, length) and the text that may be streamed now (a
// stop string is never streamed in part, a character never in half).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/engine/request.h"
#include "runtime/sampling/sampling_params.h"
#include "runtime/tokenizer/tokenizer.h"

namespace troupe::engine {

// One sequence's text so far.
struct output_stream {
  tokenizer::incremental_detokenizer detok;
  std::string text;         // output text so far (stop strings cut it)
  std::size_t emitted = 0;  // bytes of text already returned
};

class output_processor {
 public:
  // `tok` may be null: outputs then carry no text and stop strings never match.
  output_processor(const tokenizer::tokenizer* tok, std::vector<std::int32_t> eos_ids, int max_model_len);

  // Takes the newest token of `tokens` (prompt_len prompt tokens, then the output) into `out`;
  // returns why the sequence ends there (none: it goes on) and sets `delta` to the text that
  // may be streamed now. `complete`: the output's constraint can take nothing more (it stops).
  finish_reason on_token(output_stream& out, std::span<const std::int32_t> tokens, int prompt_len,
                         const sampling::sampling_params& p, std::string& delta, bool complete = false) const;

 private:
  const tokenizer::tokenizer* tok_;
  std::vector<std::int32_t> eos_;
  int max_model_len_;
};

}  // namespace troupe::engine
