// The entry points of libztrain_cuda.so, the CUDA backend as a plugin: the ztrain executables
// load it (dlopen) only when a CUDA device is wanted, so CPU runs never pay for loading cuBLASLt
// (about 0.4 s per process start). NCCL is a plugin of its own (engine/comm/nccl_plugin.cpp).
// C linkage; errors come back as messages.
#include <cstdio>
#include <cstring>
#include <exception>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/device.h"

namespace {
void set_error(char* err, size_t len, const char* what) {
  if (err && len) std::snprintf(err, len, "%s", what);
}
}  // namespace

extern "C" {

int zt_cuda_device_count() { return zt::cuda::visible_device_count(); }

zt::Backend* zt_cuda_make_backend(int device, char* err, size_t len) {
  try {
    return zt::cuda::make_cuda_backend(device).release();
  } catch (const std::exception& e) {
    set_error(err, len, e.what());
    return nullptr;
  }
}

}  // extern "C"
