// CachingAllocator (see allocator.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

#include "engine/backend/cuda/allocator.cuh"
#include "engine/backend/cuda/cuda_common.cuh"

namespace zt::cuda {

CachingAllocator::~CachingAllocator() {
  release_cache();
  for (auto& [p, info] : live_) cudaFree(p);
}

size_t CachingAllocator::round(size_t bytes) {
  if (bytes < (1u << 20)) return (bytes + 511) / 512 * 512;
  return (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
}

void CachingAllocator::release_cache() {
  // cudaFree synchronizes the device; with NCCL kernels in flight that can deadlock the job (NCCL's
  // documentation), so every stream, the communicators' included, is drained first: the collectives
  // then end while the host is free to go on, never inside cudaFree.
  if (!free_.empty()) cudaDeviceSynchronize();
  for (auto& [block, cached] : free_) {
    cudaFree(cached.first);
    reserved_ -= cached.second;
  }
  free_.clear();
}

void* CachingAllocator::alloc(size_t bytes, MemTag tag) {
  std::lock_guard lock(mu_);
  const size_t size = round(std::max<size_t>(bytes, 1));  // what the block counts as (its size class)
  // What is asked of cudaMalloc: the size class on a GPU; the exact size on the emulated device,
  // whose guard pages and redzones sit right past the bytes asked for (blocks are then cached and
  // reused by exact size, and the figures still count size classes, as on a GPU).
#ifdef ZT_CUDA_EMULATED
  const size_t block = std::max<size_t>(bytes, 1);
#else
  const size_t block = size;
#endif
  void* p = nullptr;
  auto it = free_.find(block);  // exact size class: no splitting, so no fragmentation inside blocks
  if (it != free_.end()) {
    p = it->second.first;
    free_.erase(it);
  } else {
    if (limit_ && reserved_ + size > limit_) release_cache();
    if (limit_ && reserved_ + size > limit_) {
      char msg[512];
      std::snprintf(msg, sizeof msg, "out of device memory: allocating %.1f MiB with %.1f MiB reserved would pass the "
                    "limit of %.1f MiB ([run] device_memory_limit)", size / 1048576.0, reserved_ / 1048576.0,
                    limit_ / 1048576.0);
      throw std::runtime_error(msg);
    }
    if (cudaMalloc(&p, block) != cudaSuccess) {
      cudaGetLastError();
      release_cache();  // give cached blocks back and try once more
      if (cudaMalloc(&p, block) != cudaSuccess) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        char msg[1024];
        int n = std::snprintf(msg, sizeof msg,
                              "out of GPU memory allocating %.1f MiB for %s: %.1f MiB allocated, %.1f MiB reserved, "
                              "%.1f MiB peak, fragmentation %.1f%%, %.1f of %.1f MiB free on the device; consumers:",
                              size / 1048576.0, mem_tag_name(tag), stats_.allocated / 1048576.0,
                              reserved_ / 1048576.0, stats_.peak / 1048576.0,
                              reserved_ ? 100.0 * (1.0 - double(stats_.allocated) / double(reserved_)) : 0.0,
                              free_b / 1048576.0, total_b / 1048576.0);
        for (int t = 0; t < int(MemTag::kCount) && n < int(sizeof msg); ++t)
          n += std::snprintf(msg + n, sizeof msg - n, " %s %.1f MiB", mem_tag_name(MemTag(t)),
                             stats_.by_tag[t] / 1048576.0);
        throw std::runtime_error(msg);
      }
    }
    reserved_ += size;
  }
  live_[p] = {block, size, tag};
  stats_.allocated += size;
  stats_.peak = std::max(stats_.peak, stats_.allocated);
  stats_.n_allocs++;
  stats_.by_tag[size_t(tag)] += size;
  stats_.peak_by_tag[size_t(tag)] = std::max(stats_.peak_by_tag[size_t(tag)], stats_.by_tag[size_t(tag)]);
  return p;
}

void CachingAllocator::free(void* p) {
  if (!p) return;
  std::lock_guard lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) fail(__FILE__, __LINE__, "CachingAllocator::free", "pointer not allocated here");
  const auto [block, size, tag] = it->second;  // the class stored, never re-rounded: round(1 MiB) is 2 MiB
  live_.erase(it);
  stats_.allocated -= size;
  stats_.n_allocs--;
  stats_.by_tag[size_t(tag)] -= size;
  free_.emplace(block, std::make_pair(p, size));  // kept for reuse (one stream: reuse is ordered after
                                                  // earlier work)
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  MemoryStats s = stats_;
  s.reserved = reserved_;
  return s;
}

}  // namespace zt::cuda
