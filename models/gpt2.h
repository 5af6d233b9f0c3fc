// GPT-2 family model on the op interface: learned position embeddings, pre-LayerNorm blocks,
// causal multi-head attention, GELU (tanh) MLP, final LayerNorm, output head tied to the token
// embedding. Forward and backward are written out by hand, llm.c style, block by block
// (block_forward / block_backward), through the tensor-parallel helpers.
//
// Parameters, in buffer order, with PyTorch (nanoGPT) names and nn.Linear layouts (out, in):
//   transformer.wte.weight            (V, C)   token embedding; also the output head (tied)
//   transformer.wpe.weight            (T, C)   position embedding, T = seq_len
//   transformer.h.{i}.ln_1.weight/bias         (C)
//   transformer.h.{i}.attn.c_attn.weight       (3C, C)  packed QKV: rows [0,C) = q, [C,2C) = k,
//   transformer.h.{i}.attn.c_attn.bias         (3C)     [2C,3C) = v; head h uses rows h*hs..+hs
//                                                        of each (hs = C / n_head)
//   transformer.h.{i}.attn.c_proj.weight/bias  (C, C) / (C)
//   transformer.h.{i}.ln_2.weight/bias         (C)
//   transformer.h.{i}.mlp.c_fc.weight/bias     (F, C) / (F)    F = d_ff
//   transformer.h.{i}.mlp.c_proj.weight/bias   (C, F) / (C)
//   transformer.ln_f.weight/bias               (C)
// Groups: 0 = embeddings (wte, wpe), 1 + l = block l, last = ln_f.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/config/spec.h"
#include "engine/model/decoder_lm.h"

namespace zt {

struct GPT2Config {
  int n_layer = 0, n_head = 0, d_model = 0, d_ff = 0, vocab_size = 0, seq_len = 0;
  // The vocabulary as held: vocab_size padded (0 = not padded) so that the embedding and logits
  // have GPU-friendly sizes and split evenly across tensor-parallel ranks. The padding rows of
  // wte stay zero and the padding logits are -inf, so they never enter the loss or sampling.
  int vocab_padded = 0;
  float norm_eps = 1e-5f;  // LayerNorm epsilon
  Recompute recompute = Recompute::None;
  bool sequence_parallel = false;  // the norms' and residuals' rows split across the tensor group
  RunSpec::Lora lora = {};  // low-rank adapters on the roles lora_roles() names (rank 0: none)
  int vocab_held() const { return vocab_padded > 0 ? vocab_padded : vocab_size; }
};

class Comm;

class GPT2 final : public DecoderLM {
 public:
  // The linear layers [lora] targets may name, in block order (the adapters' sites): the packed
  // attention input (c_attn), its output (attn.c_proj), the MLP's input (c_fc; with an adapter its
  // GELU runs apart from the GEMM, after the adapter's update) and output (mlp.c_proj).
  enum LoraRole { kQkv, kO, kUp, kDown };
  static std::vector<std::string> lora_roles() { return {"qkv", "o", "up", "down"}; }
  // Block l's linear layers in role order, their full nn.Linear shapes and tensor-parallel splits.
  static std::vector<LoraSite> lora_sites(const GPT2Config& cfg, int l);

  // Allocates activations for batches of up to max_batch x seq_len. Parameters and gradients
  // live in a ParamProvider (set_provider) so that ZeRO can shard them.
  // `tp` is the tensor-parallel group (null or size 1: the whole model on this rank).
  GPT2(const GPT2Config& cfg, Backend& backend, int max_batch, Comm* tp = nullptr);

  const GPT2Config& config() const { return cfg_; }
  // The bytes of the activation buffer one rank of a tensor-parallel group of `tp` carves for
  // batches of up to max_batch (the same slots the constructor carves; nothing is built).
  static double activation_footprint(const GPT2Config& cfg, int max_batch, int tp, size_t compute_size);
  int seq_len() const override { return cfg_.seq_len; }
  int vocab_size() const override { return cfg_.vocab_size; }
  std::string describe() const override;
  std::array<LinearShape, kBlockLinears> block_linears() const override;

