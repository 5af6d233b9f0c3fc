// ParamStore's FP8 gather at ZeRO-3 (see param_store.h): which weights qualify, the layout's cuts
// at their ends, their persistent E4M3 shards cast once per write of the parameters, and the
// copies the gathered groups hold.
#include <algorithm>

#include "engine/backend/fp8_recipe.h"
#include "engine/core/status.h"
#include "engine/parallel/param_store.h"

namespace zt {

// The FP8 gather's weights (param_store.h): at stage 3 with fp8_all_gather and the parameters on
// the device, those of `ws` that are whole units with units padded to 4 P (they start and end on
// multiples of it) at a 16-byte aligned place of the gathered group, whose compute-type bytes
// hold their copy.
std::vector<Fp8WeightRange> ParamStore::fp8_gathered_weights(const std::vector<Fp8WeightRange>& ws,
                                                             const ZeroPlacement& place, size_t parts, size_t esize) {
  std::vector<Fp8WeightRange> out;
  if (place.stage != 3 || !place.fp8_all_gather || place.offloads_compute_shards()) return out;
  const size_t pad = 4 * parts;
  for (const Fp8WeightRange& w : ws)
    if (w.rel % pad == 0 && w.numel % pad == 0 && w.rel * esize % 16 == 0 &&
        size_t(fp8_recipe::weight_copy_bytes(int64_t(w.numel), 1)) <= w.numel * esize)
      out.push_back(w);
  return out;
}

// The layout's cuts at the FP8 gather's weights' ends (ShardLayout: inside the group, ascending,
// once each: one weight's end is often the next one's start)
std::vector<std::vector<size_t>> ParamStore::fp8_gather_cuts(const std::vector<Fp8WeightRange>& ws, const ParamTable& t) {
  if (ws.empty()) return {};
  std::vector<std::vector<size_t>> cuts(t.groups().size());
  for (const Fp8WeightRange& w : ws)
    for (const size_t at : {w.rel, w.rel + w.numel})
      if (at > 0 && at < t.groups()[size_t(w.group)].numel) cuts[size_t(w.group)].push_back(at);
  for (std::vector<size_t>& c : cuts) {
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
  }
  return cuts;
}

void ParamStore::index_fp8_units() {
  unit_fp8_.assign(units_.size(), -1);
  unit_fp8_off_.assign(units_.size(), 0);
  size_t fp8_bytes = 0;
  for (size_t i = 0; i < units_.size(); ++i)
    for (size_t k = 0; k < fp8_.size(); ++k)
      if (fp8_[k].group == units_[i].group && units_[i].begin >= fp8_[k].rel &&
          units_[i].begin < fp8_[k].rel + fp8_[k].numel) {
        // whole units, unpadded: each rank's shard is whole 32-bit words of the weight's bytes
        ZT_CHECK(units_[i].begin + units_[i].len <= fp8_[k].rel + fp8_[k].numel && units_[i].padded == units_[i].len &&
                     units_[i].shard % sizeof(float) == 0,
                 "FP8 gather: unit [{}, +{}) of group {} is not inside weight [{}, +{}) in whole words", units_[i].begin,
                 units_[i].len, units_[i].group, fp8_[k].rel, fp8_[k].numel);
        unit_fp8_[i] = int(k);
        unit_fp8_off_[i] = fp8_bytes;
        fp8_bytes += units_[i].shard;
      }
  group_fp8_.resize(table_.groups().size());
  for (size_t k = 0; k < fp8_.size(); ++k) group_fp8_[size_t(fp8_[k].group)].push_back(int(k));
  if (!fp8_.empty()) {
    fp8_shards_ = static_cast<uint8_t*>(be_.alloc(fp8_bytes, MemTag::Params));
    fp8_amax_ = static_cast<float*>(be_.alloc(fp8_.size() * sizeof(float), MemTag::Params));
    fp8_scales_ = static_cast<float*>(be_.alloc(2 * fp8_.size() * sizeof(float), MemTag::Params));
  }
}

void ParamStore::cast_fp8_shards() {
  // The source of each FP8 unit's shard: what the gather would send in the compute type
  if (fp8_.empty()) return;
  auto source = [&](const Unit& u) -> const void* {
    return mixed_ ? compute_copy(u) : static_cast<const void*>(shard_params_ + u.shard_off);
  };
  be_.fill_zero(fp8_amax_, fp8_.size() * sizeof(float));
  for (size_t i = 0; i < units_.size(); ++i)
    if (unit_fp8_[i] >= 0) be_.fp8_amax(fp8_amax_ + unit_fp8_[i], source(units_[i]), int64_t(units_[i].shard));
  zero_.wait(zero_.all_reduce(fp8_amax_, fp8_.size(), ReduceOp::Max));  // each weight's, over its shards
  for (size_t i = 0; i < units_.size(); ++i)
    if (const int k = unit_fp8_[i]; k >= 0)
      be_.fp8_cast_with_amax(fp8_shards_ + unit_fp8_off_[i], fp8_scales_ + 2 * k, source(units_[i]),
                             int64_t(units_[i].shard), fp8_amax_ + k);
}

const void* ParamStore::gathered_fp8_copy(const void* w) const {
  for (const auto& [g, gb] : gathered_)
    if (gb.fp8)
      for (const int k : group_fp8_[size_t(g)])
        if (fp8_weight_place(gb.buf, k) == w) return w;
  return nullptr;
}

}  // namespace zt
