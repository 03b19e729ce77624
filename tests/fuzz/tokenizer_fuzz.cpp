// The tokenizer's encode and decode on the synthesized byte-level BPE vocabulary: any text
// encodes to ids that decode back to it (after UTF-8 sanitizing), and any id sequence decodes,
// also incrementally.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "runtime/tokenizer/synth_vocab.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/unicode.h"

using namespace troupe::tokenizer;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto tok = tokenizer::from_json(synth_tokenizer_json(2000, 1), "synth");
  const std::string text = utf8_sanitize(std::string_view(reinterpret_cast<const char*>(data), size));
  const auto ids = tok->encode(text, false);
  if (tok->decode(ids, false) != text) std::abort();  // byte-level BPE round-trips any valid UTF-8
  std::vector<std::int32_t> raw;
  for (std::size_t i = 0; i + 1 < size; i += 2) raw.push_back(std::int32_t(data[i] | data[i + 1] << 8) % 2100 - 50);
  std::vector<std::int32_t> valid;
  for (auto id : raw)
    if (id >= 0 && id < tok->vocab_size()) valid.push_back(id);
  (void)tok->decode(valid, true);
  incremental_detokenizer d;
  std::vector<std::int32_t> so_far;
  for (auto id : valid) {
    so_far.push_back(id);
    (void)d.next(*tok, so_far);
  }
  (void)d.flush(*tok, so_far);
  return 0;
}
