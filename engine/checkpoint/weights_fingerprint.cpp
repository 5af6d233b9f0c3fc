// The weights' fingerprint (see weights_fingerprint.h).
#include "engine/checkpoint/weights_fingerprint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/core/rng.h"

namespace zt {

namespace {
uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

bool FingerprintSums::sampled(size_t index) { return index < 1024 || index % 1021 == 0; }

void FingerprintSums::add(uint64_t name_hash, size_t g, float v) {
  // bf16's bits (rounded to nearest even): the same base held in fp32 or in 16 bits (a resume in
  // another precision) hashes alike
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const uint64_t h = mix(name_hash ^ mix(uint64_t(g) * 0x100000001b3ull ^ bits));
  lo = (lo + (h & 0xffffffffu)) & 0xffffffffu;
  hi = (hi + (h >> 32)) & 0xffffffffu;
}

uint64_t weights_fingerprint(const ModelStates& states, const ParamTable& table, Comm& world) {
  // Two 32-bit sums, each < 2^32 on a rank, so that their sum over any job fits a double exactly.
  FingerprintSums sums;
  std::vector<float> buf;
  constexpr size_t kBlock = size_t(1) << 22;  // floats read at a time
  for (const ModelStates::GlobalRun& r : states.global_runs()) {
    if (!r.owner) continue;
    const ParamInfo& p = table.params()[size_t(r.param)];
    const uint64_t name = name_hash(p.name);
    for (size_t off = 0; off < r.n; off += kBlock) {
      const size_t n = std::min(kBlock, r.n - off);
      buf.resize(n);
      states.read_run(ModelStates::State::Master, r, off, n, buf.data());
      for (size_t i = 0; i < n; ++i) {
        const size_t g = r.global_begin + off + i;  // index in the full tensor
        if (g < p.stored_numel && FingerprintSums::sampled(g)) sums.add(name, g, buf[i]);
      }
    }
  }
  double total[2] = {double(sums.lo), double(sums.hi)};
  world.all_reduce_doubles(total, 2);
  const uint64_t a = uint64_t(std::fmod(total[0], 4294967296.0)), b = uint64_t(std::fmod(total[1], 4294967296.0));
  return a | (b << 32);
}

}  // namespace zt
