// The backend.cpp entries (device count, backend choice) without spdlog, for the
// tools/gpu_check.sh build.
#include <algorithm>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/device.h"

namespace zt {

int cuda_device_count() { return cuda::visible_device_count(); }

std::unique_ptr<Backend> make_backend(DeviceChoice device, int threads, int local_rank) {
  if (device == DeviceChoice::Cuda) return cuda::make_cuda_backend(local_rank % std::max(1, cuda_device_count()));
  return make_cpu_backend(threads);
}

}  // namespace zt