  void forward_deferred(const int32_t* inputs, const int32_t* targets, const int32_t* positions, int B, int T,
                        float grad_scale) override;
  void backward() override;
  void logits_row(int b, int t, float* out_host) const override {
    last_logits_row(acts_.head, V_l_, b, t, out_host);
  }

 private:
  template <typename P>  // void* for compute-precision parameters, float* for gradients
  struct BlockParams {
    P ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  };
  // One block's activations for the current (B, T): void* in the compute dtype, float* for fp32
  // statistics. Ca/Fl = this rank's attention and MLP width. The (B,T,C) tensors and their
  // statistics are the sequence region's: with sequence parallelism, this rank's seq_rows of them.
  struct BlockActs {
    void* ln1;                   // (B,T,C)
    float *ln1_mean, *ln1_rstd;  // (B,T)
    void* qkv;                   // (B,T,3Ca)
    void* atty;                  // (B,T,Ca)
    float* att_lse;              // (B,NH,T)
    void* attproj;               // (B,T,C)
    void* res2;                  // (B,T,C)  residual after attention
    void* ln2;                   // (B,T,C)
    float *ln2_mean, *ln2_rstd;  // (B,T)
    void* fch;                   // (B,T,Fl) pre-GELU
    void* fch_gelu;              // (B,T,Fl)
    void* fcproj;                // (B,T,C)
    void* res3;                  // (B,T,C)  block output = res2 + fcproj, written by the next
                                 //          block's (or ln_f's) fused residual LayerNorm
  };
  // Activations of every block (L = n_layer) and of the head, carved from one allocation. With
  // recompute, the tensors recomputed in backward have one slot that every block reuses: the
  // norm outputs and their statistics (selective), everything but res3, the block inputs (full).
  struct Acts {
    void* encoded;               // (B,T,C)
    void *ln1, *qkv, *atty, *attproj, *res2, *ln2, *fch, *fch_gelu, *fcproj, *res3;  // (L, ...)
    float *ln1_mean, *ln1_rstd, *att_lse, *ln2_mean, *ln2_rstd;                      // (L, ...)
    void* lnf;                   // (B,T,C)
    float *lnf_mean, *lnf_rstd;  // (B,T)
    HeadActs head;               // the output head's chunk of logits, last rows, weight gradient
    // backward scratch
    void *dres, *dln, *dqkv, *datty, *dfch;  // (B,T,C) x2, (B,T,3Ca), (B,T,Ca), (B,T,Fl)
    SequenceActs seq;                        // sequence parallelism's gathered rows and partial sums
  };
  // Every activation slot, in carve order, pointing into `a`: the one list of the activations.
  static std::vector<ActSlot> activation_slots(const GPT2Config& cfg, int max_batch, int tp, Acts& a);
  template <typename P>
  BlockParams<P> block_params(P group_base, int l) const;
  BlockActs block_acts(int l) const;  // block l's slice of acts_ for the current (B, T)
  // The activations backward needs that recompute dropped, for block l whose input is `in`.
  void recompute_block(int l, const BlockParams<void*>& w, const void* in);

  // Block l: its input is the residual stream `in` (the embedding, or the previous block's
  // res2 + fcproj, summed here by the fused residual LayerNorm into `in_sum`).
  void block_forward(int l, const BlockParams<void*>& w, const void* in_a, const void* in_b, void* in_sum);
  // dres (B,T,C): gradient w.r.t. the block's output on entry, w.r.t. its input on return.
  void block_backward(int l, const BlockParams<void*>& w, const BlockParams<float*>& g, const void* in);

  GPT2Config cfg_;
  int C_l_ = 0, F_l_ = 0, V_l_ = 0, NH_l_ = 0;  // this rank's attention width, MLP width, vocab, heads
  Acts acts_{};
};

}  // namespace zt
