// Low-rank adapters (LoRA, Hu et al. 2021) over a decoder's frozen linear layers. A targeted layer
// y = x W^T keeps W frozen and gains two trained factors, A (r, in) and B (out, r):
//   y = x W^T + s (x A^T) B^T,  s = alpha / r,
// B zero at the start (so the adapted model starts as the base), A drawn from the counter-based
// RNG (PEFT's kaiming-uniform, or normal(0, 1/r)): every layout starts alike.
//
// The adapters are their own parameter table (one group per block: block l's factors, in the
// block's layer order), held by their own ZeRO store with fp32 masters and AdamW; the base's store
// is frozen (engine/parallel/param_store.h). Names are the base layer's with PEFT's suffixes:
// "model.layers.3.self_attn.q_proj.lora_A.weight" (r, in), "....lora_B.weight" (out, r).
//
// Per targeted layer and micro-batch, h = x A^T (N, r) is kept for backward. Backward, with
// g = s dy (the layer's output gradient, scaled):
//   dB += g^T h,   dh = g B,   dA += dh^T x,   dx += dh A.
// With dropout p (PEFT's lora_dropout, on the adapter's input only, in training forwards): x is
// replaced by x' = x . mask / (1 - p), the mask drawn from Philox keyed by the seed and the layer,
// at each element's index in the global batch (its global sample row, its column of the full
// layer): the same mask for any layout, drawn again in backward (dA += dh^T x', dx += (dh A) .
// mask / (1 - p)) instead of kept.
// Under tensor parallelism A of a column-parallel layer (the base's rows split: q, k, v, gate, up)
// is replicated and B follows the base's rows; a row-parallel layer (o, down: the base's columns
// split) has A split by its columns and B replicated. Forward needs no communication of its own
// (a row-parallel layer's update is a partial sum like its base's, added before the group's
// reduction). In backward the replicated factor's gradient is a part per rank (column-parallel:
// dh = g B sums over the output rows each rank holds; row-parallel: h = x A^T over the input
// columns), summed over the tensor group; a key/value layer's B replicated on several ranks (more
// ranks than key/value heads) is summed over those ranks. The block's parts travel in one
// all-reduce as the block's backward ends, and its input gradients' parts join the base's
// reduction.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/config/spec.h"
#include "engine/model/model.h"
#include "engine/model/param_table.h"
#include "engine/model/tensor_parallel.h"

namespace zt {

// Whether `targets` (roles, comma-separated, as the spec resolves them) names `role`.
bool lora_targets(const std::string& targets, const std::string& role);

// One linear layer of a block that [lora] targets may name.
struct LoraSite {
  std::string role;    // the family-neutral name [lora] targets use: "q", "qkv", "o", "down", ...
  std::string module;  // the base layer's name without ".weight": "model.layers.3.self_attn.q_proj"
  int64_t in = 0, out = 0;  // the base weight's full shape (out, in)
  TpSplit split = TpSplit::Rows;  // the base weight's: Rows (column-parallel) or Cols (row-parallel)
  int row_blocks = 1;              // Rows: the base's blocks (GPT-2's packed q|k|v: 3)
  int tp_replicas = 1;             // Rows: ranks holding each piece (key/value heads fewer than ranks)
};

// The adapters' parameters (A and B) of one block whose layers are `sites`, under `spec`.
double lora_block_params(const std::vector<LoraSite>& sites, const RunSpec::Lora& spec);

class LoraAdapters {
 public:
  // `sites[l]`: block l's linear layers, in the same role order for every block; those whose role
  // spec.targets lists (already resolved to roles: engine/config/spec.cpp) get adapters. Scratch and
  // the kept h for micro-batches of up to max_rows rows.
  LoraAdapters(Backend& be, const TensorParallel& tp, const RunSpec::Lora& spec,
               const std::vector<std::vector<LoraSite>>& sites, int64_t max_rows);
  ~LoraAdapters();
  LoraAdapters(const LoraAdapters&) = delete;
  LoraAdapters& operator=(const LoraAdapters&) = delete;

  const ParamTable& table() const { return table_; }
  void set_provider(ParamProvider* p) { prov_ = p; }
  float scale() const { return scale_; }
  // Whether block l's site `site` (its index in sites[l]) has an adapter.
  bool has(int l, int site) const { return a_index(l, site) >= 0; }

