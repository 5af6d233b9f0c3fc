// Model states under ZeRO over the data-parallel group: where parameters, gradients and AdamW
// moments live, how gradients are reduced, and the optimizer step on this rank's part.
//
// The flat parameter layout is cut into units: each parameter group (embeddings, each block,
// ln_f) split into chunks of at most [parallel] bucket_mb, each padded to a multiple of the
// partition count P (P = D for stages 1-3, 1 for stage 0) and cut into P equal shards; rank r owns
// shard r of every unit. Per stage:
//   0: full params, grads, moments on every rank; grads all-reduced per unit as backward finishes.
//   1: full params and grads; moments sharded; grads reduce-scattered after the last micro-batch;
//      after the update, params all-gathered.
//   2: as 1, but gradients live only as shards: each group's gradient is a temporary buffer,
//      reduce-scattered and added to the shard as soon as the group's backward is done.
//   3: as 2, and parameters live only as shards: a group is all-gathered just before it runs (the
//      next `prefetch` groups of the pass ahead of time) and freed after.
// Mixed precision (backend compute dtype bf16/fp16): parameters, gradients and moments above are
// fp32 masters; the model reads a compute-precision copy that AdamW writes in the same pass. At
// stages 1-2 the fp32 masters are then sharded too (as DeepSpeed's) and the updated compute
// copy is all-gathered; at stage 3 the compute copy is sharded and gathered per group. Either
// way parameters travel in compute precision (half the bytes of fp32).
// Units are then padded to a multiple of 2P so every 16-bit shard is a whole number of 32-bit
// words for the (type-blind) all-gather.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/config/spec.h"
#include "engine/comm/topology.h"
#include "engine/model/model.h"

namespace zt {

class ParamStore final : public ParamProvider {
 public:
  ParamStore(const Model& model, Backend& be, const Topology& topo, const RunSpec& spec);
  ~ParamStore() override;
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  void init(uint64_t seed);  // parameters from the model's layout-independent initializer
  void zero_grad();
  // Tells the store whether the coming backward is the last micro-batch of the step (stages 0-1
  // reduce only then).
  void set_last_micro_batch(bool last) { last_micro_ = last; }
  void finish_backward();                  // every gradient reduction of the step complete
  // Global L2 norm of the true gradients (the stored ones divided by loss_scale) before clipping
  // (torch's rule); unscales and clips them in one pass. A non-finite norm (fp16 overflow) leaves
  // the gradients as they are and is returned for the caller to skip the step.
  double clip_grad_norm(double max_norm, double loss_scale = 1.0);
  void step(double lr, int t);             // AdamW on this rank's part, then re-gather (1-2)

  // The full parameters / reduced gradients in the unsharded model's flat layout (global offsets
  // and shapes of Model::params()), as host vectors. Collective when the states are sharded
  // (ZeRO or tensor parallelism): every rank must call it.
  std::vector<float> full_params();
  std::vector<float> full_grads();

  // ParamProvider
  void begin_pass(const std::vector<int>& order) override;
  void* params(int group) override;
  void release_params(int group) override;
  float* grads(int group) override;
  void grads_done(int group) override;

 private:
  struct Unit {
    int group;
    size_t begin, len;  // group-local elements [begin, begin + len)
    size_t padded;      // len rounded up to a multiple of parts_
    size_t shard;       // padded / parts_
    size_t full_off;    // offset in the padded full layout
    size_t shard_off;   // offset in the shard arrays
  };
  struct Pending {
    std::vector<Comm::Handle> handles;
    int group = -1;
    float* recv = nullptr;  // stages 2-3: reduced shard of this group's units, to add
  };
  size_t my_begin(const Unit& u) const { return size_t(my_part_) * u.shard; }  // unit-local
  size_t my_len(const Unit& u) const;  // valid (unpadded) elements of my shard
  float* shard_params(const Unit& u);
  void* compute_copy(const Unit& u);  // the compute-precision twin of shard_params(u); null in fp32
  void* cbyte(void* base, size_t elems) const { return static_cast<char*>(base) + elems * esize_; }
  void gather_compute_copy();         // stages 1-2, mixed: every rank's part of the compute copy
  // fp32 masters exist only as this rank's shards: stage 3, and stages 1-2 in mixed precision
  // (the model reads the compute copy, so full fp32 parameters are not needed).
  bool sharded_masters() const { return stage_ == 3 || (mixed_ && stage_ >= 1); }
  float* shard_grads(const Unit& u);
  void gather_group(int group);  // stage 3: launch the all-gather of a group's shards
  void complete(Pending& p);
  std::vector<float> to_global(const std::vector<float>& local);
  // The full tensors from `full` (a padded full-layout buffer) or, when it is null, from every
  // rank's fp32 `shards` (collective), in the unsharded model's layout.
  std::vector<float> full_view(const float* full, const float* shards);
  // recv (size * elems) <- every rank's send (elems), in the compute dtype.
  Comm::Handle all_gather_compute(const void* send, void* recv, size_t elems);  // gathers tensor-parallel slices
  void complete_all();
  template <typename Fn>
  void for_each_tensor_piece(const Unit& u, Fn fn) const;

  const Model& model_;
  Backend& be_;
  const Topology& topo_;
  Comm& dp_;
  RunSpec::Optim optim_;
  int stage_, parts_, my_part_, prefetch_;
  std::vector<Unit> units_;
  std::vector<std::vector<int>> group_units_;
  std::vector<size_t> group_full_off_, group_padded_;
  size_t total_full_ = 0, total_shard_ = 0;
  DType ct_;            // the backend's compute dtype
  size_t esize_;        // its element size
  bool mixed_;          // ct_ != F32: a compute-precision copy of the parameters exists
  float* full_params_ = nullptr;   // stage 0; stages 1-2 in fp32
  void* full_compute_ = nullptr;   // stages 0-2, mixed (stages 1-2: this rank's part written here)
  void* shard_compute_ = nullptr;  // stage 3, mixed
  float* shard_params_ = nullptr;  // sharded_masters()
  float* full_grads_ = nullptr;    // stages 0-1
  float* grad_shard_ = nullptr;    // stages 1-3
  float* m_ = nullptr;
  float* v_ = nullptr;
  double* norm_acc_ = nullptr;  // (1) device: the squared gradient norm being summed
  bool last_micro_ = true;
  std::vector<Pending> pending_;
  struct Gathered {
    void* buf = nullptr;  // compute precision
    std::vector<Comm::Handle> handles;
  };
  std::map<int, Gathered> gathered_;  // stage 3: groups with full parameters present
  std::map<int, float*> grad_tmp_;    // stages 2-3: groups with a gradient buffer open
  std::vector<int> order_;
  size_t order_pos_ = 0;
};

}  // namespace zt
