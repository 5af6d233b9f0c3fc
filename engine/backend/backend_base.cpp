// What every backend shares: memory tag names and the answer for an op a backend lacks (in
// ztrain_base: the CUDA plugin uses them too).
#include "engine/backend/backend.h"

#include "engine/core/status.h"

namespace zt {

const char* mem_tag_name(MemTag tag) {
  switch (tag) {
    case MemTag::Params: return "params";
    case MemTag::Grads: return "grads";
    case MemTag::OptimStates: return "optimizer";
    case MemTag::Activations: return "activations";
    case MemTag::CommBuffers: return "buffers";
    default: return "other";
  }
}

void Backend::unsupported(const char* op) const {
  throw RuntimeFailure(fmt::format("op {} is not supported on backend {}", op, name()));
}

}  // namespace zt
