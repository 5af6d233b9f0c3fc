// State placement under ZeRO over the data-parallel group: where parameters, gradients and AdamW
// moments live (today: the backend's memory; the offload issue adds pinned host memory and NVMe
// here), the gathers and gradient reductions a pass needs, and this rank's states as spans for the
// optimizer (engine/optim/) and as pieces in global coordinates (checkpoints).
//
// The flat parameter layout is cut into units (engine/parallel/shard_layout.h): chunks of at most
// [parallel] bucket_mb of each parameter group, cut into P shards (P = D for stages 1-3, or with
// hybrid sharding the S = D / R ranks of a replica; 1 for stage 0); rank r owns shard r of every
// unit. Per stage:
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
// Offload ([offload], ZeRO-Infinity): the optimizer's states live in one state tier
// (engine/offload/state_tier.h: device, pinned host or NVMe), which holds and moves them; the
// store decides their shapes. Offloaded, the device holds a compute-precision copy of the
// parameters (fp32 too when the compute is fp32), refreshed by an upload after each step, and a
// group's reduced gradient goes to the host as soon as its reduction completes (stages 2-3).
// params = "cpu" / "nvme" (stage 3) keeps the compute-precision shards in the tier too; a group's
// shards are uploaded into the gather buffer when the group is gathered (prefetch groups ahead).
// FP8 gather (stage 3, [precision] fp8 with fp8_all_gather, as torchao's float8 all-gather for
// FSDP2): the model's FP8 weights are units of their own, and after every write of the parameters
// each rank casts its shards of them to E4M3 bytes with the whole weight's scale (the amax
// all-reduced over the shards). A pass whose FP8 products take FP8 weights gathers those bytes
// instead of the compute type: half the traffic, and the copy fp8_weight_copy would make of the
// gathered weight, bit for bit (one cast per update, not one per product). The copy lies in the
// weight's place in the gathered group (its scales, then its bytes: fp8_recipe::weight_copy_bytes
// fits in the weight's compute-type bytes). A weight qualifies when it starts and ends on a unit
// boundary (multiples of 4 P elements, the bytes' 32-bit words) and its place is 16-byte aligned
// (cuBLASLt's FP8 operands); the others are gathered as before. Not with parameter offload.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/comm/topology.h"
#include "engine/model/model.h"
#include "engine/model/model_states.h"
#include "engine/offload/offload_clock.h"
#include "engine/offload/state_tier.h"
#include "engine/config/zero_placement.h"
#include "engine/parallel/shard_layout.h"
#include "engine/parallel/state_span.h"

