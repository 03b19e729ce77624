#include "kernels/cpu/linear_weight.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/gemv.h"

namespace troupe::kernels {

linear_weight::linear_weight(std::vector<linear_weight> parts) {
  if (parts.empty()) throw std::invalid_argument("linear_weight: a stack needs a part");
  std::vector<linear_weight> flat;  // a stack's parts are never stacks: linear() keeps one buffer per thread
  for (auto& p : parts) {
    if (auto* inner = p.parts())
      flat.insert(flat.end(), inner->begin(), inner->end());
    else
      flat.push_back(std::move(p));
  }
  k = flat[0].k;
  for (auto& p : flat) {
    if (p.k != k) throw std::invalid_argument("linear_weight: stacked parts differ in input features");
    n += p.n;
  }
  w_ = std::make_shared<const std::vector<linear_weight>>(std::move(flat));
}

std::size_t linear_weight::bytes() const {
  if (auto* q = quantized()) return q->bytes();
  if (auto* q = kquantized()) return q->bytes();
  if (auto* s = parts()) {
    std::size_t b = 0;
    for (auto& p : *s) b += p.bytes();
    return b;
  }
  return plain()->bytes();
}

void linear_weight::add_bytes_by_format(std::map<std::string, std::size_t>& into) const {
  if (bytes() == 0) return;  // an empty weight (a model without the part)
  if (auto* q = quantized()) into[quant_name(q->type)] += q->bytes();
  else if (auto* q = kquantized()) into[kquant_name(q->type)] += q->bytes();
  else if (auto* s = parts())
    for (auto& p : *s) p.add_bytes_by_format(into);
  else if (auto* p = plain()) into[dtype_name(p->type)] += p->bytes();
}

bool linear_weight::int8_dot() const {
  if (auto* s = parts()) return std::all_of(s->begin(), s->end(), [](const linear_weight& p) { return p.int8_dot(); });
  return quantized() || kquantized();
}

void linear(const float* x, std::size_t rows, const linear_weight& w, const float* bias, float* y) {
  if (auto* q = w.quantized()) return quant_linear(x, rows, *q, bias, y);
  if (auto* q = w.kquantized()) return kquant_linear(x, rows, *q, bias, y);
  if (auto* s = w.parts()) {
    // Each part computes into its own rows, then takes its columns of y: the copy is rows x n
    // floats against a matmul of rows x n x k.
    thread_local std::vector<float> part;
    std::size_t col = 0;
    for (auto& p : *s) {
      part.resize(rows * p.n);
      linear(x, rows, p, bias ? bias + col : nullptr, part.data());
      for (std::size_t r = 0; r < rows; ++r) std::memcpy(y + r * w.n + col, part.data() + r * p.n, p.n * sizeof(float));
      col += p.n;
    }
    return;
  }
  linear(x, rows, *w.plain(), bias, y);
}

}  // namespace troupe::kernels
