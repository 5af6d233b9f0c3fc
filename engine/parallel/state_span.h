// This rank's optimizer states as the ZeRO placement holds them, as the optimizer reads them.
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

namespace zt {

// A contiguous stretch of this rank's fp32 states (one ZeRO unit's shard; the whole unit at
// stage 0), all arrays of n elements in the backend's memory.
struct StateSpan {
  float* master;  // fp32 master weights
  float* grad;    // fp32 gradients (as reduced, times the loss scale)
  float *m, *v;   // AdamW moments
  void* compute;  // compute-precision copy of master that AdamW refreshes, or null (fp32)
  size_t n;
  // The tensors the span covers, in order, each [off, off + n) of the span.
  struct Piece {
    size_t off, n;
    bool decay;    // weight decay applies
    bool counted;  // counts in the global gradient norm on this rank (a tensor replicated across
                   // the tensor-parallel group is counted by one rank of it)
  };
  std::vector<Piece> pieces;
  bool all_counted = true;  // every piece counted: the norm takes the span at once
};

// One optimizer update applied to some of this rank's spans (engine/optim/optimizer_step.h: AdamW
// with the step's lr and t).
using SpanStep = std::function<void(const std::vector<StateSpan>& spans)>;

}  // namespace zt
