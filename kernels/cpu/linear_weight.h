// A linear layer's weight in whichever form it was stored: plain (f32/f16/bf16 panels),
// quantized blocks (q8_0/q4_0/int8 panels), K-quant or IQ4_XS rows, or a stack of those where
// the fused parts of one projection differ in format (a GGUF Q4_K_M file stores some layers'
// attn_v in Q6_K beside a Q4_K attn_q). The model holds these and calls linear(); only the
// kernels look inside.
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <memory>
#include <variant>
#include <vector>

#include "kernels/cpu/kquant_weight.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/quant_weight.h"

namespace troupe::kernels {

class linear_weight;
// Parts whose outputs follow one another: part i's n outputs come after part i - 1's.
using stacked_weight = std::shared_ptr<const std::vector<linear_weight>>;

class linear_weight {
 public:
  linear_weight() = default;
  linear_weight(packed_weight w) : n(w.n), k(w.k), w_(std::move(w)) {}
  linear_weight(quant_weight w) : n(w.n), k(w.k), w_(std::move(w)) {}
  linear_weight(kquant_weight w) : n(w.n), k(w.k), w_(std::move(w)) {}
  // Parts of one k (checked: throws std::invalid_argument otherwise).
  explicit linear_weight(std::vector<linear_weight> parts);

  std::size_t n = 0, k = 0;  // out features, in features
  std::size_t bytes() const;  // what one matmul reads
  // Those bytes by the format that holds them ("f16", "q4_0", "q6_k", ...), a stack's parts
  // each under its own; added into `into`.
  void add_bytes_by_format(std::map<std::string, std::size_t>& into) const;
  // Whether every part runs the int8 dot-product kernels (a quantized or K-quant format).
  bool int8_dot() const;
  const packed_weight* plain() const { return std::get_if<packed_weight>(&w_); }
  const quant_weight* quantized() const { return std::get_if<quant_weight>(&w_); }
  const kquant_weight* kquantized() const { return std::get_if<kquant_weight>(&w_); }
  const std::vector<linear_weight>* parts() const {
    auto* s = std::get_if<stacked_weight>(&w_);
    return s ? s->get() : nullptr;
  }

 private:
  std::variant<packed_weight, quant_weight, kquant_weight, stacked_weight> w_;
};

// y = x W^T (+ bias), the kernels the weight's form says (a stack: each part into its columns).
void linear(const float* x, std::size_t rows, const linear_weight& w, const float* bias, float* y);

}  // namespace troupe::kernels
