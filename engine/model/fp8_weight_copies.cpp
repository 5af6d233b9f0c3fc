// Fp8WeightCopies (see fp8_weight_copies.h).
#include "engine/model/fp8_weight_copies.h"

#include "engine/backend/fp8_recipe.h"

namespace zt {

Fp8WeightCopies::~Fp8WeightCopies() {
  for (auto& [w, c] : copies_) be_.free(c.buf);
}

const void* Fp8WeightCopies::get(const void* w, int OC, int C, int64_t version) {
  if (version < 0) return nullptr;
  auto it = copies_.find(w);
  if (it != copies_.end() && (it->second.OC != OC || it->second.C != C)) {  // another weight at a freed one's address
    be_.free(it->second.buf);
    copies_.erase(it);
    it = copies_.end();
  }
  if (it == copies_.end()) {  // allocated before it is recorded: a failed allocation leaves no entry
    void* buf = be_.alloc(size_t(fp8_recipe::weight_copy_bytes(OC, C)), MemTag::Params);
    it = copies_.emplace(w, Copy{buf, OC, C, -1}).first;
  }
  Copy& c = it->second;
  if (c.version != version) {
    be_.fp8_weight_copy(c.buf, w, OC, C);
    c.version = version;
  }
  return c.buf;
}

}  // namespace zt
