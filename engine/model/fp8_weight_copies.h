// The FP8 linear layers' weight copies (issue 50): where the parameters stay on the device between
// passes (ZeRO stages 0-2, ParamProvider::resident_params_version), each FP8 layer's weight is
// cast once per parameter update into a copy the products take (fp8_recipe::weight_copy_bytes: 1
// byte a weight and its scales), instead of once in each product: a step of M micro-batches casts
// each weight once rather than 2 M times (each forward, each input gradient). At ZeRO-3 each pass
// gathers the weights and frees them after, so nothing is kept and each product casts its weight.
#pragma once
#include <cstdint>
#include <unordered_map>

#include "engine/backend/backend.h"

namespace zt {

class Fp8WeightCopies {
 public:
  explicit Fp8WeightCopies(Backend& be) : be_(be) {}
  ~Fp8WeightCopies();
  Fp8WeightCopies(const Fp8WeightCopies&) = delete;
  Fp8WeightCopies& operator=(const Fp8WeightCopies&) = delete;

  // The copy of weight w (OC, C) as the parameters are at `version` (resident_params_version):
  // made now when w has none or one of another version; null when version < 0 (none is kept).
  // Versions are unique across stores, so a copy is never taken for another store's weight.
  const void* get(const void* w, int OC, int C, int64_t version);

 private:
  struct Copy {
    void* buf;
    int OC, C;
    int64_t version;
  };
  Backend& be_;
  std::unordered_map<const void*, Copy> copies_;  // by the weight's address (in place while resident)
};

}  // namespace zt
