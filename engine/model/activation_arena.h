// Helpers the models share: their activations carved from one allocation, and the padded
// vocabulary's real part and full-vocabulary logits rows.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/tensor_parallel.h"

namespace zt {

// One activation tensor of n elements: a compute-precision tensor (compute set) or fp32
// statistics (stat set). A double: the planner counts the slots of specs too large to build.
struct ActSlot {
  void** compute = nullptr;
  float** stat = nullptr;
  double n = 0;
};

// Allocates one buffer (MemTag::Activations) holding every slot at a 64-byte aligned offset
// (128-bit vector access) and points each slot into it; returns the buffer, for Backend::free.
void* carve_activations(Backend& be, const std::vector<ActSlot>& slots);
// The bytes carve_activations allocates for these slots with `compute_size`-byte activations
// (the models' footprints: the planner counts the very slots the constructor carves).
double activation_bytes(const std::vector<ActSlot>& slots, size_t compute_size);

// The vocabulary as held: vocab_size real ids, padded to vocab_held rows split across the
// tensor-parallel group (this rank: vocab_local rows from id v0, the first real_local of them real).
// The padding rows of the head's weight are zero, so their logits are 0: the loss leaves them
// out of the softmax (and gives them a zero gradient), and logits_row drops them.
class PaddedVocab {
 public:
  PaddedVocab(const TensorParallel& tp, int vocab_size, int vocab_held);

  int local() const { return local_; }
  int real_local() const { return real_local_; }
  // out_host (vocab_size) <- the full-vocabulary logits of `row` (local, compute dtype, device).
  // Collective over the tensor-parallel group.
  void logits_row(const void* row, float* out_host) const;

 private:
  const TensorParallel& tp_;
  int size_, held_, local_, real_local_;
};

}  // namespace zt
