// The pinned host tier ([offload] optimizer = "cpu"; the NVMe tier builds on it): see state_tier.h.
#pragma once
#include "engine/offload/state_tier.h"

namespace zt {

class PinnedTier : public StateTier {
 public:
  // `states_in_memory`: masters and moments pinned too (the NVMe tier streams them instead).
  PinnedTier(Backend& device, const ZeroPlacement& place, const TierShape& shape, bool states_in_memory);
  Backend& backend() override { return *host_; }
  bool offloaded() const override { return true; }
  Bytes bytes() const override;

 protected:
  std::unique_ptr<Backend> host_;  // the CPU backend AdamW runs on
  size_t flat_;
  size_t esize_;  // the compute dtype's element size
};

}  // namespace zt
