// Token id slots (see token_slots.h).
#include "engine/model/token_slots.h"

namespace zt {

TokenSlots::TokenSlots(Backend& be, int64_t max_tokens)
    : be_(be),
      max_tokens_(max_tokens),
      buf_(static_cast<int32_t*>(be.alloc(size_t(6 * max_tokens) * sizeof(int32_t), MemTag::Activations))) {}

TokenSlots::~TokenSlots() { be_.free(buf_); }

TokenSlots::Tokens TokenSlots::upload(const int32_t* inputs, const int32_t* targets, const int32_t* positions,
                                      int64_t n) {
  slot_ ^= 1;
  int32_t* d_inputs = buf_ + int64_t(slot_) * 3 * max_tokens_;
  int32_t* d_targets = d_inputs + n;
  int32_t* d_positions = d_targets + n;
  be_.upload_async(d_inputs, inputs, size_t(n) * sizeof(int32_t), free_after_[slot_]);
  if (targets) be_.upload_async(d_targets, targets, size_t(n) * sizeof(int32_t), free_after_[slot_]);
  if (positions) be_.upload_async(d_positions, positions, size_t(n) * sizeof(int32_t), free_after_[slot_]);
  current_ = {d_inputs, d_targets, positions ? d_positions : nullptr};
  return current_;
}

}  // namespace zt
