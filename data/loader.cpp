// TokenDataset (validated shards) and SampleOrder (seeded per-epoch permutation).
#include "data/loader.h"

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "engine/core/rng.h"
#include "engine/core/status.h"

namespace zt::data {

TokenDataset::TokenDataset(const std::string& dir, int seq_len, int vocab_size)
    : dir_(dir), seq_len_(seq_len), manifest_(read_manifest(dir)) {
  if (manifest_.tokenizer.n_vocab > uint32_t(vocab_size))
    user_error("{}: the dataset's tokenizer '{}' has {} tokens but [model] vocab_size is {}", dir,
               manifest_.tokenizer.name, manifest_.tokenizer.n_vocab, vocab_size);
  window_start_.push_back(0);
  for (const auto& e : manifest_.shards) {
    const std::string path = (std::filesystem::path(dir) / e.file).string();
    auto shard = std::make_unique<ShardView>(path);
    const ShardHeader& h = shard->header();
    if (shard->size() != e.bytes || h.n_tokens != e.tokens || h.token_bytes != manifest_.token_bytes)
      user_error("{}: file has {} bytes / {} tokens of {} bytes, the manifest says {} / {} / {}",
                 path, shard->size(), h.n_tokens, h.token_bytes, e.bytes, e.tokens,
                 manifest_.token_bytes);
    if (crc32_of(shard->bytes(), shard->size()) != e.crc32)
      user_error("{}: CRC-32 does not match the manifest (corrupt shard)", path);
    for (uint64_t i = 0; i < h.n_tokens; ++i)
      if (shard->token(i) >= uint32_t(vocab_size))
        user_error("{}: token {} at index {} is not < vocab_size {}", path, shard->token(i), i,
                   vocab_size);
    const uint64_t n = h.n_tokens > uint64_t(seq_len) ? (h.n_tokens - 1) / seq_len : 0;
    window_start_.push_back(window_start_.back() + n);
    shards_.push_back(std::move(shard));
  }
  if (n_windows() == 0)
    user_error("{}: no shard holds more than seq_len = {} tokens, so there is no sample to train on",
               dir, seq_len);
}

void TokenDataset::window(uint64_t w, int32_t* inputs, int32_t* targets) const {
  ZT_CHECK(w < n_windows(), "window {} of {}", w, n_windows());
  const size_t s = std::upper_bound(window_start_.begin(), window_start_.end(), w) -
                   window_start_.begin() - 1;
  const uint64_t start = (w - window_start_[s]) * seq_len_;
  const ShardView& sh = *shards_[s];
  for (int t = 0; t < seq_len_; ++t) {
    inputs[t] = int32_t(sh.token(start + t));
    targets[t] = int32_t(sh.token(start + t + 1));
  }
}

SampleOrder::SampleOrder(const TokenDataset& ds, uint64_t seed, bool shuffle)
    : ds_(ds), seed_(seed), shuffle_(shuffle) {}

uint64_t SampleOrder::window_for(uint64_t g) {
  const uint64_t n = ds_.n_windows();
  const uint64_t epoch = g / n, i = g % n;
  if (!shuffle_) return i;
  if (epoch != perm_epoch_) {
    // Fisher-Yates driven by the counter-based generator keyed by (seed, "data.order", epoch).
    perm_.resize(n);
    std::iota(perm_.begin(), perm_.end(), 0);
    const uint64_t stream = name_hash("data.order") ^ (epoch * 0x9E3779B97F4A7C15ull);
    for (uint64_t k = n - 1; k > 0; --k) {
      const uint64_t j = bits64_at(seed_, stream, k) % (k + 1);
      std::swap(perm_[k], perm_[j]);
    }
    perm_epoch_ = epoch;
  }
  return perm_[i];
}

void SampleOrder::fill(uint64_t first, int B, int32_t* inputs, int32_t* targets) {
  for (int b = 0; b < B; ++b) {
    const size_t row = size_t(b) * size_t(ds_.seq_len());
    ds_.window(window_for(first + b), inputs + row, targets + row);
  }
}

}  // namespace zt::data
