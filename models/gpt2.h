// GPT-2 family model on the op interface: learned position embeddings, pre-LayerNorm blocks,
// causal multi-head attention, GELU (tanh) MLP, final LayerNorm, output head tied to the token
// embedding. Forward and backward are written out by hand, llm.c style, over one contiguous
// parameter buffer (and a gradient buffer of the same layout).
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
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend/backend.h"

namespace zt {

// Where the full parameters and the gradient accumulator of a parameter group live while the
// model uses them. engine/parallel/param_store.h implements it for every ZeRO stage: with
// stage 3 params() gathers the group's shards (prefetching along the announced order) and
// release_params() frees them; with stages 2-3 grads_done() starts the group's reduce-scatter.
class ParamProvider {
 public:
  virtual ~ParamProvider() = default;
  virtual void begin_pass(const std::vector<int>& group_order) {}  // the order of params() calls
  virtual void* params(int group) = 0;  // in the backend's compute dtype
  virtual void release_params(int group) {}
  virtual float* grads(int group) = 0;   // fp32; accumulate (+=) into it
  virtual void grads_done(int group) {}  // no more gradient for this group in this micro-batch
};

// A contiguous run of parameters that is gathered, reduced and sharded as a unit: group 0 is the
// embeddings (wte, wpe), group 1 + l is block l, the last group is ln_f.
struct ParamGroup {
  std::string name;
  size_t offset = 0, numel = 0;  // in floats, in the model's flat parameter layout
  size_t first_param = 0, n_params = 0;
};

struct GPT2Config {
  int n_layer = 0, n_head = 0, d_model = 0, d_ff = 0, vocab_size = 0, seq_len = 0;
};

class Comm;

// How a tensor is cut across the tensor-parallel group (Megatron-LM): Rows = output features
// (column-parallel Linear, vocabulary-parallel embedding), each of `row_blocks` equal row blocks
// split separately (the packed QKV weight is 3 blocks, so every rank gets q, k and v rows of its
// heads); Cols = input features (row-parallel Linear); None = replicated on every rank.
enum class TpSplit { None, Rows, Cols };

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;  // this rank's (local) shape
  size_t offset = 0;           // in floats, into this rank's flat parameter layout
  size_t numel = 0;
  bool decay = false;      // weight decay applies (matrices and embeddings, not biases/norms)
  float init_std = 0.0f;   // normal(0, init_std); 0 means constant init_value
  float init_value = 0.0f;
  TpSplit split = TpSplit::None;
  int row_blocks = 1;
  std::vector<int64_t> global_shape;  // the full logical shape (checkpoints, dumps)
  size_t global_offset = 0;           // in the unsharded model's flat layout
  size_t global_numel = 0;
};

class GPT2 {
 public:
  // Allocates activations for batches of up to max_batch x seq_len. Parameters and gradients
  // live in a ParamProvider (set_provider) so that ZeRO can shard them.
  // `tp` is the tensor-parallel group (null or size 1: the whole model on this rank).
  GPT2(const GPT2Config& cfg, Backend& backend, int max_batch, Comm* tp = nullptr);
  ~GPT2();
  GPT2(const GPT2&) = delete;
  GPT2& operator=(const GPT2&) = delete;

