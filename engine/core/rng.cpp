// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
#include "engine/core/rng.h"

#include <cmath>

namespace zt {

Philox4 philox4x32(uint64_t key, uint64_t counter_lo, uint64_t counter_hi) {
  return philox4x32_10(key, counter_lo, counter_hi);  // engine/core/philox.h: the device's too
}

uint64_t name_hash(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

double normal_at(uint64_t seed, uint64_t stream_id, uint64_t index) {
  Philox4 r = philox4x32(seed, index, stream_id);
  double u1 = uniform_from_bits(r.v[0]);  // (0, 1]: log is finite
  double u2 = uniform_from_bits(r.v[1]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

uint64_t bits64_at(uint64_t seed, uint64_t stream_id, uint64_t index) {
  Philox4 r = philox4x32(seed, index, stream_id);
  return (uint64_t(r.v[0]) << 32) | r.v[1];
}

}  // namespace zt
