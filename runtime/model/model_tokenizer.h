// A model's tokenizer, wherever the model keeps it: a folder's tokenizer.json, or the vocabulary
// in a GGUF file's metadata. What the command line serves with and what a draft model is
// checked against.
#pragma once
#include <memory>
#include <string>

#include "runtime/tokenizer/tokenizer.h"

namespace troupe::model {

// Null when the model has none (a folder without tokenizer.json, a GGUF without a vocabulary).
std::unique_ptr<tokenizer::tokenizer> load_tokenizer(const std::string& model);

// Whether two models' tokenizers read text as the same token ids (both absent counts as the same):
// what a fallback model and a swapped-in revision must share with the model they stand in for,
// since the frontend tokenizes once for either. A probe text with words, digits, accents, CJK and
// a special-looking marker, and the vocabulary sizes.
bool same_token_ids(const tokenizer::tokenizer* a, std::int32_t a_vocab, const tokenizer::tokenizer* b, std::int32_t b_vocab);

}  // namespace troupe::model
