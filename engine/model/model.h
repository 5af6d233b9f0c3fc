// The Model interface: what the engine (trainer, ZeRO states, sampler, dumps, GPU check) knows of
// a model. A model owns its parameter table and activations; its parameters and gradients live
// in a ParamProvider, so that ZeRO can shard, gather and reduce them. Concrete models (models/)
// are made by models/registry.h from [model] arch; the engine never names one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/run_choices.h"
#include "engine/model/param_table.h"

namespace zt {

// Activation recompute ([train] recompute): what a model keeps between forward and backward.
inline const char* recompute_note(Recompute r) {  // for Model::describe()
  return r == Recompute::Full ? ", full recompute" : r == Recompute::Selective ? ", selective recompute" : "";
}

// A weight that FP8 linear products read (a block's linear layer: one tensor, or a packed run of
// them such as Llama's q|k|v): its parameter group and its elements in the group.
struct Fp8WeightRange {
  int group = 0;
  size_t rel = 0, numel = 0;
};

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
  // While params() returns memory that stays in place between passes (ZeRO stages 0-2), a number
  // that changes whenever the parameters' values may have (an update, a load); -1 where each pass
  // gathers them anew (stage 3). What the model derives from its parameters and keeps (the FP8
  // weight copies) is kept only while this number stays the same.
  virtual int64_t resident_params_version() const { return -1; }
  // ZeRO-3's FP8 gather ([precision] fp8_all_gather): whether the coming passes' FP8 products take
  // FP8 weights (their rows are in multiples of 16); false: every weight comes in the compute type.
  virtual void set_fp8_products(bool on) { (void)on; }
  // The FP8 copy (fp8_recipe::weight_copy_bytes' layout) of the weight at `w` in params()'s
  // memory, where the provider gathered that weight as FP8 bytes: its compute-type values are
  // then absent (the copy lies in their place). Null: the weight is there in the compute type.
  virtual const void* gathered_fp8_copy(const void* w) const { (void)w; return nullptr; }
};

// The positions of `targets` (n) that carry loss (target >= 0).
int64_t loss_tokens(const int32_t* targets, int64_t n);

class Model {
 public:
  virtual ~Model() = default;

  virtual const ParamTable& table() const = 0;
  virtual int seq_len() const = 0;
  virtual int vocab_size() const = 0;
  // One line for the log: architecture and sizes ("gpt2: 12 layers, d_model 768, ...").
  virtual std::string describe() const = 0;

  const std::vector<ParamInfo>& params() const { return table().params(); }
  const std::vector<ParamGroup>& groups() const { return table().groups(); }
  size_t num_params() const { return table().num_params(); }             // this rank's (local)
  size_t num_global_params() const { return table().num_global_params(); }  // the full model's
  // Layout-independent initial values of this rank's flat elements [begin, end) (host memory).
  void init_range(uint64_t seed, size_t begin, size_t end, float* dst) const {
    table().init_range(seed, begin, end, dst);
  }

  virtual void set_provider(ParamProvider* p) = 0;
  // Low-rank adapters ([lora], engine/model/lora.h): their parameter table (null: none) and their
  // provider (a second ZeRO store). With adapters the table() above is frozen: its provider gives
  // no gradients (grads() null) and only the adapters train.
  virtual const ParamTable* adapter_table() const { return nullptr; }
  virtual void set_adapter_provider(ParamProvider* p) { (void)p; }
  // Where the next training forward's rows are: the run's seed and the micro-batch's first global
  // sample, so that a random mask (the adapters' dropout) is drawn by global position, the same
  // for any layout (engine/job/step.cpp sets it).
  virtual void set_batch_origin(uint64_t seed, uint64_t first_sample) { (void)seed, (void)first_sample; }
  // FP8 linear layers ([precision] fp8 = "tensorwise"): the blocks' matrix products that run in
  // FP8 from now on, as `which` chooses (engine/backend/fp8_recipe.h). A model without FP8 linear
  // layers refuses (UserError).
  virtual void set_fp8(Fp8Layers which);
  // The weights the FP8 products read, after set_fp8 (none without FP8): the store that holds this
  // model's table may keep them as FP8 shards (engine/parallel/param_store.h).
  virtual std::vector<Fp8WeightRange> fp8_weights() const { return {}; }

  // inputs, targets: host (B, T) int32; B <= max_batch, T <= seq_len. A target of -1 carries no
  // loss (a prompt token, padding, a document's last token). The batch's loss summed over the
  // positions with a target is added to a sum that take_losses() reads (once per step, so the host
  // runs ahead of the GPU); targets may be null (logits only). With grad_scale != 0 the logits are
  // replaced by dloss/dlogits of each position's loss scaled by grad_scale, ready for backward().
  // positions: host (B, T), each token's position in its document (rows packed with several
  // documents: attention stays inside each, positions restart; engine/backend/cpu/ops.h), or null
  // (one document a row).
  virtual void forward_deferred(const int32_t* inputs, const int32_t* targets, const int32_t* positions, int B, int T,
                                float grad_scale) = 0;
  virtual double take_losses() = 0;  // sum of the deferred losses since the last call; resets it
  // The same as forward_deferred, returning this batch's mean loss over its positions with a target
  // (0 without targets or with none); no deferred losses may be pending.
  float forward(const int32_t* inputs, const int32_t* targets, int B, int T, float grad_scale,
                const int32_t* positions = nullptr);
  // Accumulates gradients of the last forward (which must have had grad_scale != 0) into the
  // provider's gradient buffers.
  virtual void backward() = 0;
  // Full-vocabulary logits of position (b, t) of the last forward, on the host (gathered across
  // the tensor-parallel group). Collective when tensor-parallel.
  virtual void logits_row(int b, int t, float* out_host) const = 0;

 protected:
  virtual int deferred_losses() const = 0;  // forwards whose loss is pending
};

}  // namespace zt
