// The CUDA backend as a plugin (libztrain_cuda.so next to the executable, or the path in
// ZTRAIN_CUDA_PLUGIN), loaded on first use. Without the plugin or a driver, device_count() is 0
// and why() says what was missing.
#pragma once
#include <memory>
#include <string>

namespace zt {
class Backend;
}  // namespace zt

namespace zt::cuda_plugin {

int device_count();
std::string why();  // why the plugin is unavailable ("" when it loaded), naming the file
bool from_environment();  // its path came from ZTRAIN_CUDA_PLUGIN
std::unique_ptr<Backend> make_backend(int device);

}  // namespace zt::cuda_plugin