  const GPT2Config& config() const { return cfg_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  size_t num_params() const { return n_params_; }             // this rank's (local) count
  size_t num_global_params() const { return n_global_params_; }  // the full model's
  int tp_size() const { return tp_size_; }
  int tp_rank() const { return tp_rank_; }
  // Index in the full tensor of element `local` of tensor-parallel rank `rank`'s shard.
  size_t global_index(const ParamInfo& p, size_t local, int rank) const;
  void set_provider(ParamProvider* p) { prov_ = p; }

  // Initial values of the flat elements [begin, end) of the layout into dst (host memory).
  // Element i of parameter `name` is normal_at(seed, name_hash(name), i) * init_std (or its
  // constant): a pure function of (seed, name, index), whatever the layout of ranks and shards.
  void init_range(uint64_t seed, size_t begin, size_t end, float* dst) const;

  // inputs, targets: host (B, T) int32; B <= max_batch, T <= seq_len. Returns the mean loss
  // over the B*T positions (targets may be null: logits only, returns 0). With grad_scale != 0
  // the logits are replaced by dloss/dlogits scaled by grad_scale, ready for backward().
  float forward(const int32_t* inputs, const int32_t* targets, int B, int T, float grad_scale);
  // The same without waiting for the loss: the batch's mean loss is added to a device-side sum
  // that take_losses() reads (once per step instead of once per micro-batch, so the host runs
  // ahead of the GPU). forward() needs no deferred losses pending.
  void forward_deferred(const int32_t* inputs, const int32_t* targets, int B, int T, float grad_scale);
  double take_losses();  // sum of the deferred mean losses since the last call; resets it
  // Accumulates gradients of the last forward (which must have had grad_scale != 0) into the
  // provider's gradient buffers.
  void backward();
  // Full-vocabulary logits of position (b, t) of the last forward, on the host (gathered across
  // the tensor-parallel group). Collective when tensor-parallel.
  void logits_row(int b, int t, float* out_host) const;

 private:
  template <typename P>  // void* for compute-precision parameters, float* for gradients
  struct LayerPtrs {
    P ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
  };
  // Activations: void* in the compute dtype, float* for fp32 statistics. Shapes for the current
  // (B, T); L = n_layer, Ca/Fl/Vl = this rank's attention width, MLP width and vocabulary slice.
  struct Acts {
    void* encoded;               // (B,T,C)
    void* ln1;                   // (L,B,T,C)
    float *ln1_mean, *ln1_rstd;  // (L,B,T)
    void* qkv;                   // (L,B,T,3Ca)
    void* atty;                  // (L,B,T,Ca)
    float* att_lse;              // (L,B,NH,T)
    void* attproj;               // (L,B,T,C)
    void* res2;                  // (L,B,T,C)  residual after attention
    void* ln2;                   // (L,B,T,C)
    float *ln2_mean, *ln2_rstd;  // (L,B,T)
    void* fch;                   // (L,B,T,Fl) pre-GELU
    void* fch_gelu;              // (L,B,T,Fl)
    void* fcproj;                // (L,B,T,C)
    void* res3;                  // (L,B,T,C)  residual after MLP = block output
    void* lnf;                   // (B,T,C)
    float *lnf_mean, *lnf_rstd;  // (B,T)
    void* logits;                // (B,T,Vl)
    float *losses, *ce_sum, *ce_tgt;  // (B,T)
    // backward scratch
    void *dres, *dln, *dqkv, *datty, *dfch, *dfch_gelu;  // (B,T,C) x2, (B,T,3Ca), (B,T,Ca), (B,T,Fl) x2
  };
  // Element `i` of a compute-precision tensor.
  void* el(void* base, int64_t i) const { return static_cast<char*>(base) + i * int64_t(esize_); }
  // Pointers into a group's buffer (compute params or fp32 grads), by the tensors' offsets.
  template <typename P>
  LayerPtrs<P> layer(P group_base, int l) const;
  void* at(void* group_base, size_t param) const { return el(group_base, group_rel(param)); }
  float* at(float* group_base, size_t param) const { return group_base + group_rel(param); }
  int64_t group_rel(size_t param) const {
    return int64_t(params_[param].offset - groups_[group_of_[param]].offset);
  }
  int head_group() const { return int(groups_.size()) - 1; }  // ln_f
  // Sum over the tensor-parallel group of a compute-precision activation (n elements), reduced
  // in fp32.
  void tp_all_reduce(void* buf, int64_t n) const;

  GPT2Config cfg_;
  Backend& be_;
  int max_batch_;
  std::vector<ParamInfo> params_;
  std::vector<ParamGroup> groups_;
  std::vector<int> group_of_;  // param index -> group index
  size_t n_params_ = 0, n_global_params_ = 0;
  ParamProvider* prov_ = nullptr;
  Comm* tp_ = nullptr;
  int tp_size_ = 1, tp_rank_ = 0;
  int C_l_ = 0, F_l_ = 0, V_l_ = 0, NH_l_ = 0;  // this rank's attention width, MLP width, vocab, heads
  size_t esize_ = 4;              // bytes per compute-precision element
  void* act_buf_ = nullptr;
  float* tp_scratch_ = nullptr;    // (B,T,max(C,Vl)) fp32: reductions of 16-bit activations
  double* loss_acc_ = nullptr;     // (1) device: sum of deferred mean losses
  double host_losses_ = 0;         // deferred losses computed on the host (vocabulary-parallel)
  int deferred_ = 0;               // forwards whose loss is pending
  int32_t* tokens_buf_ = nullptr;  // 2 slots of: inputs (B*T) then targets (B*T)
  int token_slot_ = 0;
  uint64_t slot_free_[2] = {0, 0};  // Backend::mark() after the last op reading each slot
  Acts acts_{};
  int cur_B_ = 0, cur_T_ = 0;
  bool grads_ready_ = false;
};

}  // namespace zt