  // The micro-batch to come: whether it trains (dropout applies) and where its rows are in the
  // global batch (first_row = its first global sample x seq_len), with the run's seed.
  void set_batch(bool training, uint64_t seed, uint64_t first_row) {
    training_ = training, seed_ = seed, first_row_ = first_row;
  }

  // The walk (engine/model/decoder_pass.h): the adapters' pass over the blocks in `blocks` order,
  // and each block's group entered (its factors, and in backward its gradients) and left.
  void begin_pass(const std::vector<int>& blocks);
  void enter(int l, bool backward);
  void leave(int l, bool backward);

  // Forward of site `site` of the entered block l over x (N, in): out (N rows, ld_out apart, its
  // first `out` columns: a column slice of a packed output) += s (x A^T) B^T. h is kept. No-op
  // for a site without an adapter. in and out are this rank's (the base layer's local shape).
  void forward(int l, int site, const void* x, void* out, int64_t ld_out, int64_t N);
  // Its backward, dy: the layer's output gradient (N rows, ld_dy apart). The factors' gradients
  // accumulate; returns this site's input gradient dh A (N, in), in a scratch buffer valid until
  // the next call, for the caller to add to (or transform into) the base's; null without adapter.
  const void* backward(int l, int site, const void* x, const void* dy, int64_t ld_dy, int64_t N);
  // backward(), its input gradient added to dx (N, in).
  void backward_into(int l, int site, const void* x, const void* dy, int64_t ld_dy, int64_t N, void* dx);

 private:
  int a_index(int l, int site) const { return index_[size_t(l)][size_t(site)]; }
  int64_t local_in(const LoraSite& s) const { return s.split == TpSplit::Cols ? s.in / tp_.size() : s.in; }
  // x itself, or (dropout while training) x' in xd_: the adapter's input.
  const void* dropped(const LoraSite& s, const void* x, int64_t N);
  // v (N, this rank's in) x mask / (1 - p), in place or into out: the mask of site s for this batch
  // (a stream per layer and seed; each element's index in the full (global rows, in) input).
  void apply_mask(const LoraSite& s, void* out, const void* v, int64_t N);
  int64_t local_out(const LoraSite& s) const {
    return s.split == TpSplit::Rows ? s.out / (tp_.size() / s.tp_replicas) : s.out;
  }
  // Where site s's replicated factor's gradient goes this micro-batch: its slot in parts_ (summed
  // over the tensor group when the block is left), or the gradient itself without tensor parallelism.
  struct Part {
    int64_t off = 0, n = 0;  // its slot: [off, off + pieces * n) in parts_, this rank's piece at `mine`
    int64_t mine = 0;
  };
  void* el(void* base, int64_t i) const { return static_cast<char*>(base) + i * int64_t(esize_); }

  Backend& be_;
  const TensorParallel& tp_;
  ParamTable table_;
  float scale_;
  int rank_;
  size_t esize_;
  std::vector<std::vector<LoraSite>> sites_;         // [l][site]
  std::vector<std::vector<int>> index_;              // [l][site]: A's index in the table (B follows), or -1
  std::vector<std::vector<Part>> parts_of_;          // [l][site]: the replicated factor's slot
  std::vector<int64_t> parts_len_;                   // [l]: the block's slots, in floats
  float* parts_ = nullptr;  // (largest block's slots) fp32: the replicated factors' parts, tensor-parallel only
  std::vector<std::vector<void*>> h_;                // [l][site]: (max_rows, r) kept for backward
  void* h_buf_ = nullptr;
  void* tmp_ = nullptr;  // (max_rows, max out): the update, then s dy
  void* dh_ = nullptr;   // (max_rows, r)
  void* dx_ = nullptr;   // (max_rows, max in)
  void* xd_ = nullptr;   // (max_rows, max in): the input after dropout (dropout only)
  float dropout_;
  bool training_ = false;
  uint64_t seed_ = 0, first_row_ = 0;
  int64_t max_rows_;
  ParamProvider* prov_ = nullptr;
  int entered_ = -1;
  void* params_ = nullptr;  // the entered block's factors (compute precision)
  float* grads_ = nullptr;  // and their gradients (backward)
};

}  // namespace zt
