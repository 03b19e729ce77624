#include "runtime/model/model_tokenizer.h"

#include <filesystem>

#include "runtime/model/gguf.h"
#include "runtime/model/gguf_import.h"
#include "runtime/tokenizer/gguf_vocab.h"

namespace troupe::model {

std::unique_ptr<tokenizer::tokenizer> load_tokenizer(const std::string& model) {
  if (is_gguf_path(model)) {
    const gguf_file g(model);
    if (!g.metadata().contains("tokenizer.ggml.model")) return nullptr;
    return tokenizer::tokenizer::from_document(tokenizer::tokenizer_json_from_gguf(g.metadata(), model), model);
  }
  if (std::filesystem::exists(model + "/tokenizer.json")) return tokenizer::tokenizer::load(model + "/tokenizer.json");
  return nullptr;
}

bool same_token_ids(const tokenizer::tokenizer* a, std::int32_t a_vocab, const tokenizer::tokenizer* b, std::int32_t b_vocab) {
  const std::string probe = "In the beginning God created the heaven and the earth. 0123 \u00e9\u00fc\u4e2d <|x|>";
  return a_vocab == b_vocab && bool(a) == bool(b) && (!a || a->encode(probe, true) == b->encode(probe, true));
}

}  // namespace troupe::model
