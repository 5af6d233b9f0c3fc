// Device buffers for a micro-batch's token ids, two slots used in turn: the next batch's upload
// (on the copy stream) may overlap the previous micro-batch's backward, which still reads the
// other slot. Each slot waits only for the last op that read it (a Backend::mark()).
#pragma once
#include <cstdint>

#include "engine/backend/backend.h"

namespace zt {

class TokenSlots {
 public:
  TokenSlots(Backend& be, int64_t max_tokens);
  ~TokenSlots();
  TokenSlots(const TokenSlots&) = delete;
  TokenSlots& operator=(const TokenSlots&) = delete;

  struct Tokens {
    int32_t* inputs;     // (n) device
    int32_t* targets;    // (n) device; unset when uploaded without targets
    int32_t* positions;  // (n) device; null when uploaded without positions (one document a row)
  };
  // Uploads n inputs (and targets, positions, when not null) into the next slot.
  Tokens upload(const int32_t* inputs, const int32_t* targets, const int32_t* positions, int64_t n);
  Tokens current() const { return current_; }
  // Records that the ops enqueued so far are the current slot's last readers.
  void mark_read() { free_after_[slot_] = be_.mark(); }

 private:
  Backend& be_;
  int64_t max_tokens_;
  int32_t* buf_;  // 2 slots of: inputs, targets, positions (max_tokens each)
  int slot_ = 0;
  uint64_t free_after_[2] = {0, 0};
  Tokens current_{nullptr, nullptr, nullptr};
};

}  // namespace zt
