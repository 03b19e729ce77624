#include "runtime/eval/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "runtime/common/error.h"

namespace troupe::eval {

double perplexity_result::perplexity() const { return std::exp(mean_nll()); }

double log_probability(std::span<const float> logits, std::int32_t target) {
  double top = -INFINITY;
  for (float v : logits) top = std::max(top, double(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - top);
  return double(logits[std::size_t(target)]) - top - std::log(sum);
}

perplexity_result perplexity(const model::llama_model& m, std::span<const std::int32_t> tokens, perplexity_config cfg) {
  const auto& mc = m.config();
  const int context = mc.max_position_embeddings > 0 ? mc.max_position_embeddings : 2048;
  const int window = cfg.window > 0 ? cfg.window : context;
  if (window < 2) throw input_error("perplexity: a window of " + std::to_string(window) + " tokens scores nothing; at least 2");
  if (window > context)
    throw input_error("perplexity: a window of " + std::to_string(window) + " tokens is beyond the model's context of " + std::to_string(context));
  if (tokens.size() < 2) throw input_error("perplexity: the text has " + std::to_string(tokens.size()) + " token(s); at least 2 are needed");
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= mc.vocab_size)
      throw input_error("perplexity: token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) + " is outside the vocabulary of " +
                        std::to_string(mc.vocab_size));
  const int chunk = std::max(1, std::min(cfg.chunk, window));
  const int block = 16;
  const int blocks = (window + block - 1) / block;
  kv::kv_cache cache({blocks, block, cfg.kv_type, false}, mc.num_hidden_layers, m.kv_heads(), mc.head_dim);
  std::vector<std::int32_t> table(static_cast<std::size_t>(blocks));
  for (int i = 0; i < blocks; ++i) table[std::size_t(i)] = i;
  model::forward_workspace ws;
  std::vector<float> logits;
  const std::size_t vocab = std::size_t(mc.vocab_size);
  perplexity_result r;
  r.window = window;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t start = 0; start + 1 < tokens.size(); start += std::size_t(window)) {
    const std::size_t len = std::min(std::size_t(window), tokens.size() - start);
    if (len < 2) break;  // a last window of one token has nothing to score
    ++r.windows;
    for (std::size_t at = 0; at < len; at += std::size_t(chunk)) {  // positions [at, end) of the window
      const std::size_t end = std::min(len, at + std::size_t(chunk));
      model::forward_batch b;
      for (std::size_t p = at; p < end; ++p) {
        b.tokens.push_back(tokens[start + p]);
        b.positions.push_back(std::int32_t(p));
        b.tables.push_back(table.data());
        if (p + 1 < len) b.logit_rows.push_back(std::int32_t(p - at));  // it predicts the window's next token
      }
      logits.resize(b.logit_rows.size() * vocab);
      m.forward(b, cache, logits.data(), ws);
      for (std::size_t i = 0; i < b.logit_rows.size(); ++i) {
        const std::size_t p = at + std::size_t(b.logit_rows[i]);
        r.nll -= log_probability(std::span<const float>(logits).subspan(i * vocab, vocab), tokens[start + p + 1]);
        ++r.tokens;
      }
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace troupe::eval
