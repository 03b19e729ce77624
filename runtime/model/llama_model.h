// A Llama-family decoder (Llama, Mistral, Qwen2) read from a Hugging Face folder, with a forward
// pass over a batch of tokens from many sequences that reads and writes a paged KV cache.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/linear_weight.h"
#include "kernels/cpu/packed_weight.h"
#include "runtime/collectives/communicator.h"
#include "runtime/kv/kv_cache.h"
#include "runtime/model/model_config.h"
#include "runtime/model/gguf.h"
#include "runtime/model/safetensors.h"
#include "runtime/model/tensor_shard.h"

namespace troupe::model {

// One forward call: tokens of any number of sequences, flattened. Token t sits at position
// positions[t] of the sequence whose block table is tables[t]; every earlier position of that
// sequence must already be in the cache or earlier in this batch.
struct lora_adapter;  // lora.h

// Rows [first, first + count) of a forward's tokens that run with a LoRA adapter (lora.h): each
// adapted projection adds the adapter's share to theirs. Rows in no span run the base model, so
// one batch mixes adapters and the base.
struct adapter_span {
  std::int32_t first = 0, count = 0;
  const lora_adapter* adapter = nullptr;
};

struct forward_batch {
  std::vector<std::int32_t> tokens;         // [T]
  std::vector<std::int32_t> positions;      // [T]
  std::vector<const std::int32_t*> tables;  // [T] block ids of the token's sequence
  std::vector<std::int32_t> logit_rows;     // indices into tokens whose logits are wanted
  std::vector<adapter_span> adapters;       // disjoint; on a whole model only (no tensor/expert split)
  // [windowed group - 1][T]: its pages, for a cache split by window groups (kv/window_groups.h)
  std::vector<std::vector<const std::int32_t*>> group_tables;
};

// Rows [first, first + count) of a forward's tokens, all of one sequence, whose hidden states
// are pooled into an embedding (pooling.h).
struct row_span {
  std::int32_t first = 0, count = 0;
};

// Scratch buffers of a forward pass. One per caller: a model is shared read-only by every
// replica in the process, each forwarding with its own workspace.
struct forward_workspace {
  std::vector<float> x, h, qkv, q, k, attn, tmp, gu, act, cos, sin, cos_local, sin_local, logits_in;
  std::vector<float> logits_part, logits_all;  // a tensor-parallel rank's vocabulary slice, then every rank's
  std::vector<float> router, rows, rows_gu, rows_act, rows_out;  // mixture-of-experts layers
  std::vector<float> lora;  // LoRA adapters' intermediate rows (apply_lora)
  // Tokens routed to each expert, summed over layers, since the caller last cleared it. Counted
  // once per group: by tensor rank 0, or, expert parallel, by rank 0 from every rank's counts.
  std::vector<std::uint64_t> expert_tokens;
};

// One SwiGLU MLP: gate then up rows fused, and down.
struct mlp_weights {
  kernels::linear_weight gate_up;  // [2 features][hidden]
  kernels::linear_weight down;     // [hidden][features]
};

// A mixture-of-experts MLP (model_config::moe): this rank's part of it.
struct moe_weights {
  kernels::packed_weight router;  // [experts][hidden], whole on every rank
  std::vector<mlp_weights> experts;  // every expert (tensor ranks hold a slice of each), or an
                                     // expert-parallel rank's own, from first_expert on
  int first_expert = 0;
  mlp_weights shared;                // Qwen2-MoE's shared expert (empty when none)
  std::vector<float> shared_gate;    // [hidden]: its sigmoid gate
};

struct layer_weights {
  std::vector<float> input_norm, post_norm;  // [hidden]: before attention, before the MLP
  std::vector<float> attn_out_norm, mlp_out_norm;  // [hidden] on their outputs (model_config::sandwich_norms) or empty
  std::vector<float> q_norm, k_norm;         // [head_dim] (Qwen3's per-head norms) or empty
  kernels::linear_weight qkv;                // [q_dim + 2 kv_dim][hidden], q then k then v
  std::vector<float> qkv_bias;               // [q_dim + 2 kv_dim] or empty
  kernels::linear_weight o;                  // [hidden][q_dim]
  kernels::linear_weight gate_up;            // [2 intermediate][hidden], gate then up (dense layers)
  kernels::linear_weight down;               // [hidden][intermediate]
  std::unique_ptr<moe_weights> moe;          // a mixture-of-experts layer instead of gate_up/down
};

class llama_model {
 public:
  // Loads config.json and the folder's safetensors files (those model.safetensors.index.json
  // lists, else every *.safetensors). Throws input_error naming the file and
  // the tensor for a missing tensor, a wrong shape, an unsupported dtype or architecture.
  // `progress(layers_done, layers)` is called as the weights are packed (the slow part).
  // With `shard`, only that tensor-parallel rank's part of each matrix is loaded and packed
  // (tensor_shard.h); the forward calls of such a model take the communicator of its group.
  static std::unique_ptr<llama_model> load(const std::string& dir,
                                           const std::function<void(int, int)>& progress = {},
                                           tensor_shard shard = {});