namespace zt {

class ParamStore final : public ParamProvider, public ModelStates {
 public:
  // The parameters of `table` (a model's, or its low-rank adapters'), configured from the
  // placement alone (a RunSpec converts to its placement). `frozen` (LoRA's base): parameters
  // only, in the compute precision (fp32 ones when the compute is fp32), sharded at stage 3 and
  // whole on every rank otherwise; no gradient (grads() is null), no optimizer state, no spans;
  // no offload. Its masters, written and read (imports, views), are the compute copy's values.
  // fp8_weights: the weights the model's FP8 products read (Model::fp8_weights), for the FP8 gather.
  ParamStore(const ParamTable& table, Backend& be, const Topology& topo, const ZeroPlacement& placement,
             bool frozen = false, const std::vector<Fp8WeightRange>& fp8_weights = {});
  ~ParamStore() override;
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  void init(uint64_t seed);  // parameters from the model's layout-independent initializer
  void zero_grad();
  // Tells the store whether the coming backward is the last micro-batch of the step (stages 0-1
  // reduce only then).
  void set_last_micro_batch(bool last) { last_micro_ = last; }
  void finish_backward();                  // every gradient reduction of the step complete
  // The backend that holds the spans' states and runs the optimizer on them: the device backend,
  // or, with optimizer offload, a CPU backend over pinned host memory.
  Backend& optimizer_backend() { return tier_->backend(); }
  bool offloads_optimizer() const { return tier_->offloaded(); }
  // The optimizer step `t` over this rank's states (after clipping; engine/optim/optimizer_step.h
  // calls it with AdamW): `step` on the spans as they are, or, with the NVMe tier, block by block
  // through the pinned buffers (spans over the block's buffers). `done`: units already stepped
  // (the early update's, one flag per span), not stepped again.
  void step_states(int t, const SpanStep& step, const std::vector<char>* done = nullptr);
  // Optimizer offload to CPU memory at ZeRO 2-3: each group's reduced gradient of the step's last
  // micro-batch reaches the host while backward goes on. Then `f` (null: nobody) is called, on this
  // thread, with the group's units (span indices) as soon as their gradients are final there and
  // the uploads that read the pinned compute copy are done: the early host AdamW
  // (engine/optim/early_update.h) steps them on a thread of its own.
  bool gradients_final_during_backward() const { return tier_->offloaded() && !tier_->streams() && stage_ >= 2; }
  using UnitsFinal = std::function<void(const std::vector<int>& units)>;
  void on_units_final(UnitsFinal f) { units_final_ = std::move(f); }
  // With the NVMe tier: start reading the optimizer's first blocks of states (as many as there
  // are stream sets) so that the step finds them in memory; the trainer calls it as the step's
  // last micro-batch begins. No-op otherwise.
  void prefetch_optimizer_states() { tier_->prefetch(); }
  // Bytes of model states per tier, for the memory line: [tag] for Params, Grads, OptimStates.
  using TierBytes = StateTier::Bytes;
  TierBytes tier_bytes() const { return tier_->bytes(); }
  // The clock of this rank's host's blocked time in offload transfers and I/O (gradients to the
  // host, parameters to the device, NVMe reads and writes waited for): the step breakdown's
  // "offload", taken out of the phase it happened in, like exposed communication.
  OffloadClock& offload_clock() { return clock_; }
  // The NVMe file (null without the nvme tier), for its start-up warning.
  const NvmeFile* nvme() const { return tier_->nvme_file(); }

  // This rank's states for the optimizer: one span per unit (its shard; the whole unit at stage 0);
  // none when frozen.
  const std::vector<StateSpan>& spans() const { return frozen_ ? no_spans_ : spans_; }
  bool frozen() const { return frozen_; }
  // The ranks whose spans together hold every gradient once (with replicas, the first one's spans
  // count): the tensor-parallel group at stage 0
  // (data-parallel ranks hold copies), the world at stages 1-3.
  Comm& norm_group() const;
  // After the optimizer wrote the masters (and compute copy) of this rank's spans: with optimizer
  // offload, the compute copy is uploaded; stages 1-2 all-gather the updated parameters so every
  // rank holds them whole again. Collective.
  void publish_params();

  // ModelStates: this rank's states in global coordinates (checkpoints, imports, debugging)
  const std::vector<GlobalRun>& global_runs() const override { return runs_; }
  using ModelStates::read_run;
  using ModelStates::write_run;
  void read_run(State s, const GlobalRun& r, size_t off, size_t n, float* host) const override;
  void write_run(State s, const GlobalRun& r, size_t off, size_t n, const float* host) override;
  const float* run_data(State s, const GlobalRun& r) const override { return in_file(s) ? nullptr : state_ptr(s, r); }
  void publish_written_masters() override;
  std::vector<float> full_params() override;
  std::vector<float> full_grads() override;
  std::vector<float> full_compute_params() override;

  // ParamProvider
  void begin_pass(const std::vector<int>& order) override;
  void* params(int group) override;
  void release_params(int group) override;
  float* grads(int group) override;
  void grads_done(int group) override;
  int64_t resident_params_version() const override { return stage_ <= 2 ? params_version_ : -1; }
  void set_fp8_products(bool on) override { fp8_products_ = on; }
  const void* gathered_fp8_copy(const void* w) const override;
  // The FP8 gather's weights (none without it), for the start-up log
  size_t fp8_gathered_weights() const { return fp8_.size(); }

