// The mixture-of-experts MLP of a llama_model layer (declared in llama_model.h): routing each
// token to its top-k experts, running them on one rank (moe_mlp) or across an expert-parallel
// group (moe_dispatch), and the shared expert some families add. Apart from llama_model.cpp so
// each file holds one part of the forward.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/swiglu.h"
#include "runtime/model/llama_model.h"
#include "runtime/model/op_profile.h"

namespace troupe::model {

namespace {

// Token t's experts and their weights: the router's softmax over every expert, the top k (ties
// to the lower index), renormalized when the family does.
void route_token(float* p, std::size_t E, const moe_config& mc, std::vector<std::uint32_t>& order,
                 std::vector<std::pair<std::uint32_t, float>>& chosen) {
  const std::size_t K = std::size_t(mc.experts_per_token);
  const float top = *std::max_element(p, p + E);
  float sum = 0;
  for (std::size_t e = 0; e < E; ++e) sum += p[e] = std::exp(p[e] - top);
  for (std::size_t e = 0; e < E; ++e) p[e] /= sum;
  order.resize(E);
  for (std::size_t e = 0; e < E; ++e) order[e] = std::uint32_t(e);
  std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(K), order.end(),
                    [&](std::uint32_t a, std::uint32_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; });
  float total = 0;
  for (std::size_t k = 0; k < K; ++k) total += p[order[k]];
  chosen.clear();
  for (std::size_t k = 0; k < K; ++k) chosen.emplace_back(order[k], mc.normalize_top_k ? p[order[k]] / total : p[order[k]]);
  std::sort(chosen.begin(), chosen.end());  // expert order: the order their outputs are added in
}

// One SwiGLU MLP over w.rows ([n][hidden]) into w.rows_out.
void run_mlp(const mlp_weights& m, std::size_t n, std::size_t H, forward_workspace& w) {
  const std::size_t F = m.down.k;
  w.rows_gu.resize(n * 2 * F);
  w.rows_act.resize(n * F);
  w.rows_out.resize(n * H);
  { op_timer timer(op::gate_up_proj); kernels::linear(w.rows.data(), n, m.gate_up, nullptr, w.rows_gu.data()); }
  { op_timer timer(op::swiglu); kernels::swiglu(w.rows_gu.data(), n, F, w.rows_act.data()); }
  { op_timer timer(op::down_proj); kernels::linear(w.rows_act.data(), n, m.down, nullptr, w.rows_out.data()); }
}

// Adds the shared expert's output for rows [0, T) of h, scaled by its sigmoid gate.
void add_shared_expert(const moe_weights& L, const float* h, std::size_t T, std::size_t H, float* out, forward_workspace& w) {
  if (L.shared_gate.empty() || T == 0) return;
  w.rows.assign(h, h + T * H);
  run_mlp(L.shared, T, H, w);
  for (std::size_t t = 0; t < T; ++t) {
    double z = 0;
    for (std::size_t j = 0; j < H; ++j) z += double(h[t * H + j]) * L.shared_gate[j];
    const float g = float(1.0 / (1.0 + std::exp(-z)));
    for (std::size_t j = 0; j < H; ++j) out[t * H + j] += g * w.rows_out[t * H + j];
  }
}

// One routed (token, expert) pair of an expert-parallel batch: the token's index in this rank's
// slice, and the gate weight.
struct expert_pair {
  std::uint32_t token, expert;
  float weight;
};

// The rank holding expert `e` of `E` split over `N` ranks.
int expert_rank(std::size_t e, std::size_t E, int N) {
  int q = 0;
  while (shard_range(std::int64_t(E), q, N).second <= std::int64_t(e)) ++q;
  return q;
}

// Adds the expert outputs that came back into this rank's token rows, per token in expert order
// (the order a single rank adds them in): pairs were sent in (token, expert) order per rank, so
// each one's output is its rank's next slot of `most` per rank.
void combine_in_expert_order(const std::vector<std::vector<expert_pair>>& to, std::size_t mine, std::size_t H, std::size_t E,
                             std::size_t most, const std::vector<float>& back, float* mine_out) {
  const int N = int(to.size());
  std::vector<std::size_t> next(to.size(), 0);
  std::vector<std::vector<std::pair<std::uint32_t, float>>> per_token(mine);
  for (const auto& dest : to)
    for (const auto& pr : dest) per_token[pr.token].emplace_back(pr.expert, pr.weight);
  for (std::size_t t = 0; t < mine; ++t) {
    std::sort(per_token[t].begin(), per_token[t].end());
    for (auto [e, g] : per_token[t]) {
      const int q = expert_rank(e, E, N);
      const float* y = &back[(std::size_t(q) * most + next[std::size_t(q)]++) * H];
      float* o = &mine_out[t * H];
      for (std::size_t j = 0; j < H; ++j) o[j] += g * y[j];
    }
  }
}

}  // namespace

