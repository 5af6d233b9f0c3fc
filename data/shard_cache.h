// The local SSD cache of remote shards, shared by every rank of a machine.
//   cache_dir/<dataset id>/shard_NNNNN.ztok  (dataset id: hash of the dataset URI)
// A download goes to a temporary file, is checked against the manifest's size and CRC-32, and is
// renamed into place; an exclusive lock on `<shard>.lock` makes it happen once per machine (the
// other ranks wait for it and then read the file). Readers hold a shared lock on the shard file
// while it is open; eviction removes least-recently-used shards (file mtime, touched on open) that
// nobody holds, to stay under the cache limit. A cached file that fails its check is deleted and
// fetched again.
#pragma once
#include <cstdint>
#include <memory>
#include <map>
#include <mutex>
#include <string>

#include "data/manifest.h"
#include "data/shard.h"
#include "data/store/object_store.h"

namespace zt::data {

// A mapped shard plus the shared lock that pins it in the cache.
struct OpenShard {
  std::unique_ptr<ShardView> view;
  int pin_fd = -1;
  bool verified_now = false;  // checked against the manifest by this open (first use in this process)
  ~OpenShard();
};

class ShardCache {
 public:
  ShardCache(ObjectStore& store, const Manifest& manifest, const std::string& dataset_uri,
             const std::string& cache_dir, uint64_t limit_bytes);
  // The shard, downloaded if needed, verified, mapped and pinned until the result is dropped.
  std::unique_ptr<OpenShard> open(size_t shard);
  // Downloads the shard into the cache if absent (no pin); safe to call from another thread.
  // best_effort (prefetch): returns false instead of waiting when the cache has no room.
  bool ensure(size_t shard, bool best_effort = false);
  const std::string& dir() const { return dir_; }

 private:
  std::string path_of(size_t shard) const;
  bool verify(size_t shard, const std::string& path) const;  // size + CRC-32
  // Reserves `bytes` for a download into the cache: under the machine-wide cache lock, evicts
  // unpinned shards until the cached shards plus every download in progress fit with it, then
  // creates the download's file, named "<shard>.tmp.<pid>.<bytes>" so that it counts at its full
  // size until it is renamed (concurrent downloads: the prefetcher, other ranks, never overfill
  // the cache together). Returns that name, or "" when pinned shards leave no room.
  std::string reserve(const std::string& path, uint64_t bytes);
  bool make_room(uint64_t bytes);  // with the cache lock held

  ObjectStore& store_;
  const Manifest& manifest_;
  std::string root_, dir_;
  uint64_t limit_;
  std::mutex mu_;
  // Shard files this process has verified, by inode: a file replaced since (rename) has another
  // inode and is verified again; reopening an unchanged one skips the CRC pass.
  std::map<size_t, uint64_t> verified_inode_;
  // Shard files this process downloaded and checked, by inode, until their first open (which then
  // skips the CRC pass but still reports verified_now: the ids are checked at first use).
  std::map<size_t, uint64_t> downloaded_inode_;
};

}  // namespace zt::data
