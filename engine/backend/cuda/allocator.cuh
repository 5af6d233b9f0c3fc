// The caching device allocator: freed blocks go to a free list by size and are reused, so the
// steady-state training step makes no cudaMalloc / cudaFree. Knows allocated, reserved and peak
// bytes per tag; on exhaustion it releases its cache, retries, and then fails with a message that
// shows the figures and the largest consumers instead of a bare CUDA error.
#pragma once
#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/backend/backend.h"

namespace zt::cuda {

class CachingAllocator {
 public:
  ~CachingAllocator();
  void* alloc(size_t bytes, MemTag tag);
  void free(void* p);
  MemoryStats stats() const;
  size_t reserved() const { return reserved_; }  // bytes obtained from cudaMalloc
  void set_limit(size_t bytes) { limit_ = bytes; }  // reserved bytes never pass it (0: none)
  size_t limit() const { return limit_; }

 private:
  static size_t round(size_t bytes);  // size classes: 512 B steps below 1 MiB, 2 MiB above
  void release_cache();
  mutable std::mutex mu_;
  struct Block {
    size_t bytes;  // what cudaMalloc gave (the size class; the exact request on the emulated device)
    size_t size;   // its size class: what the figures count
    MemTag tag;
  };
  std::multimap<size_t, std::pair<void*, size_t>> free_;  // cudaMalloc'd bytes -> cached block, its class
  std::unordered_map<void*, Block> live_;
  MemoryStats stats_;
  size_t reserved_ = 0;
  size_t limit_ = 0;
};

}  // namespace zt::cuda
