// Shared model helpers (see activation_arena.h).
#include "engine/model/activation_arena.h"

#include <algorithm>
#include <cmath>

namespace zt {

namespace {
size_t aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }
}  // namespace

void* carve_activations(Backend& be, const std::vector<ActSlot>& slots) {
  const size_t es = be.compute_size();
  auto bytes_of = [&](const ActSlot& sl) { return aligned(size_t(sl.n) * (sl.compute ? es : sizeof(float))); };
  size_t total = 0;
  for (const ActSlot& sl : slots) total += bytes_of(sl);
  void* buf = be.alloc(total, MemTag::Activations);
  char* p = static_cast<char*>(buf);
  for (const ActSlot& sl : slots) {
    if (sl.compute) *sl.compute = p;
    else *sl.stat = reinterpret_cast<float*>(p);
    p += bytes_of(sl);
  }
  return buf;
}

double activation_bytes(const std::vector<ActSlot>& slots, size_t compute_size) {
  double total = 0;
  for (const ActSlot& sl : slots) total += std::ceil(sl.n * double(sl.compute ? compute_size : 4) / 64) * 64;
  return total;
}

PaddedVocab::PaddedVocab(const TensorParallel& tp, int vocab_size, int vocab_held)
    : tp_(tp),
      size_(vocab_size),
      held_(vocab_held),
      local_(vocab_held / tp.size()),
      real_local_(std::clamp(vocab_size - tp.rank() * local_, 0, local_)) {}

void PaddedVocab::logits_row(const void* row, float* out) const {
  if (held_ == size_) {
    tp_.gather_vocab_row(row, local_, out);
    return;
  }
  std::vector<float> held(static_cast<size_t>(held_));  // the real ids come first
  tp_.gather_vocab_row(row, local_, held.data());
  std::copy(held.begin(), held.begin() + size_, out);
}

}  // namespace zt
