// The parameter table (see param_table.h).
#include "engine/model/param_table.h"

#include <algorithm>

#include "engine/core/rng.h"
#include "engine/core/status.h"

namespace zt {

void ParamTable::add(std::string name, std::vector<int64_t> global_shape, TpSplit split, int row_blocks,
                     bool decay, float init_std, float init_value, int64_t real_rows, int tp_replicas) {
  ParamInfo p;
  p.name = std::move(name);
  p.global_shape = global_shape;
  p.stored_shape = global_shape;
  if (real_rows >= 0) {
    ZT_CHECK(real_rows <= global_shape[0] && row_blocks == 1, "{}: {} real rows of {}", p.name, real_rows, global_shape[0]);
    p.stored_shape[0] = real_rows;
  }
  p.shape = std::move(global_shape);
  ZT_CHECK(tp_replicas >= 1 && tp_size_ % tp_replicas == 0 && (tp_replicas == 1 || split == TpSplit::Rows),
           "{}: {} replicas of a piece in a tensor-parallel group of {}", p.name, tp_replicas, tp_size_);
  p.tp_replicas = split == TpSplit::Rows ? tp_replicas : 1;
  if (split == TpSplit::Rows) p.shape[0] /= tp_size_ / p.tp_replicas;
  if (split == TpSplit::Cols) p.shape[1] /= tp_size_;
  p.split = split;
  p.row_blocks = row_blocks;
  p.numel = p.global_numel = p.stored_numel = 1;
  for (auto d : p.shape) p.numel *= size_t(d);
  for (auto d : p.global_shape) p.global_numel *= size_t(d);
  for (auto d : p.stored_shape) p.stored_numel *= size_t(d);
  p.offset = n_params_;
  p.global_offset = n_global_params_;
  p.decay = decay;
  p.init_std = init_std;
  p.init_value = init_value;
  n_params_ += p.numel;
  n_global_params_ += p.global_numel;
  params_.push_back(std::move(p));
}

void ParamTable::end_group(std::string name) {
  const size_t first = group_of_.size();
  ZT_CHECK(first < params_.size(), "parameter group {} is empty", name);
  ParamGroup g{std::move(name), params_[first].offset, 0, first, params_.size() - first};
  for (size_t i = first; i < params_.size(); ++i) {
    g.numel += params_[i].numel;
    group_of_.push_back(int(groups_.size()));
  }
  groups_.push_back(std::move(g));
}

size_t ParamTable::global_index(const ParamInfo& p, size_t local, int rank) const {
  if (p.split == TpSplit::None) return local;
  const size_t rows = size_t(p.shape[0]), cols = p.shape.size() > 1 ? size_t(p.shape[1]) : 1;
  const size_t r = local / cols, c = local % cols;
  if (p.split == TpSplit::Cols) return r * size_t(p.global_shape[1]) + size_t(rank) * cols + c;
  // Rows: local row r is row `within` of block `blk` of this rank's slice of every block.
  const size_t local_block_rows = rows / p.row_blocks;
  const size_t global_block_rows = size_t(p.global_shape[0]) / p.row_blocks;
  const size_t blk = r / local_block_rows, within = r % local_block_rows;
  const size_t grow = blk * global_block_rows + size_t(p.tp_piece(rank)) * local_block_rows + within;
  return grow * cols + c;
}

void ParamTable::init_range(uint64_t seed, size_t begin, size_t end, float* dst) const {
  for (const auto& p : params_) {
    const size_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    float* out = dst + (lo - begin);
    if (p.init_std == 0.0f && p.stored_numel == p.global_numel) {
      std::fill(out, out + (hi - lo), p.init_value);
      continue;
    }
    // Keyed by the element's index in the full tensor: the same model for any tensor-parallel
    // degree, ZeRO stage or shard boundary.
    const uint64_t stream = name_hash(p.name);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < int64_t(hi - lo); ++i) {
      const size_t g = global_index(p, lo - p.offset + size_t(i), tp_rank_);
      out[i] = g >= p.stored_numel ? 0.0f  // padding
               : p.init_std == 0.0f ? p.init_value
               : p.init_uniform     ? float((2.0 * uniform_from_bits(uint32_t(bits64_at(seed, stream, g))) - 1.0) *
                                            p.init_std)
                                    : float(normal_at(seed, stream, g) * p.init_std);
    }
  }
}

}  // namespace zt
