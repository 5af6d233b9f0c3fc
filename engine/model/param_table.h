// The parameter table of a model on one tensor-parallel rank: every tensor's name, global and
// local shape, place in the flat parameter layout, tensor-parallel split and initializer, and the
// groups in which ZeRO gathers, reduces and shards them. Models build it; the engine reads it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zt {

// How a tensor is cut across the tensor-parallel group (Megatron-LM): Rows = output features
// (column-parallel Linear, vocabulary-parallel embedding), each of `row_blocks` equal row blocks
// split separately (the packed QKV weight is 3 blocks, so every rank gets q, k and v rows of its
// heads); Cols = input features (row-parallel Linear); None = replicated on every rank.
// A Rows tensor with tp_replicas = r > 1 is cut into tp_size / r pieces and each piece is held
// by r consecutive ranks (grouped-query attention's key/value heads when there are fewer of them
// than ranks: each rank holds the head its query heads read).
enum class TpSplit { None, Rows, Cols };

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;  // this rank's (local) shape
  size_t offset = 0;           // in floats, into this rank's flat parameter layout
  size_t numel = 0;
  bool decay = false;      // weight decay applies (matrices and embeddings, not biases/norms)
  float init_std = 0.0f;   // normal(0, init_std); 0 means constant init_value
  float init_value = 0.0f;
  bool init_uniform = false;  // uniform(-init_std, init_std) instead (LoRA's A, as PEFT's kaiming)
  TpSplit split = TpSplit::None;
  int row_blocks = 1;
  std::vector<int64_t> global_shape;  // the full logical shape
  size_t global_offset = 0;           // in the unsharded model's flat layout
  size_t global_numel = 0;
  // The real part, a prefix of the full tensor: rows past it are padding (the vocabulary padded
  // for the GPU), always zero, an internal detail that checkpoints and dumps leave out.
  std::vector<int64_t> stored_shape;
  size_t stored_numel = 0;
  int tp_replicas = 1;  // ranks holding each piece of a Rows tensor (see TpSplit)

  // The piece of the full tensor that tensor-parallel rank `rank` holds.
  int tp_piece(int rank) const { return rank / tp_replicas; }
  // Whether `rank` is the one rank that counts this tensor's (or its piece's) values when the
  // group's copies are the same: replicated tensors on rank 0, replicated pieces on the first
  // rank of each piece (gradient norms, checkpoint writes).
  bool tp_primary(int rank) const {
    return split == TpSplit::None ? rank == 0 : rank % tp_replicas == 0;
  }
};

// A contiguous run of parameters that is gathered, reduced and sharded as a unit (for a
// transformer: the embeddings, each block, the final norm).
struct ParamGroup {
  std::string name;
  size_t offset = 0, numel = 0;  // in floats, in the model's flat parameter layout
  size_t first_param = 0, n_params = 0;
};

class ParamTable {
 public:
  // The table as seen by rank `tp_rank` of a tensor-parallel group of `tp_size`.
  ParamTable(int tp_size = 1, int tp_rank = 0) : tp_size_(tp_size), tp_rank_(tp_rank) {}

  // Appends a tensor of full shape `global_shape` (1-D or 2-D); this rank holds its `split` part.
  // `real_rows` >= 0: only the first real_rows rows are real, the rest padding (zero).
  // `tp_replicas` > 1 (Rows only): each piece is held by that many consecutive ranks.
  void add(std::string name, std::vector<int64_t> global_shape, TpSplit split, int row_blocks, bool decay,
           float init_std, float init_value, int64_t real_rows = -1, int tp_replicas = 1);
  // The tensor added last is drawn uniform in (-bound, bound) instead (same counter-based stream).
  void set_uniform_init(float bound) {
    params_.back().init_uniform = true;
    params_.back().init_std = bound;
  }
  // Closes a group over the tensors added since the previous group.
  void end_group(std::string name);

  const std::vector<ParamInfo>& params() const { return params_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  int group_of(size_t param) const { return group_of_[param]; }
  // Offset of a tensor inside its group (elements).
  int64_t group_rel(size_t param) const {
    return int64_t(params_[param].offset - groups_[group_of_[param]].offset);
  }
  size_t num_params() const { return n_params_; }             // this rank's (local) count
  size_t num_global_params() const { return n_global_params_; }  // the full model's
  int tp_size() const { return tp_size_; }
  int tp_rank() const { return tp_rank_; }

  // Index in the full tensor of element `local` of tensor-parallel rank `rank`'s shard.
  size_t global_index(const ParamInfo& p, size_t local, int rank) const;

  // Initial values of the flat elements [begin, end) of this rank's layout into dst (host memory).
  // Element i of parameter `name` is normal_at(seed, name_hash(name), i) * init_std (or its
  // constant), i indexing the full tensor: a pure function of (seed, name, index), whatever the
  // layout of ranks and shards. Padding rows are zero.
  void init_range(uint64_t seed, size_t begin, size_t end, float* dst) const;

 private:
  int tp_size_, tp_rank_;
  std::vector<ParamInfo> params_;
  std::vector<ParamGroup> groups_;
  std::vector<int> group_of_;  // param index -> group index
  size_t n_params_ = 0, n_global_params_ = 0;
};

}  // namespace zt
