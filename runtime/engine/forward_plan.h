// What a replica's workers run for one engine step: the scheduled tokens of every running
// sequence, flattened, with each sequence's block table. The scheduler (which owns the block
// manager) builds it; the workers (which own the KV tensors) execute it. A value type, so it
// can cross actor boundaries; view() gives the model's pointer form without copying.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/model/llama_model.h"
#include "runtime/sampling/sample_rows.h"

namespace troupe::engine {

// Rows [first, first + count) of a plan that run with a LoRA adapter (one sequence's tokens).
struct adapter_rows {
  std::int32_t first = 0, count = 0;
  std::shared_ptr<const model::lora_adapter> adapter;
};

struct forward_plan {
  std::vector<std::int32_t> tokens;               // [T]
  std::vector<std::int32_t> positions;            // [T]
  std::vector<std::int32_t> seq_of_token;         // [T] index into tables
  std::vector<std::vector<std::int32_t>> tables;  // block ids of each scheduled sequence
  // A cache split by window groups (kv/window_groups.h): [group - 1][sequence], the pages of
  // each windowed group (-1 where a block is out of the sequence's window). Empty otherwise.
  std::vector<std::vector<std::vector<std::int32_t>>> group_tables;
  std::vector<std::int32_t> logit_rows;           // tokens whose logits the step samples from
  std::vector<sampling::sampling_row> sampling;   // how to choose each logit row's token
  std::vector<model::row_span> pools;             // rows whose final hidden states are summed (embeddings)
  // Rows that run with an adapter. Not serialized: adapters run only where the whole model is in
  // the scheduler's process (executor::runs_adapters), so a plan that carries them never leaves it.
  std::vector<adapter_rows> adapters;

  bool empty() const { return tokens.empty(); }
};

// The model's view of a plan; valid while `p` lives unchanged.
inline model::forward_batch view(const forward_plan& p) {
  model::forward_batch b;
  b.tokens = p.tokens;
  b.positions = p.positions;
  b.logit_rows = p.logit_rows;
  b.tables.reserve(p.tokens.size());
  for (auto s : p.seq_of_token) b.tables.push_back(p.tables[std::size_t(s)].data());
  b.group_tables.resize(p.group_tables.size());
  for (std::size_t g = 0; g < p.group_tables.size(); ++g)
    for (auto s : p.seq_of_token) b.group_tables[g].push_back(p.group_tables[g][std::size_t(s)].data());
  for (const auto& a : p.adapters) b.adapters.push_back({a.first, a.count, a.adapter.get()});
  return b;
}

}  // namespace troupe::engine