  const model_config& config() const { return cfg_; }  // the whole model's
  const tensor_shard& shard() const { return shard_; }
  // The KV heads this rank computes and caches (all of them unless tensor-parallel).
  int kv_heads() const { return n_kv_; }
  const std::string& dir() const { return dir_; }
  kernels::dtype weight_type() const { return weight_type_; }

  // Runs the batch, writing its K/V into `cache`, and fills logits[i][vocab] for each of
  // batch.logit_rows. Safe to call from several threads with different caches and workspaces.
  // A tensor-parallel rank passes its group's communicator `tp` (every rank of the group calls
  // with the same batch); each then ends with the same hidden states and the whole logits.
  void forward(const forward_batch& batch, kv::kv_cache& cache, float* logits, forward_workspace& ws,
               collectives::communicator* tp = nullptr) const;

  // The forward in stages, for pipeline-parallel ranks that each hold a range of layers:
  // embed() fills ws.x (the hidden state, [T][hidden]) from the tokens; run_layers() applies
  // layers [first, last) to ws.x, with `cache` holding exactly those layers (cache layer 0 is
  // model layer `first`); head() turns ws.x into the logits of batch.logit_rows. forward() is
  // embed + run_layers(0, num_layers()) + head, so a split run is bit-identical to a whole one.
  void embed(const forward_batch& batch, forward_workspace& ws) const;
  void run_layers(const forward_batch& batch, int first, int last, kv::kv_cache& cache, forward_workspace& ws,
                  collectives::communicator* tp = nullptr) const;
  void head(const forward_batch& batch, forward_workspace& ws, float* logits,
            collectives::communicator* tp = nullptr) const;
  int num_layers() const { return int(layers_.size()); }
  // After a forward (or the last stage's run_layers), with ws.x the hidden states: for each span,
  // the sum of its rows' hidden states after the final norm ([hidden] each, summed in double).
  std::vector<std::vector<float>> pool(const forward_workspace& ws, const std::vector<row_span>& spans) const;

  // Bytes of weights one forward step reads (every matrix once, plus the used embedding rows).
  std::size_t weight_bytes_per_step() const;
  // FLOPs per token through the layers' matrices (excluding attention over the context).
  std::size_t layer_flops_per_token() const;
  // FLOPs of the LM head for one token (computed only for tokens whose logits are wanted).
  std::size_t lm_head_flops() const { return 2 * lm_head_.n * lm_head_.k; }
  // The layers' projection bytes by format ("q4_k", "q6_k", "f16", ...), and whether all of them
  // (and, separately, the LM head) run the int8 dot-product kernels: what a benchmark judges
  // their compute against.
  std::map<std::string, std::size_t> projection_bytes_by_format() const;
  bool projections_int8_dot() const;
  bool lm_head_int8_dot() const { return lm_head_.int8_dot(); }
  std::string lm_head_format() const;

 private:
  llama_model() = default;
  void load_tensors(const std::string& dir, const std::function<void(int, int)>& progress);
  void attention_sublayer(const forward_batch& b, int l, int cache_layer, kv::kv_cache& cache, forward_workspace& w,
                          collectives::communicator* tp) const;
  void pre_norm(const std::vector<float>& norm, std::size_t tokens, forward_workspace& w) const;
  void add_residual(const std::vector<float>& out_norm, std::size_t tokens, forward_workspace& w) const;
  void cap_logits(float* logits, std::size_t rows) const;
  // Adds layer L's mixture-of-experts output for h ([T][hidden]) to out (zeroed by the caller).
  void mlp_sublayer(const forward_batch& b, int l, forward_workspace& w, collectives::communicator* tp) const;
  void moe_mlp(const moe_weights& L, const float* h, std::size_t T, float* out, forward_workspace& w) const;
  // The same on an expert-parallel rank: writes the whole output (not a partial sum) to out.
  void moe_dispatch(const moe_weights& L, const float* h, std::size_t T, float* out, forward_workspace& w,
                    collectives::communicator& ep) const;

  std::string dir_;
  model_config cfg_;
  tensor_shard shard_;
  // This rank's part: query heads, KV heads, intermediate features, vocabulary [vocab0_, vocab1_).
  int n_heads_ = 0, n_kv_ = 0, inter_ = 0;
  std::int64_t vocab0_ = 0, vocab1_ = 0;
  kernels::dtype weight_type_ = kernels::dtype::f32;
  std::vector<std::unique_ptr<safetensors_file>> files_;
  std::unique_ptr<gguf_file> gguf_;        // or the GGUF file the model was read from
  std::vector<std::uint8_t> embed_store_;  // the embeddings dequantized, when stored quantized
  tensor_info embed_;  // [vocab][hidden], read from the mapping
  std::vector<layer_weights> layers_;
  std::vector<float> final_norm_;
  kernels::linear_weight lm_head_;
  std::vector<double> inv_freq_, inv_freq_local_;  // RoPE frequencies: global layers', windowed layers' (when they differ)
};

// Tensor rank `shard` of the model in `dir`, loaded once per process while anyone holds it:
// the groups of several replicas (and a group's restarts) share one copy of each shard.
std::shared_ptr<const llama_model> shared_shard(const std::string& dir, tensor_shard shard);

}  // namespace troupe::model
