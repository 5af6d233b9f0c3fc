// The Llama-shaped decoder on the op interface (Llama 2/3, Mistral, Qwen2/2.5, Qwen3; the
// families in models/*_family.cpp set its options): RMSNorm pre-norm blocks, rotary position
// embeddings (Hugging Face's half-rotation convention, see engine/backend/cpu/ops.h),
// grouped-query causal attention, SwiGLU MLP, final RMSNorm, an output head that is its own
// matrix or (tie_embeddings) the token embedding. Options: biases on q, k and v (Qwen2; never on
// o or the MLP), an RMSNorm of each q and k head before RoPE (Qwen3), and a head width other
// than d_model / n_head (Qwen3, Mistral Nemo).
//
// Parameters, in buffer order, with Hugging Face (LlamaForCausalLM) names and nn.Linear layouts
// (out, in); hs = the head width, Q = n_head * hs, KV = n_kv_head * hs, F = d_ff:
//   model.embed_tokens.weight                       (V, C)
//   model.layers.{i}.input_layernorm.weight         (C)
//   model.layers.{i}.self_attn.q_proj.weight        (Q, C)   head h: rows h*hs..+hs
//   model.layers.{i}.self_attn.k_proj.weight        (KV, C)  query head h reads key/value head
//   model.layers.{i}.self_attn.v_proj.weight        (KV, C)  h / (n_head / n_kv_head)
//   model.layers.{i}.self_attn.{q,k,v}_proj.bias    (Q), (KV), (KV)   qkv_bias only
//   model.layers.{i}.self_attn.o_proj.weight        (C, Q)
//   model.layers.{i}.self_attn.{q,k}_norm.weight    (hs), (hs)  qk_norm only: every head's
//   model.layers.{i}.post_attention_layernorm.weight (C)
//   model.layers.{i}.mlp.gate_proj.weight           (F, C)
//   model.layers.{i}.mlp.up_proj.weight             (F, C)
//   model.layers.{i}.mlp.down_proj.weight           (C, F)
//   model.norm.weight                               (C)
//   lm_head.weight                                  (V, C)   absent when tied
// q, k and v (and gate and up) are column-parallel and adjacent in the table, so this rank's
// rows of them form one packed matrix and one GEMM computes [q | k | v] (and [gate | up]); the
// three biases likewise form one packed bias.
// With more tensor-parallel ranks T than key/value heads, each key/value head is replicated on
// the T / n_kv_head ranks whose query heads read it (ParamInfo::tp_replicas); their gradients
// (weights and biases) are summed across those ranks in backward. The q/k norms' weights are
// replicated on every rank and applied to that rank's heads: each rank's gradient is a part,
// summed over the tensor group in backward, so every rank applies the same update.
// Groups: 0 = embeddings, 1 + l = block l, last = model.norm (+ lm_head).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/config/spec.h"
#include "engine/model/decoder_lm.h"

namespace zt {

struct LlamaConfig {
  const char* family = "llama";  // the [model] arch, for describe()
  int n_layer = 0, n_head = 0, n_kv_head = 0, d_model = 0, d_ff = 0, vocab_size = 0, seq_len = 0;
  int vocab_padded = 0;  // the vocabulary as held (0 = not padded), as in GPT2Config
  int head_dim = 0;       // 0: d_model / n_head
  bool qkv_bias = false;  // Qwen2: biases on q, k and v
  bool qk_norm = false;   // Qwen3: RMSNorm of each q and k head, before RoPE
  float rope_theta = 10000.0f, norm_eps = 1e-5f;
  RopeScaling rope_scaling;  // Llama 3.1's frequency rule; plain RoPE by default
  bool tie_embeddings = false;
  Recompute recompute = Recompute::None;
  bool sequence_parallel = false;  // the norms' and residuals' rows split across the tensor group
  RunSpec::Lora lora = {};  // low-rank adapters on the roles lora_roles() names (rank 0: none)
  int vocab_held() const { return vocab_padded > 0 ? vocab_padded : vocab_size; }
  int head_size() const { return head_dim > 0 ? head_dim : d_model / n_head; }
};

class Comm;

class Llama final : public DecoderLM {
 public:
  // The linear layers [lora] targets may name, in block order (the adapters' sites).
  enum LoraRole { kQ, kK, kV, kO, kGate, kUp, kDown };
  static std::vector<std::string> lora_roles() { return {"q", "k", "v", "o", "gate", "up", "down"}; }
  // Block l's linear layers in role order, their full nn.Linear shapes and tensor-parallel splits
  // (key/value heads held by kv_replicas ranks each).
  static std::vector<LoraSite> lora_sites(const LlamaConfig& cfg, int l, int kv_replicas);

  Llama(const LlamaConfig& cfg, Backend& backend, int max_batch, Comm* tp = nullptr);
  ~Llama() override;

  const LlamaConfig& config() const { return cfg_; }
  int seq_len() const override { return cfg_.seq_len; }
  int vocab_size() const override { return cfg_.vocab_size; }
  std::string describe() const override;
  std::array<LinearShape, kBlockLinears> block_linears() const override;