 private:
  using Unit = ShardUnit;
  struct Pending {
    std::vector<Comm::Handle> handles;
    int group = -1;
    float* recv = nullptr;  // stages 2-3: reduced shard of this group's units, to add
    bool last = false;      // of the step's last micro-batch: the group's gradient is final
  };
  UnitsFinal units_final_;  // the early update's, while one is scheduled
  size_t my_begin(const Unit& u) const { return layout_.my_begin(u); }  // unit-local
  size_t my_len(const Unit& u) const { return layout_.my_len(u); }      // valid elements of my shard
  float* shard_params(const Unit& u);
  void* compute_copy(const Unit& u);  // the compute-precision twin of shard_params(u); null in fp32
  void* cbyte(void* base, size_t elems) const { return static_cast<char*>(base) + elems * esize_; }
  void gather_compute_copy();         // stages 1-2, mixed: every rank's part of the compute copy
  // fp32 masters exist only as this rank's shards: stage 3, and stages 1-2 in mixed precision
  // (the model reads the compute copy, so full fp32 parameters are not needed).
  bool sharded_masters() const { return stage_ == 3 || (mixed_ && stage_ >= 1); }
  // Upload of the compute copy AdamW wrote on the host (tier_->compute()) to the device copy.
  void upload_compute_copy();
  // The tier streams masters and moments (NVMe): states other than the gradient are in its file.
  bool in_file(State s) const { return tier_->streams() && s != State::Grad; }
  // `p` (n floats) itself, or a device copy of it when it lives on the host (*owned: free it).
  const float* device_copy(const float* p, size_t n, float** owned);
  float* shard_grads(const Unit& u);
  void gather_group(int group);  // stage 3: launch the all-gather of a group's shards
  void complete(Pending& p);
  void reduce_across_replicas(float* shard, size_t n, bool wait_now);
  std::vector<float> to_global(const std::vector<float>& local);
  // The full tensors from `full` (a padded full-layout buffer) or, when it is null, from every
  // rank's fp32 `shards` (collective), in the unsharded model's layout.
  std::vector<float> full_view(const float* full, const float* shards, bool full_on_host = false);
  // recv (size * elems) <- every rank's send (elems), in the compute dtype.
  Comm::Handle all_gather_compute(const void* send, void* recv, size_t elems);  // gathers tensor-parallel slices
  void complete_all();
  void build_spans();
  float* state_ptr(State s, const GlobalRun& r) const;

