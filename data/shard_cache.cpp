// ShardCache (see shard_cache.h).
#include "data/shard_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "engine/core/rng.h"
#include "engine/core/status.h"

namespace zt::data {

namespace fs = std::filesystem;

OpenShard::~OpenShard() {
  view.reset();
  if (pin_fd >= 0) ::close(pin_fd);  // releases the shared lock
}

ShardCache::ShardCache(ObjectStore& store, const Manifest& manifest, const std::string& uri,
                       const std::string& cache_dir, uint64_t limit)
    : store_(store), manifest_(manifest), root_(cache_dir), limit_(limit) {
  dir_ = (fs::path(cache_dir) / fmt::format("{:016x}", name_hash(uri))).string();
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) user_error("[data] cache_dir {}: cannot create: {}", dir_, ec.message());
}

std::string ShardCache::path_of(size_t shard) const {
  return (fs::path(dir_) / manifest_.shards[shard].file).string();
}

bool ShardCache::verify(size_t shard, const std::string& path) const {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec || size != manifest_.shards[shard].bytes) return false;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  void* m = size ? ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
  ::close(fd);
  if (m == MAP_FAILED) return false;
  const bool ok = crc32_of(m, size) == manifest_.shards[shard].crc32;
  if (m) ::munmap(m, size);
  return ok;
}

namespace {
// "<shard>.tmp.<pid>.<bytes>": a download in progress, reserved at its full size.
bool parse_download(const std::string& name, pid_t* pid, uint64_t* bytes) {
  const size_t at = name.find(".ztok.tmp.");
  if (at == std::string::npos) return false;
  unsigned long long p = 0, b = 0;
  if (std::sscanf(name.c_str() + at + 10, "%llu.%llu", &p, &b) != 2) return false;
  *pid = pid_t(p);
  *bytes = b;
  return true;
}
}  // namespace

bool ShardCache::make_room(uint64_t bytes) {
  // Every cached shard under cache_dir (all datasets share the limit), oldest use first, and
  // every download in progress at its full size (one whose process is gone is removed).
  struct Entry {
    fs::path path;
    uint64_t size;
    fs::file_time_type used;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root_, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    pid_t pid = 0;
    uint64_t reserved = 0;
    if (parse_download(it->path().filename().string(), &pid, &reserved)) {
      if (::kill(pid, 0) != 0 && errno == ESRCH) fs::remove(it->path(), ec);  // left by a dead process
      else total += reserved;
      continue;
    }
    if (it->path().extension() != ".ztok") continue;
    const uint64_t size = it->file_size(ec);
    entries.push_back({it->path(), size, it->last_write_time(ec)});
    total += size;
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& e : entries) {
    if (total + bytes <= limit_) return true;
    const int fd = ::open(e.path.c_str(), O_RDONLY);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {  // nobody holds it: evict
      fs::remove(e.path, ec);
      total -= e.size;
    }
    ::close(fd);
  }
  return total + bytes <= limit_;
}

std::string ShardCache::reserve(const std::string& path, uint64_t bytes) {
  const std::string lock_path = (fs::path(root_) / ".cache.lock").string();
  const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT, 0644);
  if (lock < 0) throw RuntimeFailure(fmt::format("{}: cannot create: {}", lock_path, std::strerror(errno)));
  ::flock(lock, LOCK_EX);
  std::string tmp;
  try {
    if (make_room(bytes)) {
      tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), bytes);
      const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) throw RuntimeFailure(fmt::format("{}: cannot create: {}", tmp, std::strerror(errno)));
      ::close(fd);
    }
  } catch (...) {
    ::close(lock);
    throw;
  }
  ::close(lock);
  return tmp;
}

bool ShardCache::ensure(size_t shard, bool best_effort) {
  const std::string path = path_of(shard);
  if (fs::exists(path)) return true;  // verified when opened
  const std::string lock_path = path + ".lock";
  const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT, 0644);
  if (lock < 0) throw RuntimeFailure(fmt::format("{}: cannot create: {}", lock_path, std::strerror(errno)));
  ::flock(lock, LOCK_EX);  // one download per machine: the others wait here
  try {
    if (!fs::exists(path)) {
      // Shards pinned by readers (this machine's ranks) are released as training moves on:
      // wait for room for a while before calling the limit too small.
      const uint64_t bytes = manifest_.shards[shard].bytes;
      std::string tmp;
      for (int tries = 0; (tmp = reserve(path, bytes)).empty(); ++tries) {
        if (best_effort) {
          ::close(lock);
          return false;
        }
        if (tries >= 1200)
          throw RuntimeFailure(fmt::format("[data] cache_limit {} bytes: the shards in use leave no room for "
                                           "{} more bytes after 60 s; raise cache_limit", limit_, bytes));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      try {
        store_.download(manifest_.shards[shard].file, tmp);
      } catch (...) {
        std::error_code ec;
        fs::remove(tmp, ec);  // the reservation goes with it
        throw;
      }
      if (!verify(shard, tmp)) {
        fs::remove(tmp);
        throw RuntimeFailure(fmt::format("{}: downloaded object does not match the manifest's size/CRC-32",
                                         store_.describe(manifest_.shards[shard].file)));
      }
      fs::rename(tmp, path);
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0) {  // checked just now: its first open need not read it again
        std::lock_guard g(mu_);
        downloaded_inode_[shard] = uint64_t(st.st_ino);
      }
    }
  } catch (...) {
    ::close(lock);
    throw;
  }
  ::close(lock);
  return true;
}

std::unique_ptr<OpenShard> ShardCache::open(size_t shard) {
  const std::string path = path_of(shard);
  for (int attempt = 0; attempt < 3; ++attempt) {
    ensure(shard);
    auto out = std::make_unique<OpenShard>();
    out->pin_fd = ::open(path.c_str(), O_RDONLY);
    if (out->pin_fd < 0) continue;  // evicted between ensure and open: fetch again
    ::flock(out->pin_fd, LOCK_SH);
    if (!fs::exists(path)) continue;
    struct stat st {};
    ::fstat(out->pin_fd, &st);
    {
      std::lock_guard g(mu_);
      auto it = verified_inode_.find(shard);
      if (it != verified_inode_.end() && it->second == uint64_t(st.st_ino)) {
        ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
        out->view = std::make_unique<ShardView>(path);
        return out;
      }
    }
    bool checked = false;  // downloaded and checked by this process, not opened yet
    {
      std::lock_guard g(mu_);
      auto it = downloaded_inode_.find(shard);
      checked = it != downloaded_inode_.end() && it->second == uint64_t(st.st_ino);
      if (it != downloaded_inode_.end()) downloaded_inode_.erase(it);
    }
    if (!checked && !verify(shard, path)) {  // corrupt or truncated cache file: replace it
      const std::string lock_path = path + ".lock";
      const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT, 0644);
      ::flock(lock, LOCK_EX);
      if (fs::exists(path) && !verify(shard, path)) fs::remove(path);
      ::close(lock);
      continue;
    }
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // mark as recently used
    out->view = std::make_unique<ShardView>(path);
    out->verified_now = true;
    std::lock_guard g(mu_);
    verified_inode_[shard] = uint64_t(st.st_ino);
    return out;
  }
  throw RuntimeFailure(fmt::format("{}: could not obtain a valid copy after 3 tries",
                                   store_.describe(manifest_.shards[shard].file)));
}

}  // namespace zt::data
