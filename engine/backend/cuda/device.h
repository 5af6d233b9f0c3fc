// CUDA device discovery, callable from plain C++ (no CUDA headers leak out of this file).
#pragma once
#include <memory>

namespace zt {
class Backend;
}

namespace zt::cuda {
// The CUDA backend on `device` (cuda_backend.cu). Throws std::runtime_error on CUDA failures.
std::unique_ptr<Backend> make_cuda_backend(int device);
// Number of CUDA devices the driver exposes; 0 when no driver or GPU is present (never throws).
int visible_device_count();
}  // namespace zt::cuda
