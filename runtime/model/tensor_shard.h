// Which part of a model one tensor-parallel rank holds (Megatron's split): the attention heads
// and KV heads of its range, the same range of every MLP's intermediate features, and a range
// of the vocabulary for the LM head. q/k/v and gate/up are split by output rows (column
// parallel: each rank computes its heads and features whole), o and down by input columns (row
// parallel: each rank computes a partial sum that an all-reduce adds up), so a layer costs two
// all-reduces of the hidden state, and the LM head one all-gather of the logits.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "runtime/model/model_config.h"

namespace troupe::model {

struct tensor_shard {
  int rank = 0;
  int size = 1;
  // Expert parallel: the mixture-of-experts layers' experts are placed whole on the ranks
  // (experts [E r/size, E (r+1)/size) on rank r, the shared expert on every rank) instead of
  // each being sliced, and tokens go to their experts' ranks by all-to-all. Attention and dense
  // MLPs are split as above.
  bool expert_parallel = false;
  bool whole() const { return size == 1; }
};

// Items [begin, end) of part `rank` of `n` items cut into `size` parts in order (sizes differ by
// at most one).
inline std::pair<std::int64_t, std::int64_t> shard_range(std::int64_t n, int rank, int size) {
  return {n * rank / size, n * (rank + 1) / size};
}

// Why `cfg` cannot be split over `size` tensor-parallel ranks (KV heads must divide evenly, so
// each rank's query heads use only its own KV heads), or nothing when it can.
std::optional<std::string> tensor_parallel_mismatch(const model_config& cfg, int size);
// The same for `size` expert-parallel ranks (the experts must be at least as many as the ranks).
std::optional<std::string> expert_parallel_mismatch(const model_config& cfg, int size);

}  // namespace troupe::model
