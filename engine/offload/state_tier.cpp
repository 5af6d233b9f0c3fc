// The device and pinned host tiers, and the factory (see state_tier.h; NVMe: nvme_tier.cpp).
#include "engine/offload/state_tier.h"

#include "engine/core/status.h"
#include "engine/offload/nvme_tier.h"
#include "engine/offload/pinned_tier.h"

namespace zt {

StateTier::~StateTier() {
  for (void* p : {(void*)masters_, (void*)m_, (void*)v_, (void*)grad_, compute_}) device_.free(p);
}

Backend& StateTier::owner(const void* p, Backend& device) {
  for (const auto& [base, bytes] : host_arrays_)
    if (p && p >= base && static_cast<const char*>(p) < static_cast<const char*>(base) + bytes) return backend();
  return device;
}

void StateTier::stream(bool, bool, const BlockFn&) { ZT_CHECK(false, "stream(): this tier holds its states in memory"); }

void StateTier::read(StateKind s, size_t flat, float* host, size_t n) {
  const float* base = s == StateKind::Master ? masters_ : s == StateKind::Grad ? grad_ : s == StateKind::AdamM ? m_ : v_;
  ZT_CHECK(base, "read(): the tier holds no such array");
  owner(base, device_).copy_to_host(host, base + flat, n * sizeof(float));
}

void StateTier::write(StateKind s, size_t flat, const float* host, size_t n) {
  float* base = s == StateKind::Master ? masters_ : s == StateKind::Grad ? grad_ : s == StateKind::AdamM ? m_ : v_;
  ZT_CHECK(base, "write(): the tier holds no such array");
  owner(base, device_).copy_to_device(base + flat, host, n * sizeof(float));  // host to host when pinned
}

const void* StateTier::compute_shards(std::vector<char>&) { return compute_; }

const void* StateTier::take(int, uint64_t begin, size_t) {
  return compute_ ? static_cast<const char*>(compute_) + begin : nullptr;
}

namespace {

// Masters and moments in the backend's memory, where AdamW runs.
class DeviceTier final : public StateTier {
 public:
  DeviceTier(Backend& device, const TierShape& shape) : StateTier(device) {
    masters_ = alloc_floats(shape.master_elems, MemTag::Params, MemKind::Device);
    m_ = alloc_floats(shape.flat, MemTag::OptimStates, MemKind::Device);
    v_ = alloc_floats(shape.flat, MemTag::OptimStates, MemKind::Device);
  }
  Backend& backend() override { return device_; }
};

}  // namespace

PinnedTier::PinnedTier(Backend& device, const ZeroPlacement& place, const TierShape& shape, bool states_in_memory)
    : StateTier(device), host_(device.make_host_backend(place.host_threads)), flat_(shape.flat), esize_(dtype_size(shape.compute)) {
  host_->set_compute_dtype(shape.compute);
  if (states_in_memory) {
    masters_ = alloc_floats(shape.master_elems, MemTag::Params, MemKind::PinnedHost);
    m_ = alloc_floats(shape.flat, MemTag::OptimStates, MemKind::PinnedHost);
    v_ = alloc_floats(shape.flat, MemTag::OptimStates, MemKind::PinnedHost);
  }
  grad_ = alloc_floats(shape.flat, MemTag::Grads, MemKind::PinnedHost);
  // with parameters on NVMe the step writes the compute shards to their file instead
  if (place.params != ZeroPlacement::Tier::Nvme)
    compute_ = device_.alloc(shape.flat * esize_, MemTag::Params, MemKind::PinnedHost);
  const size_t bytes = shape.flat * sizeof(float);
  host_arrays_ = {{masters_, shape.master_elems * sizeof(float)}, {m_, bytes}, {v_, bytes}, {grad_, bytes}};
}

StateTier::Bytes PinnedTier::bytes() const {
  Bytes t;
  const double n = double(flat_) * sizeof(float);
  t.pinned[0] = n;      // masters
  t.pinned[2] = 2 * n;  // AdamW moments
  t.pinned[1] = n;      // the optimizer's gradient shard
  t.pinned[0] += double(flat_) * double(esize_);  // the compute copy AdamW writes
  return t;
}

std::unique_ptr<StateTier> make_state_tier(Backend& device, const ZeroPlacement& place, const TierShape& shape,
                                           OffloadClock& clock) {
  switch (place.optimizer) {
    case ZeroPlacement::Tier::Device: return std::make_unique<DeviceTier>(device, shape);
    case ZeroPlacement::Tier::Pinned: return std::make_unique<PinnedTier>(device, place, shape, true);
    case ZeroPlacement::Tier::Nvme: return make_nvme_tier(device, place, shape, clock);
  }
  return nullptr;
}

}  // namespace zt
