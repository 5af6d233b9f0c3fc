// How ZeRO cuts a model's flat parameter layout into units and shards: pure arithmetic, no
// memory, no communication (unit-tested without MPI).
//
// Each parameter group is split into chunks of at most `bucket` elements (units), each padded to
// a multiple of `pad` (the partition count P, times 2 in mixed precision so that every 16-bit
// shard is a whole number of 32-bit words for the type-blind all-gather; times 4 where ZeRO-3
// gathers FP8 bytes) and cut into P equal shards; part r owns shard r of every unit. The padded
// units laid end to end form the "full" layout (stages 0-2 hold it whole); the shards end to end
// form the "shard" layout. A group may also be cut at given elements (a unit then begins there:
// ZeRO-3's FP8 weights are whole units); cuts on multiples of `pad` leave every unit but a group's
// last unpadded, so that an element's place in the group's full layout is its place in the group.
#pragma once
#include <cstddef>
#include <vector>

#include "engine/model/param_table.h"

namespace zt {

struct ShardUnit {
  int group;
  size_t begin, len;  // group-local elements [begin, begin + len)
  size_t padded;      // len rounded up to a multiple of pad
  size_t shard;       // padded / parts
  size_t full_off;    // offset in the padded full layout
  size_t shard_off;   // offset in the shard layout
};

class ShardLayout {
 public:
  // group_numel: elements of each parameter group, in order; `bucket` is rounded down to a
  // multiple of `pad` (a multiple of parts), at least pad.
  // cuts: empty, or per group the group-local elements where a unit must begin (ascending,
  // multiples of pad, inside the group).
  ShardLayout(const std::vector<size_t>& group_numel, int parts, int my_part, size_t bucket, size_t pad,
              const std::vector<std::vector<size_t>>& cuts = {});

  int parts() const { return parts_; }
  int my_part() const { return my_part_; }
  const std::vector<ShardUnit>& units() const { return units_; }
  const std::vector<int>& group_units(int group) const { return group_units_[size_t(group)]; }
  size_t group_full_off(int group) const { return group_full_off_[size_t(group)]; }
  size_t group_padded(int group) const { return group_padded_[size_t(group)]; }
  size_t total_full() const { return total_full_; }
  size_t total_shard() const { return total_shard_; }

  size_t my_begin(const ShardUnit& u) const { return size_t(my_part_) * u.shard; }  // unit-local
  size_t my_len(const ShardUnit& u) const;  // valid (unpadded) elements of my shard

  // Calls fn(param index, offset in my shard of u, count) for each tensor of `table` overlapping
  // my shard of u, in order.
  template <typename Fn>
  void for_each_tensor_piece(const ParamTable& table, const ShardUnit& u, Fn fn) const {
    const ParamGroup& g = table.groups()[size_t(u.group)];
    const size_t lo = g.offset + u.begin + my_begin(u), hi = lo + my_len(u);  // model-flat range
    for (size_t i = g.first_param; i < g.first_param + g.n_params; ++i) {
      const ParamInfo& p = table.params()[i];
      const size_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.numel);
      if (a < b) fn(i, a - lo, b - a);
    }
  }

 private:
  int parts_, my_part_;
  std::vector<ShardUnit> units_;
  std::vector<std::vector<int>> group_units_;
  std::vector<size_t> group_full_off_, group_padded_;
  size_t total_full_ = 0, total_shard_ = 0;
};

}  // namespace zt
