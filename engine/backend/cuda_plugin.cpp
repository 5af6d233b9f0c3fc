// The CUDA backend plugin's entry points (see cuda_plugin.h).
#include "engine/backend/cuda_plugin.h"

#include "engine/backend/backend.h"
#include "engine/core/plugin.h"
#include "engine/core/status.h"

namespace zt::cuda_plugin {

namespace {
Plugin& plugin() { return load_plugin("libztrain_cuda.so", "ZTRAIN_CUDA_PLUGIN"); }
}  // namespace

int device_count() {
  Plugin& p = plugin();
  auto count = reinterpret_cast<int (*)()>(p.symbol("zt_cuda_device_count"));
  return count ? count() : 0;
}

std::string why() { return plugin().error; }

bool from_environment() { return plugin().user_given; }

std::unique_ptr<Backend> make_backend(int device) {
  Plugin& p = plugin();
  auto make = reinterpret_cast<Backend* (*)(int, char*, size_t)>(p.symbol("zt_cuda_make_backend"));
  if (!make) throw RuntimeFailure("CUDA backend plugin unavailable: " + p.error);
  char err[512] = {0};
  Backend* b = make(device, err, sizeof err);
  if (!b) throw RuntimeFailure(std::string("CUDA backend: ") + err);
  return std::unique_ptr<Backend>(b);
}

}  // namespace zt::cuda_plugin
