// DirLock (see dir_lock.h).
#include "engine/core/dir_lock.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "engine/core/log.h"
#include "engine/core/status.h"

namespace zt {

DirLock::DirLock(const std::string& dir, const std::string& name, const std::string& what,
                 const std::string& remedy) {
  const std::string lock = (std::filesystem::path(dir) / name).string();
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) user_error("{}: cannot create {}: {}", what, lock, std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) {
      // a filesystem without locks (some NFS or CIFS mounts): go on unprotected, and say so
      spdlog::warn("{}: cannot lock {} ({}): a second run there would not be stopped", what, lock,
                   std::strerror(errno));
      fd_ = fd;
      return;
    }
    char holder[128] = {0};
    (void)!::pread(fd, holder, sizeof holder - 1, 0);
    ::close(fd);
    user_error("{} is in use by another ztrain run ({}); {}", what,
               holder[0] ? std::string(holder) : std::string("holder unknown"), remedy);
  }
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::string me = fmt::format("pid {} on {}", ::getpid(), host);
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size()))
    spdlog::warn("{}: cannot record this run's pid", lock);
  fd_ = fd;
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

}  // namespace zt
