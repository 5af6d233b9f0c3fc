// One rank's file on the NVMe tier ([offload] nvme_path): fixed-size regions of fp32 states read
// and written in blocks, with O_DIRECT where the filesystem supports it (page-cache-free I/O, as
// DeepSpeed's and every ZeRO-Infinity implementation do; tmpfs does not support it: buffered
// I/O then, with a warning). Errors name the file and the system's reason (RuntimeFailure: a
// failing SSD mid-run is exit 1; the last complete checkpoint is untouched).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace zt {

// The start-up checks of an nvme_path for `bytes` of states (one message, exit 2 through
// UserError): the directory exists and is writable, and its filesystem has room.
void check_nvme_path(const std::string& dir, uint64_t bytes);

class NvmeFile {
 public:
  static constexpr size_t kAlign = 4096;  // O_DIRECT: offsets, sizes and buffers aligned to this
  // Creates DIR/NAME with `bytes` allocated on disk, and unlinks it at once (the space is freed
  // when the process ends, however it ends).
  NvmeFile(const std::string& dir, const std::string& name, uint64_t bytes);
  ~NvmeFile();
  NvmeFile(const NvmeFile&) = delete;
  NvmeFile& operator=(const NvmeFile&) = delete;

  bool direct() const { return direct_; }
  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  // The test hook faults().nvme_write_fails = N (engine/core/faults.h): the N-th write of the process fails with EIO
  // (RuntimeFailure naming the file). Called by every write path.
  void check_injected_write_failure(uint64_t off, size_t bytes) const;
  // Aligned transfers (offset, size and buffer multiples of kAlign when direct()).
  void read(uint64_t off, void* dst, size_t bytes) const;
  void write(uint64_t off, const void* src, size_t bytes);
  // Any range (a checkpoint's runs): through an aligned bounce buffer.
  void read_any(uint64_t off, void* dst, size_t bytes) const;
  void write_any(uint64_t off, const void* src, size_t bytes);

 private:
  std::string path_;
  int fd_ = -1;
  bool direct_ = false;
};

}  // namespace zt
