// Loading the CUDA backend plugin (libztrain_cuda.so, next to the executable, or the path in
// ZTRAIN_CUDA_PLUGIN) on first use. Without the plugin or a driver, device_count() is 0 and
// why() says what was missing.
#pragma once
#include <memory>
#include <string>

namespace zt {
class Backend;
class Comm;
}  // namespace zt

namespace zt::cuda_plugin {

int device_count();
std::string why();  // why the plugin is unavailable ("" when it loaded)
std::unique_ptr<Backend> make_backend(int device);
// An NCCL communicator over the ranks of `mpi_comm` (an MPI_Comm), on `stream`.
std::unique_ptr<Comm> make_nccl_comm(void* mpi_comm, const std::string& name, double timeout_s, void* stream);

}  // namespace zt::cuda_plugin
