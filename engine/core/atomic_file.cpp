// write_file_atomic, replace_dir_atomic and fsync_path (see atomic_file.h).
#include "engine/core/atomic_file.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2 (glibc >= 2.28)
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "engine/core/status.h"

namespace zt {

void write_file_atomic(const std::string& path, std::string_view bytes, bool durable) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw RuntimeFailure(fmt::format("{}: cannot create: {}", tmp, std::strerror(errno)));
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0 &&
            (!durable || ::fsync(fileno(f)) == 0);
  int err = errno;
  if (std::fclose(f) != 0 && ok) ok = false, err = errno;
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) ok = false, err = errno;
  if (!ok) {
    std::remove(tmp.c_str());
    throw RuntimeFailure(fmt::format("{}: cannot write: {}", path, std::strerror(err)));
  }
  if (durable) fsync_path(std::filesystem::path(path).parent_path().empty()
                              ? "." : std::filesystem::path(path).parent_path().string());
}

void replace_dir_atomic(const std::string& built, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::rename(built, dir, ec);
    if (ec) throw RuntimeFailure(fmt::format("{}: cannot rename {} to it: {}", dir, built, ec.message()));
    return;
  }
  std::string previous = built;  // after the exchange, `built` holds the previous directory
  if (::renameat2(AT_FDCWD, built.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
    previous = fmt::format("{}.previous-{}", dir, ::getpid());
    fs::rename(dir, previous, ec);
    if (ec) throw RuntimeFailure(fmt::format("{}: cannot move it aside: {}", dir, ec.message()));
    fs::rename(built, dir, ec);
    if (ec) {
      const std::string why = ec.message();
      fs::rename(previous, dir, ec);
      throw RuntimeFailure(fmt::format("{}: cannot rename {} to it: {}", dir, built, why));
    }
  }
  const fs::path parent = fs::path(dir).parent_path();
  fsync_path(parent.empty() ? "." : parent.string());  // the swap itself, durable
  fs::remove_all(previous, ec);
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw RuntimeFailure(fmt::format("{}: cannot open for fsync: {}", path, std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw RuntimeFailure(fmt::format("{}: fsync failed: {}", path, std::strerror(err)));
}

}  // namespace zt
