// The NVMe tier's file (see nvme_file.h).
#include "engine/offload/nvme_file.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "engine/core/faults.h"
#include "engine/core/status.h"

namespace zt {

namespace {
struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
std::unique_ptr<char, AlignedFree> aligned_buffer(size_t bytes) {
  return std::unique_ptr<char, AlignedFree>(static_cast<char*>(std::aligned_alloc(NvmeFile::kAlign, bytes)));
}
uint64_t align_down(uint64_t x) { return x / NvmeFile::kAlign * NvmeFile::kAlign; }
uint64_t align_up(uint64_t x) { return (x + NvmeFile::kAlign - 1) / NvmeFile::kAlign * NvmeFile::kAlign; }

// faults().nvme_write_fails = N: the N-th write of this process fails with EIO.
bool injected_write_failure() {
  static long count = 0;
  return faults().nvme_write_fails > 0 && ++count == faults().nvme_write_fails;
}
}  // namespace

void check_nvme_path(const std::string& dir, uint64_t bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    user_error("[offload] nvme_path = \"{}\": not an existing directory (create it on a local SSD)", dir);
  if (::access(dir.c_str(), W_OK) != 0)
    user_error("[offload] nvme_path = \"{}\": not writable by this user ({})", dir, std::strerror(errno));
  struct statvfs st {};
  // f_blocks 0: a filesystem that reports no size (ramfs) cannot be checked
  if (::statvfs(dir.c_str(), &st) == 0 && st.f_blocks > 0) {
    const uint64_t free_bytes = uint64_t(st.f_bavail) * uint64_t(st.f_frsize);
    if (free_bytes < bytes)
      user_error("[offload] nvme_path = \"{}\": the offloaded states need {:.3f} GiB on this machine ({} bytes), the "
                 "filesystem has {:.3f} GiB free ({} bytes): free some space, point nvme_path at a larger disk, or "
                 "spread the states over more ranks (ZeRO)",
                 dir, bytes / 1073741824.0, bytes, free_bytes / 1073741824.0, free_bytes);
  }
}

NvmeFile::NvmeFile(const std::string& dir, const std::string& name, uint64_t bytes)
    : path_((std::filesystem::path(dir) / name).string()) {
  ::unlink(path_.c_str());  // a leftover of a crashed run
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  direct_ = fd_ >= 0;
  if (fd_ < 0 && errno == EINVAL) {  // tmpfs and some network filesystems: no O_DIRECT
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);  // the caller warns (direct() false)
  }
  if (fd_ < 0) throw RuntimeFailure(fmt::format("{}: cannot create ({})", path_, std::strerror(errno)));
  // Unlinked at once: the file lives as long as the descriptor, so no run (not even one killed
  // with -9) leaves its states behind on the SSD.
  ::unlink(path_.c_str());
  // Room for every state now, not a full disk at step 40.
  const int rc = ::posix_fallocate(fd_, 0, off_t(align_up(bytes)));
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
    ::close(fd_);
    throw RuntimeFailure(fmt::format("{}: cannot allocate {:.3f} GiB ({})", path_, bytes / 1073741824.0,
                                     std::strerror(rc)));
  }
  if (rc != 0 && ::ftruncate(fd_, off_t(align_up(bytes))) != 0) {
    const int err = errno;
    ::close(fd_);
    throw RuntimeFailure(fmt::format("{}: cannot size to {} bytes ({})", path_, bytes, std::strerror(err)));
  }
}

NvmeFile::~NvmeFile() {
  if (fd_ >= 0) ::close(fd_);
}

void NvmeFile::read(uint64_t off, void* dst, size_t bytes) const {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, p, bytes, off_t(off));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw RuntimeFailure(fmt::format("{}: read of {} bytes at {} failed ({})", path_, bytes, off,
                                       n == 0 ? "end of file" : std::strerror(errno)));
    p += n, off += uint64_t(n), bytes -= size_t(n);
  }
}

void NvmeFile::check_injected_write_failure(uint64_t off, size_t bytes) const {
  if (injected_write_failure())
    throw RuntimeFailure(fmt::format("{}: write of {} bytes at {} failed ({})", path_, bytes, off, std::strerror(EIO)));
}

void NvmeFile::write(uint64_t off, const void* src, size_t bytes) {
  const char* p = static_cast<const char*>(src);
  check_injected_write_failure(off, bytes);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_, p, bytes, off_t(off));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw RuntimeFailure(fmt::format("{}: write of {} bytes at {} failed ({})", path_, bytes, off,
                                       std::strerror(n == 0 ? EIO : errno)));
    p += n, off += uint64_t(n), bytes -= size_t(n);
  }
}

void NvmeFile::read_any(uint64_t off, void* dst, size_t bytes) const {
  if (bytes == 0) return;
  const uint64_t lo = align_down(off), hi = align_up(off + bytes);
  auto buf = aligned_buffer(size_t(hi - lo));
  read(lo, buf.get(), size_t(hi - lo));
  std::memcpy(dst, buf.get() + (off - lo), bytes);
}

void NvmeFile::write_any(uint64_t off, const void* src, size_t bytes) {
  if (bytes == 0) return;
  const uint64_t lo = align_down(off), hi = align_up(off + bytes);
  auto buf = aligned_buffer(size_t(hi - lo));
  read(lo, buf.get(), size_t(hi - lo));  // read-modify-write of the aligned blocks
  std::memcpy(buf.get() + (off - lo), src, bytes);
  write(lo, buf.get(), size_t(hi - lo));
}

}  // namespace zt
