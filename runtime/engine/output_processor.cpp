#include "runtime/engine/output_processor.h"

#include <algorithm>

#include "runtime/tokenizer/unicode.h"

namespace troupe::engine {

output_processor::output_processor(const tokenizer::tokenizer* tok, std::vector<std::int32_t> eos_ids, int max_model_len)
    : tok_(tok), eos_(std::move(eos_ids)), max_model_len_(max_model_len) {}

finish_reason output_processor::on_token(output_stream& s, std::span<const std::int32_t> tokens, int prompt_len,
                                         const sampling::sampling_params& p, std::string& delta, bool complete) const {
  const std::int32_t tok = tokens.back();
  const int num_output = int(tokens.size()) - prompt_len;
  finish_reason why = finish_reason::none;
  const bool may_stop = num_output >= p.min_tokens;
  if (may_stop && !p.ignore_eos && std::find(eos_.begin(), eos_.end(), tok) != eos_.end()) why = finish_reason::stop;
  if (may_stop && std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end())
    why = finish_reason::stop;
  // The token that stopped it adds no text (an EOS's text shows once special tokens are kept),
  // unless the request keeps what stopped it, as for a stop string.
  const bool stop_token_hidden = why == finish_reason::stop && !p.include_stop_str_in_output;
  if (complete) why = finish_reason::stop;
  if (why == finish_reason::none && (num_output >= p.max_tokens || int(tokens.size()) >= max_model_len_))
    why = finish_reason::length;
  std::size_t hold = 0;  // bytes kept back so a stop string is never streamed in part
  if (tok_) {
    // Only the detokenizer's small window is decoded; the output is not copied per token.
    auto output = tokens.subspan(std::size_t(prompt_len));
    if (stop_token_hidden) output = output.first(output.size() - 1);
    const std::size_t before = s.text.size();
    s.text += s.detok.next(*tok_, output);
    std::size_t longest = 0;
    bool cut = false;
    for (const auto& stop : p.stop) {
      longest = std::max(longest, stop.size());
      if (!may_stop) continue;
      std::size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
      std::size_t at = s.text.find(stop, from);
      if (at != std::string::npos && at < s.text.size()) {
        if (p.include_stop_str_in_output) at += stop.size();
        s.text.resize(std::max(at, s.emitted));
        why = finish_reason::stop;
        cut = true;
      }
    }
    if (why != finish_reason::none && !cut) s.text += s.detok.flush(*tok_, output);
    if (why == finish_reason::none && longest > 1) hold = longest - 1;
  }
  std::size_t end = s.text.size() > hold ? s.text.size() - hold : 0;
  end = std::max(end, s.emitted);  // never below what was already streamed
  end = s.emitted + tokenizer::utf8_complete_prefix(std::string_view(s.text).substr(s.emitted, end - s.emitted));
  delta = s.text.substr(s.emitted, end - s.emitted);
  s.emitted = end;
  return why;
}

}  // namespace troupe::engine