  void forward_deferred(const int32_t* inputs, const int32_t* targets, const int32_t* positions, int B, int T,
                        float grad_scale) override;
  void backward() override;
  void logits_row(int b, int t, float* out_host) const override {
    last_logits_row(acts_.head, int(w_.v), b, t, out_host);
  }

  // This rank's widths in a tensor-parallel group of `tp`.
  struct Widths {
    int64_t q, kv, qkv, f, v;  // this rank's query width, key (= value) width, [q|k|v], MLP, vocab
  };
  static Widths widths(const LlamaConfig& cfg, int tp);
  // The bytes of the activation buffer one rank carves for batches of up to max_batch (the same
  // slots the constructor carves; nothing is built).
  static double activation_footprint(const LlamaConfig& cfg, int max_batch, int tp, size_t compute_size);

 private:
  template <typename P>  // void* for compute-precision parameters, float* for gradients
  struct BlockParams {
    P norm1, qkv, o, norm2, gate_up, down;  // q|k|v and gate|up are packed (adjacent rows)
    P qkv_bias, q_norm, k_norm;             // null without the option
  };
  // (B,T,C) tensors and their statistics are the sequence region's: with sequence parallelism,
  // this rank's seq_rows of them.
  struct BlockActs {
    void* ln1;         // (B,T,C)
    float* rstd1;      // (B,T)
    void* qkv;         // (B,T,Wqkv) q and k (normed and) rotated; qk_norm: one slot for all blocks
    void* qkv_raw;     // (B,T,Wqkv) qk_norm: the projection before the norm
    float* qk_rstd;    // (B,T,NHl+NKVl) qk_norm: q heads' then k heads' rstd
    void* atty;        // (B,T,Wq)
    float* lse;        // (B,NHl,T)
    void* attproj;     // (B,T,C)
    void* res2;        // (B,T,C) residual after attention
    void* ln2;         // (B,T,C)
    float* rstd2;      // (B,T)
    void* gate_up;     // (B,T,2Fl)
    void* act;         // (B,T,Fl) silu(gate) * up
    void* mlp;         // (B,T,C)
    void* res3;        // (B,T,C) block output, written by the next block's fused residual norm
  };
  struct Acts {
    void* encoded;  // (B,T,C)
    void *ln1, *qkv, *qkv_raw, *atty, *attproj, *res2, *ln2, *gate_up, *act, *mlp, *res3;  // (L, ...)
    float *rstd1, *qk_rstd, *lse, *rstd2;                                                 // (L, ...)
    void* lnf;       // (B,T,C)
    float* lnf_rstd;  // (B,T)
    HeadActs head;   // the output head's chunk of logits, last rows, weight gradient
    void *dres, *dln, *dqkv, *datty, *dgate_up, *dact;  // backward scratch
    SequenceActs seq;  // sequence parallelism's gathered rows and partial sums
  };
  // Every activation slot, in carve order, pointing into `a`: the one list of the activations.
  static std::vector<ActSlot> activation_slots(const LlamaConfig& cfg, int max_batch, int tp, Acts& a);
  template <typename P>
  BlockParams<P> block_params(P group_base, int l) const;
  // The places among a block's tensors (table order) of o_proj's weight and of the second norm
  // (the optional q|k|v biases and q/k norms come before them)
  size_t o_tensor() const { return cfg_.qkv_bias ? 7 : 4; }
  size_t norm2_tensor() const { return o_tensor() + (cfg_.qk_norm ? 3 : 1); }
  BlockActs block_acts(int l) const;
  // The activations backward needs that recompute dropped, for block l whose input is `in`.
  void recompute_block(int l, const BlockParams<void*>& w, const void* in);

  // q|k|v as attention reads them, from the projection: (qk_norm: each q and k head normed, then)
  // q and k rotated, in x.qkv. With qk_norm its one slot is redone for each block in backward (the
  // projection is kept per block: one (B,T,Wqkv) per block, not two).
  void attention_input(const BlockActs& x, const BlockParams<void*>& w);
  void block_forward(int l, const BlockParams<void*>& w, const void* in_a, const void* in_b, void* in_sum);
  void block_backward(int l, const BlockParams<void*>& w, const BlockParams<float*>& g, const void* in);
  // Sums this micro-batch's gradient of the replicated key/value rows (their weights' and, with
  // qkv_bias, their biases'; this rank's part in place, the earlier accumulation in kv_saved_)
  // across the ranks that hold them.
  void sum_replicated_kv_grads(float* kv_weight_grad, float* kv_bias_grad);
  int64_t kv_grad_numel() const;  // the replicated key/value gradient elements: weights, biases

  LlamaConfig cfg_;
  Widths w_{};
  int NH_l_ = 0, NKV_l_ = 0, kv_replicas_ = 1;
  Acts acts_{};
  float* kv_saved_ = nullptr;  // (kv_grad_numel) fp32, replicated key/value heads only
  float* kv_sum_ = nullptr;    // (pieces, kv_grad_numel) fp32
  SequenceGrads head_norm_grads_;  // the q/k norms': a part per tensor-parallel rank
};

}  // namespace zt
