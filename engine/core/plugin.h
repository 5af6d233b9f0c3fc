// Shared libraries loaded on first use (dlopen): the CUDA backend and the NCCL communicators are
// plugins next to the executable, so CPU runs never load cuBLASLt, NCCL or the CUDA runtime.
#pragma once
#include <string>

namespace zt {

struct Plugin {
  void* handle = nullptr;
  std::string error;   // why it is unavailable; "" when loaded
  bool user_given = false;  // the path came from the environment variable: a bad one is bad input
  std::string origin;  // "ZTRAIN_CUDA_PLUGIN=/path/lib.so", or the path beside the executable
  // The entry point `name`, or null (error then names the file and says it is not a ztrain
  // plugin, or not one of this build).
  void* symbol(const char* name);
};

// Loads `file` from the executable's directory, or from the path in the environment variable
// `env_var` when it is set. Loaded once per process; later calls return the same Plugin.
Plugin& load_plugin(const std::string& file, const char* env_var);

}  // namespace zt