void llama_model::moe_mlp(const moe_weights& L, const float* h, std::size_t T, float* out, forward_workspace& w) const {
  const auto& mc = *cfg_.moe;
  const std::size_t H = cfg_.hidden_size, E = std::size_t(mc.num_experts);
  w.router.resize(T * E);
  { op_timer timer(op::moe_route); kernels::linear(h, T, L.router, nullptr, w.router.data()); }
  std::vector<std::vector<std::pair<std::uint32_t, float>>> routed(E);  // expert -> (token, weight)
  std::vector<std::uint32_t> order;
  std::vector<std::pair<std::uint32_t, float>> chosen;
  for (std::size_t t = 0; t < T; ++t) {
    route_token(&w.router[t * E], E, mc, order, chosen);
    for (auto [e, g] : chosen) routed[e].emplace_back(std::uint32_t(t), g);
  }
  if (shard_.rank == 0) {  // every tensor rank routes the same tokens; one counts them
    w.expert_tokens.resize(E);
    for (std::size_t e = 0; e < E; ++e) w.expert_tokens[e] += routed[e].size();
  }
  // Each expert over its tokens, added into their rows in expert order.
  for (std::size_t e = 0; e < E; ++e) {
    const auto& toks = routed[e];
    if (toks.empty()) continue;
    w.rows.resize(toks.size() * H);
    for (std::size_t i = 0; i < toks.size(); ++i) std::memcpy(&w.rows[i * H], h + std::size_t(toks[i].first) * H, H * 4);
    run_mlp(L.experts[e], toks.size(), H, w);
    for (std::size_t i = 0; i < toks.size(); ++i) {
      float* o = out + std::size_t(toks[i].first) * H;
      const float g = toks[i].second;
      for (std::size_t j = 0; j < H; ++j) o[j] += g * w.rows_out[i * H + j];
    }
  }
  add_shared_expert(L, h, T, H, out, w);
}

