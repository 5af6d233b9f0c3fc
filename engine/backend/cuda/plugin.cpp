// The entry points of libztrain_cuda.so, the CUDA backend as a plugin: the ztrain executables
// load it (dlopen) only when a CUDA device is wanted, so CPU runs never pay for loading cuBLASLt
// and NCCL (about 0.4 s per process start). C linkage; errors come back as messages.
#include <cstdio>
#include <cstring>
#include <exception>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/device.h"
#include "engine/dist/comm.h"
#ifdef ZTRAIN_HAVE_NCCL
#include <mpi.h>

#include "engine/dist/comm_nccl.h"
#endif

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

zt::Comm* zt_cuda_make_nccl_comm(void* mpi_comm, const char* name, double timeout_s, void* stream, char* err,
                                 size_t len) {
#ifdef ZTRAIN_HAVE_NCCL
  try {
    return zt::make_nccl_comm(static_cast<MPI_Comm>(mpi_comm), name, timeout_s, stream).release();
  } catch (const std::exception& e) {
    set_error(err, len, e.what());
    return nullptr;
  }
#else
  set_error(err, len, "this ztrain was built without NCCL");
  return nullptr;
#endif
}

}  // extern "C"
