// Names of the memory tags (in ztrain_core: the CUDA plugin's allocator uses them too).
#include "engine/backend/backend.h"

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

}  // namespace zt
