// CUDA device discovery, callable from plain C++ (no CUDA headers leak out of this file).
#pragma once

namespace zt::cuda {
// Number of CUDA devices the driver exposes; 0 when no driver or GPU is present (never throws).
int visible_device_count();
}  // namespace zt::cuda
