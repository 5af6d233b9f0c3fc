// Backend selection for run.device.
#include "engine/backend/backend.h"

#include "engine/core/log.h"
#include "engine/core/status.h"

#include "engine/backend/cuda_plugin.h"

namespace zt {

int cuda_device_count() {
#ifdef ZTRAIN_HAVE_CUDA
  return cuda_plugin::device_count();
#else
  return 0;
#endif
}

std::unique_ptr<Backend> make_backend(DeviceChoice device, int threads, int local_rank) {
  // Asking for a GPU loads the CUDA plugin and its libraries (cuBLASLt alone maps 600 MiB, ~150 MiB
  // resident): a run on the CPU never asks.
  const int gpus = device == DeviceChoice::Cpu ? 0 : cuda_device_count();
  if (device == DeviceChoice::Cuda) {
#ifdef ZTRAIN_HAVE_CUDA
    if (gpus == 0) {
      const std::string why = cuda_plugin::why();
      // a ZTRAIN_CUDA_PLUGIN that is not a ztrain plugin is the variable's fault, not the machine's
      if (cuda_plugin::from_environment() && !why.empty()) user_error("run.device = \"cuda\": {}", why);
      user_error("run.device = \"cuda\" but no CUDA device is visible{}", why.empty() ? "" : " (" + why + ")");
    }
    auto backend = cuda_plugin::make_backend(local_rank % gpus);
    spdlog::info("backend: {}", backend->name());
    return backend;
#else
    user_error("run.device = \"cuda\" but this ztrain was built without CUDA (no nvcc at configure time)");
#endif
  }
  // "auto" stays on the CPU until the CUDA backend has passed tools/gpu_check.sh on real hardware.
  if (device == DeviceChoice::Auto && gpus > 0)
    spdlog::warn("device = auto: {} GPU(s) visible, but the CUDA backend has not been validated on a GPU "
                 "yet; running on the CPU (set run.device = \"cuda\" to use it)", gpus);
  auto backend = make_cpu_backend(threads);
  spdlog::info("backend: {}", backend->name());
  return backend;
}

}  // namespace zt
