// A model's greedy run as one rank of a tensor- or expert-parallel group (or whole): shared by
// the in-process and the cross-process parallelism tests.
#pragma once
#include <algorithm>
#include <vector>

#include "runtime/collectives/communicator.h"
#include "runtime/model/llama_model.h"

namespace troupe::test {

struct run_output {
  std::vector<std::vector<float>> logits;  // per step: the last token's logits
  std::vector<std::int32_t> tokens;        // greedy choices
};

inline std::int32_t argmax(const std::vector<float>& v) {
  return std::int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

// Prefills `prompt` (in two chunks, so a chunk attends to cached KV) and decodes `steps` greedy
// tokens with `model` as rank `comm` of its group (or whole, with no comm).
inline run_output generate(const model::llama_model& m, collectives::communicator* comm, const std::vector<std::int32_t>& prompt,
                    int steps) {
  const auto& mc = m.config();
  kv::kv_cache cache({16, 16, kernels::dtype::f32, false}, mc.num_hidden_layers, m.kv_heads(), mc.head_dim);
  std::vector<std::int32_t> table(16);
  for (int i = 0; i < 16; ++i) table[std::size_t(i)] = 15 - i;  // not the identity
  model::forward_workspace ws;
  run_output out;
  std::vector<float> logits(std::size_t(mc.vocab_size));
  auto step = [&](std::int32_t from, std::int32_t to, const std::vector<std::int32_t>& toks) {
    model::forward_batch b;
    for (std::int32_t p = from; p < to; ++p) {
      b.tokens.push_back(toks[std::size_t(p)]);
      b.positions.push_back(p);
      b.tables.push_back(table.data());
    }
    b.logit_rows = {std::int32_t(b.tokens.size()) - 1};
    m.forward(b, cache, logits.data(), ws, comm);
    out.logits.push_back(logits);
    out.tokens.push_back(argmax(logits));
  };
  std::vector<std::int32_t> seq = prompt;
  const auto half = std::int32_t(prompt.size() / 2);
  step(0, half, seq);
  step(half, std::int32_t(seq.size()), seq);
  for (int s = 0; s < steps; ++s) {
    seq.push_back(out.tokens.back());
    step(std::int32_t(seq.size()) - 1, std::int32_t(seq.size()), seq);
  }
  return out;
}

}  // namespace troupe::test
