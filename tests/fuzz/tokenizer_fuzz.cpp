// The tokenizer's encode and decode on the synthesized byte-level BPE vocabulary: any text
// encodes to ids that decode back to it (after UTF-8 sanitizing), and any id sequence decodes,
// also incrementally.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/tokenizer/synth_vocab.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/unicode.h"

using namespace troupe::tokenizer;

namespace {

// The same vocabulary behind the pre-tokenizer steps the families' files use: NFC, a String
// Split merged with the previous piece, gpt-oss's letter-case regex (general categories, (?i:)
// groups) and DeepSeek V3's CJK ranges, then ByteLevel: still a round trip of the NFC text.
std::unique_ptr<tokenizer> families_steps() {
  auto j = nlohmann::json::parse(synth_tokenizer_json(2000, 1));
  j["normalizer"] = {{"type", "NFC"}};
  const auto split = [](nlohmann::json pattern, const char* behavior) {
    return nlohmann::json{{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", false}};
  };
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {split({{"String", " "}}, "MergedWithPrevious"), split({{"Regex", "[\u4e00-\u9fa5\u3040-\u309f]+"}}, "Isolated"),
        split({{"Regex", "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
                         "(?i:'s|'t|'re)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"}},
              "Contiguous"),
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  return tokenizer::from_json(j.dump(), "families");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto tok = tokenizer::from_json(synth_tokenizer_json(2000, 1), "synth");
  static const auto families = families_steps();
  const std::string text = utf8_sanitize(std::string_view(reinterpret_cast<const char*>(data), size));
  const auto ids = tok->encode(text, false);
  if (tok->decode(ids, false) != text) std::abort();  // byte-level BPE round-trips any valid UTF-8
  if (families->decode(families->encode(text, false), false) != utf8_encode(nfc(utf8_decode(text)))) std::abort();
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