  const ParamTable& table_;
  const bool frozen_;
  const std::vector<StateSpan> no_spans_;
  // A frozen store in 16-bit: host fp32 values into the compute copy at dst.
  void write_compute(void* dst, const float* host, size_t n);
  Backend& be_;
  const Topology& topo_;
  Comm& zero_;         // what ZeRO shards over: the data-parallel group, or one replica of it
  int stage_, prefetch_;
  DType ct_;            // the backend's compute dtype
  size_t esize_;        // its element size
  bool mixed_;          // ct_ != F32 or offload: a compute-precision copy of the parameters exists
  bool offload_params_ = false;  // stage 3: compute shards in the tier (pinned host or NVMe)
  size_t flat_n_ = 0;   // elements of each state array (masters, moments)
  std::vector<size_t> span_flat_;  // each span's first element in the flat state arrays
  // The FP8 gather's weights, and the layout's cuts at their ends (fp8_gather_cuts)
  std::vector<Fp8WeightRange> fp8_;
  std::vector<std::vector<size_t>> fp8_cuts_;
  ShardLayout layout_;
  const std::vector<Unit>& units_;  // layout_.units()
  // Per unit: the FP8 weight it lies in (an index of fp8_, -1: none) and its first byte in
  // fp8_shards_; this rank's E4M3 shards, each weight's amax and its scale and inverse
  // (fp8_recipe's), on the device.
  std::vector<int> unit_fp8_;
  std::vector<std::vector<int>> group_fp8_;  // per group: its FP8 weights (indices of fp8_)
  std::vector<size_t> unit_fp8_off_;
  uint8_t* fp8_shards_ = nullptr;
  float* fp8_amax_ = nullptr;
  float* fp8_scales_ = nullptr;
  bool fp8_products_ = true;  // set_fp8_products
  // whether group g is gathered with its FP8 weights as FP8 bytes now
  bool fp8_gather(int g) const { return fp8_products_ && !group_fp8_[size_t(g)].empty(); }
  void cast_fp8_shards();  // after every write of the parameters
  void index_fp8_units();  // the constructor's: unit_fp8_, unit_fp8_off_, group_fp8_ and the shards
  static std::vector<Fp8WeightRange> fp8_gathered_weights(const std::vector<Fp8WeightRange>& ws,
                                                          const ZeroPlacement& place, size_t parts, size_t esize);
  static std::vector<std::vector<size_t>> fp8_gather_cuts(const std::vector<Fp8WeightRange>& ws, const ParamTable& t);
  void* fp8_weight_place(void* buf, int k) const { return cbyte(buf, fp8_[size_t(k)].rel); }  // in its group
  OffloadClock clock_;              // before tier_: the tier counts its waits on it
  std::unique_ptr<StateTier> tier_;  // where masters and moments live (and offloaded, grads too)
  std::vector<StateSpan> spans_;
  std::vector<GlobalRun> runs_;
  std::vector<float> reduced_;     // optimizer offload: a reduced gradient unit on its way to the host
  // Views of the tier's masters array (one of them, as sharded_masters() says; null on NVMe) and
  // ZeRO's own device arrays:
  float* full_params_ = nullptr;   // stage 0; stages 1-2 in fp32
  float* shard_params_ = nullptr;  // sharded_masters()
  void* full_compute_ = nullptr;   // stages 0-2, mixed (stages 1-2: this rank's part written here)
  void* shard_compute_ = nullptr;  // stage 3, mixed, not offloaded
  float* full_grads_ = nullptr;    // stages 0-1
  float* grad_shard_ = nullptr;    // stages 1-3 (on the device)
  bool last_micro_ = true;
  // resident_params_version: a new one on every write of the parameters, from a count shared by
  // every store (a store made where a freed one was never repeats that one's numbers)
  int64_t params_version_ = 0;
  void new_params_version();
  std::vector<Pending> pending_;
  std::vector<Comm::Handle> across_replicas_;  // hybrid sharding's all-reduces, waited by finish_backward
  bool closing_ = false;  // the destructor: no new collectives
  struct Gathered {
    void* buf = nullptr;      // compute precision (the FP8 gather: FP8 weights' copies in their places)
    bool fp8 = false;         // gathered with the FP8 gather
    void* staging = nullptr;  // params offload: this rank's shards, uploaded for the gather
    std::vector<Comm::Handle> handles;
  };
  uint64_t last_upload_ = 0;  // the latest upload_pinned_async from pinned states (wait_upload)
  size_t group_shard_len(int g) const;    // this rank's shard of a group, in elements
  size_t group_shard_off(int g) const;    // its first element in the flat shard
  size_t group_shard_bytes(int g) const;  // this rank's compute shards of a group
  uint64_t group_shard_begin(int g) const;  // their first byte in the flat compute shards
  void read_ahead(int g);                 // params on NVMe: start reading a group's shards
  void drop_gathered(std::map<int, Gathered>::iterator it);  // waits for what is in flight, frees
  std::map<int, Gathered> gathered_;  // stage 3: groups with full parameters present
  std::map<int, float*> grad_tmp_;    // stages 2-3: groups with a gradient buffer open
  std::vector<int> order_;
  size_t order_pos_ = 0;
};

}  // namespace zt
