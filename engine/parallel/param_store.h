// State placement under ZeRO over the data-parallel group: where parameters, gradients and AdamW
// moments live (today: the backend's memory; the offload issue adds pinned host memory and NVMe
// here), the gathers and gradient reductions a pass needs, and this rank's states as spans for the
// optimizer (engine/optim/) and as pieces in global coordinates (checkpoints).
//
// The flat parameter layout is cut into units (engine/parallel/shard_layout.h): chunks of at most
// [parallel] bucket_mb of each parameter group, cut into P shards (P = D for stages 1-3, 1 for
// stage 0); rank r owns shard r of every unit. Per stage:
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
// Offload ([offload], ZeRO-Infinity): optimizer = "cpu" keeps the fp32 masters, the AdamW moments
// and the optimizer's gradient shard in pinned host memory, and AdamW runs on the CPU (a CPU
// backend over those arrays: the same kernel as the CPU backend's, so results are bit-identical
// to on-device training there). The device then holds a compute-precision copy of the parameters
// (fp32 too when the compute is fp32), refreshed by an upload after each step. A group's reduced
// gradient goes to the host as soon as its reduction completes (stages 2-3). params = "cpu"
// (stage 3) keeps the compute-precision shards in pinned host memory too; a group's shards are
// uploaded into the gather buffer when the group is gathered (prefetch groups ahead).
// optimizer = "nvme" keeps the masters and moments in one file per rank under nvme_path
// (engine/offload/nvme_file.h) instead: the step streams them through io_depth pinned buffers
// of buffer_mb, reading ahead and writing behind while the CPU updates the block in between.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/serial_worker.h"
#include "engine/comm/topology.h"
#include "engine/model/model.h"
#include "engine/offload/async_io.h"
#include "engine/offload/nvme_file.h"
#include "engine/parallel/placement.h"
#include "engine/parallel/shard_layout.h"
#include "engine/parallel/state_span.h"

namespace zt {

class ParamStore final : public ParamProvider {
 public:
  // Configured from the placement alone (a RunSpec converts to its placement).
  ParamStore(const Model& model, Backend& be, const Topology& topo, const ZeroPlacement& placement);
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
  Backend& optimizer_backend() { return host_ ? *host_ : be_; }
  bool offloads_optimizer() const { return host_ != nullptr; }
  // The optimizer step `t` over this rank's states (after clipping; engine/optim/optimizer_step.h
  // calls it with AdamW): `step` on the spans as they are, or, with the NVMe tier, block by block
  // through the pinned buffers (spans over the block's buffers). Spans the early update already
  // stepped are waited for, not stepped again.
  void step_states(int t, const SpanStep& step);
  // Optimizer offload to CPU memory at ZeRO 2-3: step `t`'s update of each group runs on a
  // background thread as soon as its gradient of the step's last micro-batch is on the host,
  // while backward goes on. Exact only when nothing global touches the gradients between backward
  // and the step (no clipping, no loss scaling): the trainer asks for it then, before the step's
  // last micro-batch. False where it does not apply.
  bool schedule_early_update(int t, SpanStep step);
  // With the NVMe tier: start reading the optimizer's first blocks of states (as many as there
  // are stream sets) so that the step finds them in memory; the trainer calls it as the step's
  // last micro-batch begins. No-op otherwise.
  void prefetch_optimizer_states();
  // Drops a scheduled early update and waits for its queued work (a step that failed midway;
  // before the optimizer goes). Never throws.
  void cancel_early_update() noexcept;
  // Bytes of model states per tier, for the memory line: [tag] for Params, Grads, OptimStates.
  struct TierBytes {
    double pinned[3] = {}, nvme[3] = {};
  };
  TierBytes tier_bytes() const;
  // Milliseconds this rank's host has been blocked in offload transfers and I/O so far (gradients
  // to the host, parameters to the device, NVMe reads and writes waited for): the step
  // breakdown's "offload", taken out of the phase it happened in, like exposed communication.
  double offload_waited_ms() const { return offload_waited_ms_; }
  // Called after each such wait with what it was, when it began and how long (the timeline trace).
  using WaitObserver = std::function<void(const char* what, std::chrono::steady_clock::time_point start, double ms)>;
  void set_offload_observer(WaitObserver f) { offload_observer_ = std::move(f); }
  // The NVMe file (null without the nvme tier), for its start-up warning.
  const NvmeFile* nvme() const { return nvme_.get(); }

  // This rank's states for the optimizer: one span per unit (its shard; the whole unit at stage 0).
  const std::vector<StateSpan>& spans() const { return spans_; }
  // The ranks whose spans together hold every gradient once: the tensor-parallel group at stage 0
  // (data-parallel ranks hold copies), the world at stages 1-3.
  Comm& norm_group() const;
  // After the optimizer wrote the masters (and compute copy) of this rank's spans: with optimizer
  // offload, the compute copy is uploaded; stages 1-2 all-gather the updated parameters so every
  // rank holds them whole again. Collective.
  void publish_params();

