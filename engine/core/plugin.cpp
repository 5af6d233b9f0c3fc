// dlopen of ztrain's plugins (see plugin.h).
#include "engine/core/plugin.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

namespace zt {

void* Plugin::symbol(const char* name) {
  if (!handle) return nullptr;
  void* s = dlsym(handle, name);
  if (!s && error.empty())
    error = origin + (user_given ? ": not a ztrain plugin (no entry point " : ": not a plugin of this ztrain build (no entry point ") +
            name + ")";
  return s;
}

Plugin& load_plugin(const std::string& file, const char* env_var) {
  static std::mutex mu;
  static std::map<std::string, Plugin> loaded;
  std::lock_guard lock(mu);
  auto [it, fresh] = loaded.try_emplace(file);
  Plugin& p = it->second;
  if (!fresh) return p;
  std::string path;
  if (const char* env = std::getenv(env_var)) {
    path = env;
    p.user_given = true;
    p.origin = std::string(env_var) + "=" + path;
  } else {
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    path = ec ? file : (exe.parent_path() / file).string();
    p.origin = path;
  }
  p.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!p.handle) {
    const char* e = dlerror();
    // a plugin found but whose libraries are missing (no driver) is not the user's doing; a
    // variable naming a file that does not load is
    p.error = p.user_given ? p.origin + ": cannot load: " + (e ? e : "unknown error") : (e ? e : "cannot load " + path);
  }
  return p;
}

}  // namespace zt
