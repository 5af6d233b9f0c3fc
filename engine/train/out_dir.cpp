// Claiming [run] out_dir (see out_dir.h).
#include "engine/train/out_dir.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "engine/core/log.h"
#include "engine/core/status.h"

namespace zt {

int claim_out_dir(const RunSpec& spec) {
  namespace fs = std::filesystem;
  const fs::path dir(spec.run.out_dir);
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    user_error("{}: [run] out_dir = \"{}\" is a file, not a directory", spec.source, dir.string());
  fs::create_directories(dir, ec);
  if (ec) user_error("{}: [run] out_dir = \"{}\": cannot create it: {}", spec.source, dir.string(), ec.message());
  const fs::path resolved = dir / "config.resolved.toml";
  if (fs::exists(resolved, ec) && fs::equivalent(resolved, spec.source, ec))
    user_error("{}: this is the run's own config.resolved.toml in [run] out_dir, which the run rewrites; copy it "
               "elsewhere first, or pass --set run.out_dir=ANOTHER_DIR", spec.source);
  const std::string lock = (dir / ".lock").string();
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) user_error("{}: cannot create: {}", lock, std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {0};
    (void)!::pread(fd, pid, sizeof pid - 1, 0);
    ::close(fd);
    user_error("{}: [run] out_dir = \"{}\" is in use by another ztrain run (pid {}); wait for it to end, or "
               "choose another out_dir", spec.source, dir.string(), std::string(pid).empty() ? "unknown" : pid);
  }
  const std::string me = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size()))
    spdlog::warn("{}: cannot record this run's pid", lock);
  return fd;
}

}  // namespace zt
