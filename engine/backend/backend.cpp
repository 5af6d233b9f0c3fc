// Backend selection for run.device.
#include "engine/backend/backend.h"

#include "engine/core/log.h"
#include "engine/core/status.h"

#ifdef ZTRAIN_HAVE_CUDA
#include "engine/backend/cuda/device.h"
#endif

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

int cuda_device_count() {
#ifdef ZTRAIN_HAVE_CUDA
  return cuda::visible_device_count();
#else
  return 0;
#endif
}

std::unique_ptr<Backend> make_backend(const std::string& device, int threads) {
  const int gpus = cuda_device_count();
  if (device == "cuda") {
    if (gpus == 0) user_error("run.device = \"cuda\" but no CUDA device is visible (built with CUDA: {})",
#ifdef ZTRAIN_HAVE_CUDA
                              "yes"
#else
                              "no"
#endif
    );
    // The CUDA op implementations are the CUDA-backend issue; until they land, say so plainly.
    throw RuntimeFailure("run.device = \"cuda\": the CUDA backend's ops are not implemented yet; "
                         "use device = \"cpu\"");
  }
  if (device == "auto" && gpus > 0)
    spdlog::warn("device = auto: {} GPU(s) visible, but the CUDA backend's ops are not implemented "
                 "yet; running on the CPU backend", gpus);
  auto backend = make_cpu_backend(threads);
  spdlog::info("backend: {}", backend->name());
  return backend;
}

}  // namespace zt