  // This rank's states in global coordinates, for checkpoints: each run is `n` consecutive
  // elements of a tensor's full (unsharded, row-major) layout, starting at `global_begin`, held
  // contiguously in span `span` from `span_off`. `owner`: this rank is the one that writes the run
  // (data-parallel copies at stage 0 and tensors replicated across the tensor-parallel group are
  // held by several ranks; each run has exactly one owner in the job).
  struct GlobalRun {
    int param;  // index into Model::params()
    size_t global_begin, n;
    int span;
    size_t span_off;
    bool owner;
  };
  const std::vector<GlobalRun>& global_runs() const { return runs_; }
  enum class State { Master, Grad, AdamM, AdamV };
  // Host copies of a run's elements of one state, and back. After writing masters, call
  // publish_written_masters() (collective) to refresh the compute copy and the other ranks' views.
  void read_run(State s, const GlobalRun& r, float* host) const { read_run(s, r, 0, r.n, host); }
  void write_run(State s, const GlobalRun& r, const float* host) { write_run(s, r, 0, r.n, host); }
  // Elements [off, off + n) of the run only.
  void read_run(State s, const GlobalRun& r, size_t off, size_t n, float* host) const;
  // The run's elements in the backend's memory (host memory on the CPU backend: checkpoint writes
  // read them in place there instead of copying); null for states in the NVMe tier.
  const float* run_data(State s, const GlobalRun& r) const { return in_nvme(s) ? nullptr : state_ptr(s, r); }
  void write_run(State s, const GlobalRun& r, size_t off, size_t n, const float* host);
  void publish_written_masters();

  // The full parameters / reduced gradients in the unsharded model's flat layout (global offsets
  // and shapes of Model::params()), as host vectors. Collective when the states are sharded
  // (ZeRO or tensor parallelism): every rank must call it.
  std::vector<float> full_params();
  std::vector<float> full_grads();
  // The compute-precision copy the model reads (bf16/fp16 values widened to fp32), same layout;
  // empty in fp32. Collective like full_params().
  std::vector<float> full_compute_params();

  // ParamProvider
  void begin_pass(const std::vector<int>& order) override;
  void* params(int group) override;
  void release_params(int group) override;
  float* grads(int group) override;
  void grads_done(int group) override;

 private:
  using Unit = ShardUnit;
  struct Pending {
    std::vector<Comm::Handle> handles;
    int group = -1;
    float* recv = nullptr;  // stages 2-3: reduced shard of this group's units, to add
    bool last = false;      // of the step's last micro-batch: the group's gradient is final
  };
  struct EarlyUpdate {
    SpanStep step;  // empty: none scheduled
    int t = 0;
    std::vector<char> stepped;  // per unit
  };
  EarlyUpdate early_;
  std::unique_ptr<SerialWorker> worker_;  // the early update's thread
  size_t my_begin(const Unit& u) const { return layout_.my_begin(u); }  // unit-local
  size_t my_len(const Unit& u) const { return layout_.my_len(u); }      // valid elements of my shard
  float* shard_params(const Unit& u);
  void* compute_copy(const Unit& u);  // the compute-precision twin of shard_params(u); null in fp32
  void* cbyte(void* base, size_t elems) const { return static_cast<char*>(base) + elems * esize_; }
  void gather_compute_copy();         // stages 1-2, mixed: every rank's part of the compute copy
  // fp32 masters exist only as this rank's shards: stage 3, and stages 1-2 in mixed precision
  // (the model reads the compute copy, so full fp32 parameters are not needed).
  bool sharded_masters() const { return stage_ == 3 || (mixed_ && stage_ >= 1); }
  // Offloaded optimizer states: the host arrays of a span's masters / grads, and the upload of
  // the compute copy AdamW wrote on the host (host_compute_) to the device copy.
  void upload_compute_copy();
  // Host pointer for `p` when p lives in pinned host memory (memcpy, not a device copy).
  bool on_host(const void* p) const;
  bool in_nvme(State s) const { return nvme_ && s != State::Grad; }
  void alloc_stream_sets();  // stream_nvme's pinned block sets, once
  static size_t nvme_block_bytes(size_t bytes);  // rounded up to whole O_DIRECT blocks
  void drop_optimizer_prefetch();                // waits for prefetch_optimizer_states's reads, forgets them
  std::unique_ptr<AsyncIo> prefetch_io_;
  std::vector<std::vector<AsyncIo::Ticket>> early_reads_;  // per block from 0: masters, m, v
  uint64_t nvme_offset(State s, size_t flat) const;  // byte offset of flat element `flat` of a state
  // Streams the NVMe tier's masters (and moments) block by block: fn(flat_begin, n, master, m, v,
  // compute) on pinned buffers; `write_back`: the blocks are written back after fn; with
  // parameters on NVMe, `compute` is the block's compute shard buffer, written to their file.
  template <typename Fn>
  void stream_nvme(bool moments, bool write_back, Fn fn);
  // `p` (n floats) itself, or a device copy of it when it lives on the host (*owned: free it).
  const float* device_copy(const float* p, size_t n, float** owned);
  float* shard_grads(const Unit& u);
  void gather_group(int group);  // stage 3: launch the all-gather of a group's shards
  void complete(Pending& p);
  std::vector<float> to_global(const std::vector<float>& local);
  // The full tensors from `full` (a padded full-layout buffer) or, when it is null, from every
  // rank's fp32 `shards` (collective), in the unsharded model's layout.
  std::vector<float> full_view(const float* full, const float* shards, bool full_on_host = false);
  // recv (size * elems) <- every rank's send (elems), in the compute dtype.
  Comm::Handle all_gather_compute(const void* send, void* recv, size_t elems);  // gathers tensor-parallel slices
  void complete_all();
  void build_spans();
  float* state_ptr(State s, const GlobalRun& r) const;

