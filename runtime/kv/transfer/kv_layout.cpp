#include "runtime/kv/transfer/kv_layout.h"

namespace troupe::kv::transfer {

int kv_layout::rank_of(int layer) const {
  for (std::size_t r = 0; r < ranks.size(); ++r)
    if (layer >= ranks[r].first && layer < ranks[r].second) return int(r);
  return -1;
}

namespace {

std::optional<std::string> bad_split(const kv_layout& l, const char* side) {
  int next = 0;
  for (const auto& [a, b] : l.ranks) {
    if (a != next || b <= a)
      return std::string("the ") + side + "'s ranks do not hold layers 0.." + std::to_string(l.num_layers - 1) +
             " once each, in order";
    next = b;
  }
  if (next != l.num_layers)
    return std::string("the ") + side + "'s ranks hold " + std::to_string(next) + " of its " +
           std::to_string(l.num_layers) + " layers";
  return std::nullopt;
}

}  // namespace

std::optional<std::string> layout_mismatch(const kv_layout& s, const kv_layout& r) {
  auto differ = [](const char* what, const std::string& a, const std::string& b) {
    return std::optional<std::string>(std::string("KV layout mismatch: ") + what + " is " + a + " on the sender and " + b +
                                      " on the receiver");
  };
  auto num = [](int v) { return std::to_string(v); };
  if (s.model_key != r.model_key) return differ("the model", "'" + s.model_key + "'", "'" + r.model_key + "'");
  if (s.type != r.type) return differ("the cache dtype", kernels::dtype_name(s.type), kernels::dtype_name(r.type));
  if (s.block_size != r.block_size) return differ("the block size", num(s.block_size), num(r.block_size));
  if (s.num_layers != r.num_layers) return differ("the number of layers", num(s.num_layers), num(r.num_layers));
  if (s.n_kv_heads != r.n_kv_heads) return differ("the number of KV heads", num(s.n_kv_heads), num(r.n_kv_heads));
  if (s.head_dim != r.head_dim) return differ("the head dimension", num(s.head_dim), num(r.head_dim));
  if (s.tensor_parallel != r.tensor_parallel)
    return differ("tensor_parallel (KV heads split over ranks)", num(s.tensor_parallel), num(r.tensor_parallel));
  if (auto e = bad_split(s, "sender")) return "KV layout mismatch: " + *e;
  if (auto e = bad_split(r, "receiver")) return "KV layout mismatch: " + *e;
  return std::nullopt;
}

}  // namespace troupe::kv::transfer