// Expert parallel: rank r owns tokens [T r/N, T (r+1)/N) of the batch. It routes them, sends
// each (token, expert) pair's hidden row to the rank holding the expert (all-to-all; blocks
// padded to the largest count, which an all-gather of the counts tells every rank), runs its
// own experts over what it received, sends the outputs back the same way (all-to-all), and
// adds them into its tokens' rows in expert order, the same order a single rank adds them in.
// An all-gather of the token slices then gives every rank the whole output.
void llama_model::moe_dispatch(const moe_weights& L, const float* h, std::size_t T, float* out, forward_workspace& w,
                               collectives::communicator& ep) const {
  const auto& mc = *cfg_.moe;
  const std::size_t H = cfg_.hidden_size, E = std::size_t(mc.num_experts);
  const int N = ep.size(), me = ep.rank();
  const auto [t0, t1] = shard_range(std::int64_t(T), me, N);
  const std::size_t mine = std::size_t(t1 - t0);
  // Route this rank's tokens; pairs in (token, expert) order, grouped by destination.
  w.router.resize(std::max<std::size_t>(1, mine) * E);
  if (mine) { op_timer timer(op::moe_route); kernels::linear(h + std::size_t(t0) * H, mine, L.router, nullptr, w.router.data()); }
  std::vector<std::vector<expert_pair>> to(static_cast<std::size_t>(N));
  std::vector<std::uint32_t> order;
  std::vector<std::pair<std::uint32_t, float>> chosen;
  for (std::size_t t = 0; t < mine; ++t) {
    route_token(&w.router[t * E], E, mc, order, chosen);
    for (auto [e, g] : chosen) to[std::size_t(expert_rank(e, E, N))].push_back({std::uint32_t(t), e, g});
  }
  // Every rank's pair counts to every rank, so all agree on the padded block size; and its
  // tokens per expert, which rank 0 counts for the group.
  const std::size_t C = std::size_t(N) + E;
  std::vector<float> counts(C, 0.0f), all_counts(std::size_t(N) * C);
  for (int q = 0; q < N; ++q) counts[std::size_t(q)] = float(to[std::size_t(q)].size());
  for (int q = 0; q < N; ++q)
    for (const auto& pr : to[std::size_t(q)]) counts[std::size_t(N) + pr.expert] += 1.0f;
  { op_timer timer(op::all_gather); ep.all_gather(counts, all_counts); }
  std::size_t most = 1;
  for (int src = 0; src < N; ++src)
    for (int q = 0; q < N; ++q) most = std::max(most, std::size_t(all_counts[std::size_t(src) * C + std::size_t(q)]));
  if (me == 0) {
    w.expert_tokens.resize(E);
    for (int src = 0; src < N; ++src)
      for (std::size_t e = 0; e < E; ++e) w.expert_tokens[e] += std::uint64_t(all_counts[std::size_t(src) * C + std::size_t(N) + e]);
  }
  const std::size_t row = H + 1;  // the hidden row and the expert's id
  std::vector<float> send(std::size_t(N) * most * row, 0.0f), recv(send.size());
  for (int q = 0; q < N; ++q)
    for (std::size_t i = 0; i < to[std::size_t(q)].size(); ++i) {
      const auto& pr = to[std::size_t(q)][i];
      float* dst = &send[(std::size_t(q) * most + i) * row];
      std::memcpy(dst, h + (std::size_t(t0) + pr.token) * H, H * 4);
      dst[H] = float(pr.expert);
    }
  { op_timer timer(op::all_to_all); ep.all_to_all(send, recv); }
  // Run this rank's experts over the rows it received; outputs go back in the same slots.
  std::vector<float> back_send(std::size_t(N) * most * H, 0.0f), back_recv(back_send.size());
  std::vector<std::vector<std::size_t>> slots(L.experts.size());  // local expert -> received slots
  for (int src = 0; src < N; ++src)
    for (std::size_t i = 0; i < std::size_t(all_counts[std::size_t(src) * C + std::size_t(me)]); ++i) {
      const std::size_t slot = std::size_t(src) * most + i;
      slots[std::size_t(recv[slot * row + H]) - std::size_t(L.first_expert)].push_back(slot);
    }
  for (std::size_t e = 0; e < slots.size(); ++e) {
    if (slots[e].empty()) continue;
    w.rows.resize(slots[e].size() * H);
    for (std::size_t i = 0; i < slots[e].size(); ++i) std::memcpy(&w.rows[i * H], &recv[slots[e][i] * row], H * 4);
    run_mlp(L.experts[e], slots[e].size(), H, w);
    for (std::size_t i = 0; i < slots[e].size(); ++i) std::memcpy(&back_send[slots[e][i] * H], &w.rows_out[i * H], H * 4);
  }
  { op_timer timer(op::all_to_all); ep.all_to_all(back_send, back_recv); }
  const std::size_t part = (T + std::size_t(N) - 1) / std::size_t(N);
  std::vector<float> mine_out(part * H, 0.0f), all_out(std::size_t(N) * part * H);
  combine_in_expert_order(to, mine, H, E, most, back_recv, mine_out.data());
  add_shared_expert(L, h + std::size_t(t0) * H, mine, H, mine_out.data(), w);
  { op_timer timer(op::all_gather); ep.all_gather(mine_out, all_out); }
  for (int q = 0; q < N; ++q) {
    const auto [a, b] = shard_range(std::int64_t(T), q, N);
    std::memcpy(out + std::size_t(a) * H, &all_out[std::size_t(q) * part * H], std::size_t(b - a) * H * 4);
  }
}

}  // namespace troupe::model