  const Model& model_;
  Backend& be_;
  const Topology& topo_;
  Comm& dp_;
  int stage_, prefetch_;
  DType ct_;            // the backend's compute dtype
  size_t esize_;        // its element size
  bool mixed_;          // ct_ != F32 or offload: a compute-precision copy of the parameters exists
  std::unique_ptr<Backend> host_;  // optimizer offload: the CPU backend AdamW runs on
  bool offload_params_ = false;    // stage 3: compute shards in pinned host memory
  float* host_grad_ = nullptr;     // optimizer offload: the spans' gradients (pinned host)
  void* host_compute_ = nullptr;   // optimizer offload: the compute copy AdamW writes (pinned host)
  std::unique_ptr<NvmeFile> nvme_; // optimizer = "nvme": masters and moments in this file
  bool nvme_tier_ = false;         // optimizer = "nvme" (the planner has the tier but no file)
  bool params_nvme_ = false;       // params = "nvme": ZeRO-3's compute shards in nvme_params_
  std::unique_ptr<NvmeFile> nvme_params_;
  struct StreamSet {  // the NVMe tier's pinned block buffers, aligned for O_DIRECT inside raw
    float* buf[4] = {};  // masters, m, v, and the compute shard (params on NVMe)
    void* raw[4] = {};
  };
  std::vector<StreamSet> stream_sets_;
  std::vector<float> reduced_;     // optimizer offload: a reduced gradient unit on its way to the host
  size_t flat_n_ = 0;              // elements of each state array (masters, moments)
  size_t chunk_ = 0;               // nvme: elements per I/O block
  int io_depth_ = 1;
  std::vector<size_t> span_flat_;  // each span's first element in the flat state arrays
  ShardLayout layout_;
  const std::vector<Unit>& units_;  // layout_.units()
  std::vector<StateSpan> spans_;
  std::vector<GlobalRun> runs_;
  float* full_params_ = nullptr;   // stage 0; stages 1-2 in fp32
  void* full_compute_ = nullptr;   // stages 0-2, mixed (stages 1-2: this rank's part written here)
  void* shard_compute_ = nullptr;  // stage 3, mixed
  float* shard_params_ = nullptr;  // sharded_masters()
  float* full_grads_ = nullptr;    // stages 0-1
  float* grad_shard_ = nullptr;    // stages 1-3
  float* m_ = nullptr;
  float* v_ = nullptr;
  bool last_micro_ = true;
  std::vector<Pending> pending_;
  struct Gathered {
    void* buf = nullptr;      // compute precision; null while only read ahead
    void* staging = nullptr;  // params offload: this rank's shards, uploaded for the gather
    std::vector<Comm::Handle> handles;
    // params on NVMe: the read into ring buffer `ring`, the shards at `host` within it
    int ring = -1;
    bool reading = false;
    AsyncIo::Ticket read = 0;
    const void* host = nullptr;
  };
  struct RingBuffer {
    void* raw = nullptr;  // pinned
    void* buf = nullptr;  // aligned for O_DIRECT
    uint64_t upload = 0;  // the upload that last read it (Backend::wait_upload)
    int owner = -1;       // the group read into it last
  };
  std::vector<RingBuffer> param_ring_;  // params on NVMe: prefetch + 2 buffers of the largest group
  std::unique_ptr<AsyncIo> param_io_;
  uint64_t next_ring_ = 0;
  uint64_t last_upload_ = 0;  // the latest upload_pinned_async from pinned states (wait_upload)
  size_t group_shard_bytes(int g) const;  // this rank's compute shards of a group
  void read_ahead(int g);                 // params on NVMe: start reading a group's shards
  void drop_gathered(std::map<int, Gathered>::iterator it);  // waits for what is in flight, frees
  // Runs fn, counting its time as blocked in offload (offload_waited_ms).
  template <typename Fn>
  void offload_wait(const char* what, Fn&& fn);
  double offload_waited_ms_ = 0;
  WaitObserver offload_observer_;
  std::map<int, Gathered> gathered_;  // stage 3: groups with full parameters present
  std::map<int, float*> grad_tmp_;    // stages 2-3: groups with a gradient buffer open
  std::vector<int> order_;
  size_t order_pos_ = 0;
};

}  // namespace zt
