// One run at a time in a directory: an exclusive flock on DIR/NAME, which holds the holder's pid
// and host. The lock lasts while the DirLock lives (and dies with the process: a crashed or killed
// run never leaves it held).
#pragma once
#include <string>

namespace zt {

class DirLock {
 public:
  DirLock() = default;
  // Locks `dir`/`name` (dir must exist). UserError when another process holds it, naming `what`
  // (e.g. `run.toml: [run] out_dir = "runs/a"`), the holder's pid and host, and `remedy`.
  DirLock(const std::string& dir, const std::string& name, const std::string& what, const std::string& remedy);
  ~DirLock();
  DirLock(DirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  DirLock& operator=(DirLock&& o) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace zt
