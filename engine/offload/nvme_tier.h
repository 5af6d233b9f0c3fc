// The NVMe tier ([offload] optimizer = "nvme", ZeRO-Infinity): see state_tier.h and nvme_tier.cpp.
#pragma once
#include <memory>

#include "engine/offload/state_tier.h"

namespace zt {

// With `place.count_only` (the planner) the tier that counts its pinned buffers and its blocks'
// work and has no files.
std::unique_ptr<StateTier> make_nvme_tier(Backend& device, const ZeroPlacement& place, const TierShape& shape,
                                          OffloadClock& clock);

}  // namespace zt
