// dlopen of the CUDA backend plugin (see cuda_plugin.h).
#include "engine/backend/cuda_plugin.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "engine/backend/backend.h"
#include "engine/core/status.h"
#include "engine/dist/comm.h"

namespace zt::cuda_plugin {

namespace {

struct Plugin {
  void* handle = nullptr;
  std::string error;
  int (*device_count)() = nullptr;
  Backend* (*make_backend)(int, char*, size_t) = nullptr;
  Comm* (*make_nccl_comm)(void*, const char*, double, void*, char*, size_t) = nullptr;
};

Plugin& plugin() {
  static Plugin p;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string path;
    if (const char* env = std::getenv("ZTRAIN_CUDA_PLUGIN")) {
      path = env;
    } else {
      std::error_code ec;
      const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
      path = ec ? "libztrain_cuda.so" : (exe.parent_path() / "libztrain_cuda.so").string();
    }
    p.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!p.handle) {
      const char* e = dlerror();
      p.error = e ? e : ("cannot load " + path);
      return;
    }
    p.device_count = reinterpret_cast<int (*)()>(dlsym(p.handle, "zt_cuda_device_count"));
    p.make_backend = reinterpret_cast<Backend* (*)(int, char*, size_t)>(dlsym(p.handle, "zt_cuda_make_backend"));
    p.make_nccl_comm = reinterpret_cast<Comm* (*)(void*, const char*, double, void*, char*, size_t)>(
        dlsym(p.handle, "zt_cuda_make_nccl_comm"));
    if (!p.device_count || !p.make_backend || !p.make_nccl_comm) p.error = path + ": missing entry points";
  });
  return p;
}

}  // namespace

int device_count() {
  Plugin& p = plugin();
  return p.error.empty() ? p.device_count() : 0;
}

std::string why() { return plugin().error; }

std::unique_ptr<Backend> make_backend(int device) {
  Plugin& p = plugin();
  if (!p.error.empty()) throw RuntimeFailure("CUDA backend plugin unavailable: " + p.error);
  char err[512] = {0};
  Backend* b = p.make_backend(device, err, sizeof err);
  if (!b) throw RuntimeFailure(std::string("CUDA backend: ") + err);
  return std::unique_ptr<Backend>(b);
}

std::unique_ptr<Comm> make_nccl_comm(void* mpi_comm, const std::string& name, double timeout_s, void* stream) {
  Plugin& p = plugin();
  if (!p.error.empty()) throw RuntimeFailure("CUDA backend plugin unavailable: " + p.error);
  char err[512] = {0};
  Comm* c = p.make_nccl_comm(mpi_comm, name.c_str(), timeout_s, stream, err, sizeof err);
  if (!c) throw RuntimeFailure(std::string("NCCL communicator: ") + err);
  return std::unique_ptr<Comm>(c);
}

}  // namespace zt::cuda_plugin
