// ZeRO shard arithmetic (see shard_layout.h).
#include "engine/parallel/shard_layout.h"

#include <algorithm>

#include "engine/core/status.h"

namespace zt {

ShardLayout::ShardLayout(const std::vector<size_t>& group_numel, int parts, int my_part, size_t bucket, size_t pad,
                         const std::vector<std::vector<size_t>>& cuts)
    : parts_(parts), my_part_(my_part) {
  ZT_CHECK(parts >= 1 && my_part >= 0 && my_part < parts && pad % size_t(parts) == 0,
           "bad shard layout: part {} of {}, pad {}", my_part, parts, pad);
  ZT_CHECK(cuts.empty() || cuts.size() == group_numel.size(), "shard layout: cuts for {} of {} groups", cuts.size(),
           group_numel.size());
  bucket = std::max<size_t>(pad, bucket / pad * pad);  // a multiple of pad: only a run's last unit is padded
  group_units_.resize(group_numel.size());
  for (size_t g = 0; g < group_numel.size(); ++g) {
    group_full_off_.push_back(total_full_);
    size_t padded_sum = 0;
    std::vector<size_t> ends = cuts.empty() ? std::vector<size_t>{} : cuts[g];  // where each run of units ends
    for (size_t i = 0; i < ends.size(); ++i)
      ZT_CHECK(ends[i] % pad == 0 && ends[i] > 0 && ends[i] < group_numel[g] && (i == 0 || ends[i] > ends[i - 1]),
               "shard layout: cut {} of group {} ({} elements) is not an ascending multiple of {} inside it", ends[i],
               g, group_numel[g], pad);
    ends.push_back(group_numel[g]);
    size_t run_begin = 0;
    for (const size_t run_end : ends) {
      for (size_t begin = run_begin; begin < run_end; begin += bucket) {
        ShardUnit u;
        u.group = int(g);
        u.begin = begin;
        u.len = std::min(bucket, run_end - begin);
        u.padded = (u.len + pad - 1) / pad * pad;
        u.shard = u.padded / size_t(parts_);
        u.full_off = total_full_;
        u.shard_off = total_shard_;
        total_full_ += u.padded;
        total_shard_ += u.shard;
        padded_sum += u.padded;
        group_units_[g].push_back(int(units_.size()));
        units_.push_back(u);
      }
      run_begin = run_end;
    }
    group_padded_.push_back(padded_sum);
  }
}

size_t ShardLayout::my_len(const ShardUnit& u) const {
  const size_t b = my_begin(u);
  return b >= u.len ? 0 : std::min(u.shard, u.len - b);
}

}  // namespace zt
