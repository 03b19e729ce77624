// The tokenizer of synthesized models: a byte-level BPE (Llama 3 style pre-tokenizer) whose
// first merges are learned from a built-in English text and the rest drawn from the seed, plus
// Llama-3-style special tokens at the top of the vocabulary.
#pragma once
#include <cstdint>
#include <string>

namespace troupe::tokenizer {

struct synth_specials {
  int bos;          // <|begin_of_text|>
  int eos;          // <|end_of_text|>
  int start_header; // <|start_header_id|>
  int end_header;   // <|end_header_id|>
  int eot;          // <|eot_id|>
};

// Ids of the special tokens for a vocabulary of `vocab_size` (which must be >= 300).
synth_specials synth_special_ids(int vocab_size);

// tokenizer.json text with exactly vocab_size tokens; deterministic in (vocab_size, seed).
std::string synth_tokenizer_json(int vocab_size, std::uint64_t seed);

// tokenizer_config.json text: special tokens and a Llama-3-style chat template.
std::string synth_tokenizer_config_json(int vocab_size);

}  // namespace troupe::tokenizer
