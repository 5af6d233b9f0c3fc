// Fp8WeightCopies (see fp8_weight_copies.h).
#include "engine/model/fp8_weight_copies.h"

#include "engine/backend/fp8_recipe.h"
#include "engine/core/status.h"

namespace zt {

Fp8WeightCopies::~Fp8WeightCopies() {
  for (auto& [w, c] : copies_) be_.free(c.buf);
}

const void* Fp8WeightCopies::get(const void* w, int OC, int C, int64_t version) {
  if (version < 0) return nullptr;
  auto [it, made] = copies_.try_emplace(w, Copy{nullptr, OC, C, -1});
  Copy& c = it->second;
  ZT_CHECK(c.OC == OC && c.C == C, "an FP8 weight copy of ({}, {}) asked for as ({}, {})", c.OC, c.C, OC, C);
  if (made) c.buf = be_.alloc(size_t(fp8_recipe::weight_copy_bytes(OC, C)), MemTag::Params);
  if (c.version != version) {
    be_.fp8_weight_copy(c.buf, w, OC, C);
    c.version = version;
    ++casts_;
  }
  return c.buf;
}

}  // namespace zt
