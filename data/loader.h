// A dataset of token shards on local disk and the deterministic sample order over it.
// A sample is a window of seq_len + 1 consecutive tokens inside one shard (inputs = first T,
// targets = last T); windows start every seq_len tokens. The global order of samples is a
// per-epoch permutation that depends only on (seed, epoch, dataset), never on world size, so a
// data-parallel rank can take its slice of each global batch without changing the math.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/manifest.h"
#include "data/shard.h"

namespace zt::data {

class TokenDataset {
 public:
  // Opens DIR's manifest and shards, checks each shard's size and CRC against the manifest and
  // every token against `vocab_size`. UserError on any mismatch, naming the shard.
  TokenDataset(const std::string& dir, int seq_len, int vocab_size);

  uint64_t n_windows() const { return window_start_.back(); }
  int seq_len() const { return seq_len_; }
  // inputs (T), targets (T) of window `w` < n_windows()
  void window(uint64_t w, int32_t* inputs, int32_t* targets) const;
  const Manifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int seq_len_;
  Manifest manifest_;
  std::vector<std::unique_ptr<ShardView>> shards_;
  std::vector<uint64_t> window_start_;  // prefix sums of windows per shard (n_shards + 1)
};

class SampleOrder {
 public:
  // shuffle = false gives windows in dataset order (evaluation).
  SampleOrder(const TokenDataset& ds, uint64_t seed, bool shuffle);
  // The window used for global sample number `g` (g counts samples from the start of training).
  uint64_t window_for(uint64_t g);
  // Fills a (B, T) batch with global samples first, first+1, ..., first+B-1.
  void fill(uint64_t first, int B, int32_t* inputs, int32_t* targets);

 private:
  const TokenDataset& ds_;
  uint64_t seed_;
  bool shuffle_;
  uint64_t perm_epoch_ = UINT64_MAX;
  std::vector<uint64_t> perm_;
};

}  // namespace zt::data
