// Reads and writes of the NVMe tier in flight while the CPU works: io_uring (liburing) where the
// build has it and the kernel allows it (one ring per stream, one submission for a block's
// requests, completions reaped as they are needed); otherwise a thread per request with
// pread/pwrite (containers whose seccomp profile blocks io_uring, builds without liburing such as
// the GPU check's). Both give the same bytes; io_uring needs no thread per request.
#pragma once
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "engine/offload/nvme_file.h"

namespace zt {

class AsyncIo {
 public:
  using Ticket = int64_t;
  // `depth`: requests in flight at most.
  explicit AsyncIo(int depth);
  ~AsyncIo();  // waits for every request
  AsyncIo(const AsyncIo&) = delete;
  AsyncIo& operator=(const AsyncIo&) = delete;

  bool uses_io_uring() const;
  // Whether this build and kernel run io_uring (probed once), for the start-up log line.
  static bool io_uring_available();
  // Aligned transfers as NvmeFile::read / write; the buffer must live until wait().
  Ticket read(const NvmeFile& f, uint64_t off, void* dst, size_t bytes);
  Ticket write(NvmeFile& f, uint64_t off, const void* src, size_t bytes);
  // Blocks until the request completed; RuntimeFailure naming the file if it failed.
  void wait(Ticket t);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zt
