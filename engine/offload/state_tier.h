// Where one rank's optimizer states live (ZeRO-Infinity's tiers), apart from how ZeRO shards them
// (engine/parallel/param_store.h decides the shapes, a tier holds and moves the bytes):
//   DeviceTier  the fp32 masters and AdamW moments in the backend's memory; AdamW runs there.
//   PinnedTier  ([offload] optimizer = "cpu") masters, moments, the optimizer's gradient and the
//               compute-precision copy AdamW writes, in pinned host memory; AdamW runs on a CPU
//               backend over them (the CPU backend's own kernel: results bit-identical to it).
//   NvmeTier    (optimizer = "nvme", engine/offload/nvme_tier.h) masters and moments in one file
//               per rank, streamed block by block through pinned buffers; gradient and compute
//               copy pinned as above. With params = "nvme", ZeRO-3's compute shards too.
// The planner (`ztrain plan`) builds the same tiers with `ZeroPlacement::count_only`: the NVMe
// tier then counts its buffers and blocks and touches no file.
//
// Every state array is indexed by `flat`, this rank's element of the ZeRO flat state layout (the
// shard layout at stages 1-3, the full layout at stage 0); `masters` may be the full layout on the
// device when the model reads the fp32 parameters themselves (TierShape::master_elems).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/offload/offload_clock.h"
#include "engine/model/model_states.h"  // StateKind
#include "engine/config/zero_placement.h"

namespace zt {

class NvmeFile;

// The arrays a tier holds, as the ZeRO layout sizes them.
struct TierShape {
  size_t flat = 0;           // elements of each state array (masters and moments)
  size_t master_elems = 0;   // elements of the masters array (flat, or the full layout on the device)
  DType compute = DType::F32;
  size_t largest_group_shard_bytes = 0;  // params on NVMe: the read-ahead buffers' size
  int rank = 0;              // names the NVMe files
};

class StateTier {
 public:
  // Bytes of model states off the device, [tag] for Params, Grads, OptimStates.
  struct Bytes {
    double pinned[3] = {}, nvme[3] = {};
  };
  // One block of the streamed states, as pinned buffers: fn(flat_begin, n, master, m, v, compute);
  // m and v are null when the moments are not streamed, compute is the block's compute shard
  // buffer with parameters on NVMe (else null).
  using BlockFn = std::function<void(size_t flat_begin, size_t n, float* master, float* m, float* v, void* compute)>;

  virtual ~StateTier();  // frees the arrays
  StateTier(const StateTier&) = delete;
  StateTier& operator=(const StateTier&) = delete;

  // The backend that holds the arrays and runs the optimizer on them.
  virtual Backend& backend() = 0;
  virtual bool offloaded() const { return false; }
  // The arrays in memory; null where the tier does not hold one (the NVMe tier streams masters and
  // moments; the device tier has no separate gradient or compute copy: ZeRO's are the ones).
  float* masters() const { return masters_; }
  float* m() const { return m_; }
  float* v() const { return v_; }
  float* grad() const { return grad_; }        // the optimizer's gradient shard (offloaded)
  void* compute() const { return compute_; }   // the compute copy AdamW writes (offloaded, not on NVMe)
  // The backend whose memory holds `p`: this tier's for its host arrays, else `device`.
  Backend& owner(const void* p, Backend& device);

  // True when masters and moments are streamed (stream()), not in memory.
  virtual bool streams() const { return false; }
  // Every block of the states in order (the NVMe tier only): read, fn, written back when
  // `write_back`; `moments`: m and v are streamed too.
  virtual void stream(bool moments, bool write_back, const BlockFn& fn);
  // The NVMe tier: start reading the first blocks for the coming stream(true, true).
  virtual void prefetch() {}
  // Elements [flat, flat + n) of a state, to and from host memory (checkpoints, init).
  virtual void read(StateKind s, size_t flat, float* host, size_t n);
  virtual void write(StateKind s, size_t flat, const float* host, size_t n);
  // The compute shards this rank's AdamW wrote (offloaded; `scratch` holds them when read from a
  // file), null on the device tier.
  virtual const void* compute_shards(std::vector<char>& scratch);
  virtual Bytes bytes() const { return {}; }
  // The NVMe file of masters and moments (null otherwise), for the start-up lines.
  virtual const NvmeFile* nvme_file() const { return nullptr; }

  // ZeRO-3 with params = "nvme": group `g`'s compute shards, bytes [begin, begin + bytes) of the
  // parameter file, read into a pinned read-ahead buffer. read_ahead starts the read (the pass's
  // next group but `prefetch`); take waits for it (reading now if it was not read ahead) and
  // returns the shards (null in the planner); uploaded records the upload that reads the buffer,
  // which must finish before the buffer is refilled. On the pinned tiers take() is the compute
  // copy at `begin` and the others are no-ops.
  virtual void read_ahead(int g, uint64_t begin, size_t bytes) { (void)g, (void)begin, (void)bytes; }
  virtual const void* take(int g, uint64_t begin, size_t bytes);
  virtual void uploaded(int g, uint64_t upload) { (void)g, (void)upload; }

 protected:
  explicit StateTier(Backend& device) : device_(device) {}
  float* alloc_floats(size_t n, MemTag tag, MemKind kind) {
    return static_cast<float*>(device_.alloc(n * sizeof(float), tag, kind));
  }
  Backend& device_;  // allocates and frees every array (pinned ones through it too)
  float* masters_ = nullptr;
  float* m_ = nullptr;
  float* v_ = nullptr;
  float* grad_ = nullptr;
  void* compute_ = nullptr;
  std::vector<std::pair<const void*, size_t>> host_arrays_;  // owner(): pointer and bytes
};

// The tier `place.optimizer` names, its arrays allocated on `device` (pinned through it) and its
// waits counted on `clock`.
std::unique_ptr<StateTier> make_state_tier(Backend& device, const ZeroPlacement& place, const TierShape& shape,
                                           OffloadClock& clock);

}  // namespace zt
