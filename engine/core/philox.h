// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), header-only
// so that host code (engine/core/rng.h) and device kernels (LoRA's dropout mask) draw the same
// bits for the same (key, counter).
#pragma once
#include <cstdint>

#include "engine/core/host_device.h"

namespace zt {

struct Philox4 {
  uint32_t v[4];
};

ZT_HOST_DEVICE inline Philox4 philox4x32_10(uint64_t key, uint64_t counter_lo, uint64_t counter_hi) {
  uint32_t c0 = uint32_t(counter_lo), c1 = uint32_t(counter_lo >> 32);
  uint32_t c2 = uint32_t(counter_hi), c3 = uint32_t(counter_hi >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0), hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// Dropout's keep decision for element `index` of stream `key`: its uniform draw in (0, 1] above p
// (kept with probability 1 - p).
ZT_HOST_DEVICE inline bool dropout_keeps(uint64_t key, uint64_t index, float p) {
  const uint32_t bits = philox4x32_10(key, index, 0x64726F70u /* "drop" */).v[0];
  return float((double(bits) + 1.0) * (1.0 / 4294967296.0)) > p;
}

}  // namespace zt
