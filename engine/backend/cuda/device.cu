// CUDA device discovery. Compiled by nvcc whenever the toolkit exists (CI has nvcc, no GPU).
#include <cuda_runtime.h>

#include "engine/backend/cuda/device.h"

namespace zt::cuda {

int visible_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

}  // namespace zt::cuda
