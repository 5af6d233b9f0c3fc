// TokenDataset (validated shards, local or cached), SampleOrder (block-shuffled epochs) and
// BatchLoader (background batch assembly and shard prefetch).
#include "data/loader.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <numeric>

#include "engine/core/faults.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"

namespace zt::data {

namespace {
// Every id must index the embedding: checked once per shard, in chunks (vectorized max).
void check_tokens(const ShardView& sh, int vocab_size) {
  constexpr uint64_t kChunk = 1 << 16;
  std::vector<int32_t> buf(kChunk);
  for (uint64_t i = 0; i < sh.header().n_tokens; i += kChunk) {
    const uint64_t n = std::min(kChunk, sh.header().n_tokens - i);
    sh.read(i, n, buf.data());
    uint32_t mx = 0;
    for (uint64_t j = 0; j < n; ++j) mx = std::max(mx, uint32_t(buf[j]));
    if (mx < uint32_t(vocab_size)) continue;
    for (uint64_t j = 0; j < n; ++j)
      if (uint32_t(buf[j]) >= uint32_t(vocab_size))
        user_error("{}: token {} at index {} is not < vocab_size {}", sh.path(), uint32_t(buf[j]), i + j, vocab_size);
  }
}
}  // namespace

TokenDataset::TokenDataset(const std::string& uri, int seq_len, int vocab_size, const DataOptions& o)
    : uri_(uri), seq_len_(seq_len), vocab_size_(vocab_size), options_(o) {
  store_ = open_store(uri, o.store);
  if (store_->is_local()) {
    manifest_ = read_manifest(store_->local_path(""));
  } else {
    manifest_ = parse_manifest(store_->get(kManifestName), store_->describe(kManifestName));
    cache_ = std::make_unique<ShardCache>(*store_, manifest_, uri, o.cache_dir, o.cache_limit);
  }
  // Read as a token stream it would train on every token, across the documents' boundaries.
  const bool documents = manifest_.version == kShardVersionDocuments;
  if (documents && o.packing == Packing::None)
    user_error("{}: a fine-tuning dataset (version 2 shards: documents with a loss mask, `ztrain-tokenize chat`) "
               "needs [data] packing = \"documents\" (or \"padded\"): read as a token stream ([data] packing = "
               "\"none\") it would train on every token, across the documents' boundaries", uri);
  if (manifest_.tokenizer.n_vocab > uint32_t(vocab_size))
    user_error("{}: the dataset's tokenizer '{}' has {} tokens but [model] vocab_size is {}", uri,
               manifest_.tokenizer.name, manifest_.tokenizer.n_vocab, vocab_size);
  size_t largest = 0;
  for (size_t s = 0; s < manifest_.shards.size(); ++s)
    if (manifest_.shards[s].bytes > manifest_.shards[largest].bytes) largest = s;
  const uint64_t max_bytes = manifest_.shards[largest].bytes;
  if (cache_) {
    // Per-sample state (a block's sample order) grows with the declared sizes, before any shard
    // is downloaded: a manifest claiming 2^40 tokens used 17 GB before failing. One HEAD bounds
    // them all: the largest declared shard must be as large as declared, and every other shard
    // is then declared no larger than a real one (each is checked in full when downloaded).
    const auto& e = manifest_.shards[largest];
    const int64_t real = store_->size(e.file);
    if (real >= 0 && uint64_t(real) != e.bytes)
      user_error("{}: the manifest declares {} bytes ({} tokens), but the object has {} bytes", store_->describe(e.file),
                 e.bytes, e.tokens, real);
  }
  if (!documents) {
    window_start_.push_back(0);
    for (const auto& e : manifest_.shards) {
      const uint64_t n = e.tokens > uint64_t(seq_len) ? (e.tokens - 1) / seq_len : 0;
      window_start_.push_back(window_start_.back() + n);
    }
    if (n_windows() == 0)
      user_error("{}: no shard holds more than seq_len = {} tokens, so there is no sample to train on",
                 uri, seq_len);
  }
  // Documents: the rows come from every shard's document table, read once here (a remote
  // dataset's shards pass through the cache for it).
  auto plan_all = [&] {
    window_start_.assign(1, 0);
    row_first_.assign(1, 0);
    uint64_t used = 0;
    for (size_t s = 0; s < manifest_.shards.size(); ++s) window_start_.push_back(window_start_.back() + plan_rows(shard(s)));
    for (const Piece& p : pieces_) used += p.len - 1;
    fill_rate_ = n_windows() ? double(used) / (double(n_windows()) * seq_len) : 0.0;
    if (n_windows() == 0) user_error("{}: no document has two tokens or more, so there is no sample to train on", uri);
  };
  // Pinned at once: the block being read and the one before it (batches straddle blocks).
  max_open_ = size_t(2 * o.shuffle_block);
  if (cache_) {
    // What must be local at once: the block being read, the next one, and the prefetched ones.
    const uint64_t need = cache_need_ = uint64_t(2 + o.prefetch) * uint64_t(o.shuffle_block) * max_bytes;
    if (o.cache_limit < need)
      user_error("[data] cache_limit = {} bytes is smaller than what must be cached at once for {}: "
                 "(2 + prefetch {}) blocks x shuffle_block {} shards x {} bytes = {} bytes",
                 o.cache_limit, uri, o.prefetch, o.shuffle_block, max_bytes, need);
    if (documents) plan_all();
    return;
  }
  // Local: check every shard now against the manifest and the vocabulary.
  max_open_ = manifest_.shards.size();
  for (size_t s = 0; s < manifest_.shards.size(); ++s) {
    const auto& e = manifest_.shards[s];
    const std::string path = store_->local_path(e.file);
    auto sh = std::make_unique<OpenShard>();
    sh->view = std::make_unique<ShardView>(path);
    const ShardHeader& h = sh->view->header();
    if (sh->view->size() != e.bytes || h.n_tokens != e.tokens || h.token_bytes != manifest_.token_bytes ||
        h.version != manifest_.version)
      user_error("{}: file has {} bytes / {} tokens of {} bytes / version {}, the manifest says {} / {} / {} / {}",
                 path, sh->view->size(), h.n_tokens, h.token_bytes, h.version, e.bytes, e.tokens,
                 manifest_.token_bytes, manifest_.version);
    if (crc32_of(sh->view->bytes(), sh->view->size()) != e.crc32)
      user_error("{}: CRC-32 does not match the manifest (corrupt shard)", path);
    check_tokens(*sh->view, vocab_size);
    open_[s] = std::move(sh);
  }
  if (documents) plan_all();
}

uint64_t TokenDataset::plan_rows(const ShardView& view) {
  const ShardHeader& h = view.header();
  const uint32_t T = uint32_t(seq_len_);
  std::vector<Piece> pieces;  // the shard's documents, cut to at most T + 1 tokens
  for (uint64_t d = 0; d < h.n_documents; ++d) {
    const uint64_t a = view.document_start(d), e = d + 1 < h.n_documents ? view.document_start(d + 1) : h.n_tokens;
    if (e - a > uint64_t(T) + 1) ++documents_split_;
    for (uint64_t p = a; p + 1 < e; p += T)  // pieces of T + 1 tokens overlapping by one: each token a target once
      pieces.push_back({p, uint32_t(std::min<uint64_t>(uint64_t(T) + 1, e - p))});
  }
  std::vector<std::vector<uint32_t>> rows;  // each row's pieces (indices into `pieces`)
  if (options_.packing == Packing::Padded) {
    for (uint32_t i = 0; i < pieces.size(); ++i) rows.push_back({i});
  } else {  // best-fit decreasing: longest first (ties in document order), each into the fullest row it fits
    std::vector<uint32_t> order(pieces.size());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return pieces[a].len > pieces[b].len; });
    std::multimap<uint32_t, uint32_t> room;  // free positions -> row (equal keys in the rows' order)
    for (uint32_t i : order) {
      const uint32_t need = pieces[i].len - 1;
      auto it = room.lower_bound(need);
      uint32_t row, free;
      if (it == room.end()) {
        row = uint32_t(rows.size()), free = T - need;
        rows.emplace_back();
      } else {
        row = it->second, free = it->first - need;
        room.erase(it);
      }
      if (free > 0) room.emplace(free, row);
      rows[row].push_back(i);
    }
  }
  for (const auto& r : rows) {
    for (uint32_t i : r) pieces_.push_back(pieces[i]);
    row_first_.push_back(pieces_.size());
  }
  return rows.size();
}

TokenDataset::~TokenDataset() = default;

size_t TokenDataset::shard_of_window(uint64_t w) const {
  return size_t(std::upper_bound(window_start_.begin(), window_start_.end(), w) - window_start_.begin() - 1);
}

const ShardView& TokenDataset::shard(size_t s) {
  auto it = open_.find(s);
  if (it != open_.end()) {
    if (cache_) {
      lru_.remove(s);
      lru_.push_back(s);
    }
    return *it->second->view;
  }
  auto sh = cache_->open(s);
  if (sh->verified_now) {  // first use of this file in this process: header and ids once
    const ShardHeader& h = sh->view->header();
    if (h.token_bytes != manifest_.token_bytes || h.n_tokens != manifest_.shards[s].tokens)
      user_error("{}: header does not match the manifest", store_->describe(manifest_.shards[s].file));
    check_tokens(*sh->view, vocab_size_);
  }
  while (lru_.size() >= max_open_) {  // unpin the least recently used
    open_.erase(lru_.front());
    lru_.pop_front();
  }
  lru_.push_back(s);
  return *(open_[s] = std::move(sh))->view;
}

void TokenDataset::prefetch_shard(size_t s) {
  if (cache_) cache_->ensure(s, /*best_effort=*/true);
}

int TokenDataset::window(uint64_t w, int32_t* inputs, int32_t* targets, int32_t* positions) {
  ZT_CHECK(w < n_windows(), "window {} of {}", w, n_windows());
  const size_t s = shard_of_window(w);
  const ShardView& sh = shard(s);
  if (!packed()) {
    const uint64_t start = (w - window_start_[s]) * seq_len_;
    sh.read(start, uint64_t(seq_len_), inputs);         // tokens [start, start + T)
    std::copy(inputs + 1, inputs + seq_len_, targets);  // targets are inputs shifted by one
    sh.read(start + seq_len_, 1, targets + seq_len_ - 1);
    if (positions) std::iota(positions, positions + seq_len_, 0);
    return 1;
  }
  int j = 0;  // the row's next position
  for (uint64_t i = row_first_[w]; i < row_first_[w + 1]; ++i) {
    const Piece& p = pieces_[i];
    const int n = int(p.len) - 1;  // its last token is only a target
    sh.read(p.start, uint64_t(n), inputs + j);
    sh.read(p.start + 1, uint64_t(n), targets + j);
    mask_.resize(size_t(n));
    sh.read_loss_mask(p.start + 1, uint64_t(n), mask_.data());
    for (int k = 0; k < n; ++k)
      if (!mask_[size_t(k)]) targets[j + k] = -1;
    if (positions) std::iota(positions + j, positions + j + n, 0);
    j += n;
  }
  // padding: token 0 without loss, each at position 0 (a document of its own: it attends to itself
  // only, so the padding costs attention no more than its length)
  std::fill(inputs + j, inputs + seq_len_, 0);
  std::fill(targets + j, targets + seq_len_, -1);
  if (positions) std::fill(positions + j, positions + seq_len_, 0);
  return int(row_first_[w + 1] - row_first_[w]);
}

// ---- sample order ----

SampleOrder::SampleOrder(const TokenDataset& ds, uint64_t seed, bool shuffle, int shuffle_block)
    : ds_(ds), seed_(seed), shuffle_(shuffle), block_(std::max(1, shuffle_block)) {}

void SampleOrder::plan_epoch(uint64_t epoch) {
  if (epoch == epoch_) return;
  const size_t n = ds_.n_shards();
  shard_order_.resize(n);
  std::iota(shard_order_.begin(), shard_order_.end(), 0);
  const uint64_t stream = name_hash("data.shards") ^ (epoch * 0x9E3779B97F4A7C15ull);
  for (size_t k = n; k-- > 1;)  // Fisher-Yates, keyed by (seed, epoch)
    std::swap(shard_order_[k], shard_order_[bits64_at(seed_, stream, k) % (k + 1)]);
  block_start_.assign(1, 0);
  for (size_t b = 0; b < n; b += size_t(block_)) {
    uint64_t w = 0;
    for (size_t k = b; k < std::min(n, b + size_t(block_)); ++k) w += ds_.shard_windows(shard_order_[k]);
    block_start_.push_back(block_start_.back() + w);
  }
  epoch_ = epoch;
  perm_block_ = UINT64_MAX;
}

uint64_t SampleOrder::window_for(uint64_t g) {
  const uint64_t n = ds_.n_windows();
  const uint64_t epoch = g / n, i = g % n;
  if (!shuffle_) return i;
  plan_epoch(epoch);
  const uint64_t b = uint64_t(std::upper_bound(block_start_.begin(), block_start_.end(), i) - block_start_.begin() - 1);
  if (b != perm_block_) {
    perm_.clear();
    for (size_t k = b * block_; k < std::min(shard_order_.size(), size_t((b + 1) * block_)); ++k) {
      const size_t s = shard_order_[k];
      for (uint64_t w = 0; w < ds_.shard_windows(s); ++w) perm_.push_back(ds_.shard_first_window(s) + w);
    }
    const uint64_t stream = name_hash("data.block") ^ (epoch * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full);
    for (size_t k = perm_.size(); k-- > 1;)
      std::swap(perm_[k], perm_[bits64_at(seed_, stream, k) % (k + 1)]);
    perm_block_ = b;
  }
  return perm_[i - block_start_[b]];
}

std::vector<size_t> SampleOrder::upcoming_shards(uint64_t g, int ahead) {
  const uint64_t n = ds_.n_windows();
  std::vector<size_t> out;
  if (!shuffle_) {
    for (int k = 0; k <= ahead && k < int(ds_.n_shards()); ++k)
      out.push_back((ds_.shard_of_window(g % n) + size_t(k)) % ds_.n_shards());
    return out;
  }
  uint64_t epoch = g / n, i = g % n;
  plan_epoch(epoch);
  uint64_t b = uint64_t(std::upper_bound(block_start_.begin(), block_start_.end(), i) - block_start_.begin() - 1);
  for (int k = 0; k <= ahead; ++k) {
    if (b * block_ >= shard_order_.size()) {  // next epoch
      plan_epoch(++epoch);
      b = 0;
    }
    for (size_t j = b * block_; j < std::min(shard_order_.size(), size_t((b + 1) * block_)); ++j)
      out.push_back(shard_order_[j]);
    ++b;
  }
  return out;
}

int64_t SampleOrder::fill(TokenDataset& ds, uint64_t first, int B, int32_t* inputs, int32_t* targets,
                          int32_t* positions) {
  int64_t documents = 0;
  for (int b = 0; b < B; ++b) {
    const size_t row = size_t(b) * size_t(ds.seq_len());
    documents += ds.window(window_for(first + b), inputs + row, targets + row, positions ? positions + row : nullptr);
  }
  return documents;
}

uint64_t dataset_fingerprint(const Manifest& m) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& e : m.shards) h = (h ^ e.crc32 ^ (e.tokens << 32)) * 1099511628211ull;
  return h;
}

uint64_t mixture_fingerprint(const std::vector<uint64_t>& fps) {
  if (fps.size() == 1) return fps[0];  // as single-source checkpoints have always recorded it
  uint64_t h = 1469598103934665603ull;
  for (uint64_t f : fps) h = (h ^ f) * 1099511628211ull, h ^= h >> 29;
  return h;
}

// ---- mixture reader ----

namespace {
// f() with its errors naming the source, when there are several (a mixture's user needs to know
// which of its datasets failed).
template <typename F>
void naming_source(const MixedData& data, size_t src, F&& f) {
  if (data.sets.size() == 1) return f();
  try {
    f();
  } catch (const UserError& e) {
    user_error("data source '{}': {}", data.names[src], e.what());
  } catch (const RuntimeFailure& e) {
    throw RuntimeFailure(fmt::format("data source '{}': {}", data.names[src], e.what()));
  }
}
}  // namespace

MixReader::MixReader(MixedData& data, MixState start)
    : data_(data), orders_(data.orders), state_(std::move(start)), read_ms_(data.sets.size(), 0.0) {}

int64_t MixReader::fill(uint64_t first, int B, int32_t* inputs, int32_t* targets, SampleOrigin* origins,
                        int32_t* positions) {
  data_.schedule.advance_to(state_, first);
  const size_t T = size_t(data_.sets[0]->seq_len());
  int64_t documents = 0;
  for (int b = 0; b < B; ++b) {
    const size_t src = data_.schedule.next(state_);
    const uint64_t k = state_.drawn[src] - 1;
    const uint64_t w = orders_[src].window_for(k);
    const auto t0 = std::chrono::steady_clock::now();
    if (faults().slow_source_ms > 0 && data_.names[src] == faults().slow_source) injected_delay(faults().slow_source_ms);
    naming_source(data_, src, [&] {
      documents += data_.sets[src]->window(w, inputs + size_t(b) * T, targets + size_t(b) * T,
                                           positions ? positions + size_t(b) * T : nullptr);
    });
    read_ms_[src] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (origins) origins[b] = {uint32_t(src), k, w};
  }
  return documents;
}

std::vector<std::pair<size_t, size_t>> MixReader::upcoming_shards(uint64_t g, int ahead) {
  data_.schedule.advance_to(state_, std::max(g, state_.next_sample));
  const auto& weights = data_.schedule.stage(data_.schedule.stage_at(state_.next_sample)).weights;
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t src = 0; src < data_.sets.size(); ++src) {
    if (weights[src] == 0) continue;  // not drawn from in this stage
    for (size_t shard : orders_[src].upcoming_shards(state_.drawn[src], ahead)) out.emplace_back(src, shard);
  }
  return out;
}

// ---- background loader ----

BatchLoader::BatchLoader(MixedData& data, const MixState& at, int B, std::function<uint64_t(uint64_t)> first_of,
                         uint64_t start_k, int depth, int prefetch_blocks)
    : data_(data), reader_(data, at), prefetch_reader_(data, at), B_(B), T_(data.sets[0]->seq_len()),
      first_of_(std::move(first_of)), depth_(std::max(1, depth)), prefetch_blocks_(prefetch_blocks),
      next_k_(start_k) {
  consumer_g_ = first_of_(start_k);
  for (TokenDataset* ds : data_.sets) remote_ |= ds->cache() != nullptr;
  producer_ = std::thread([this] { produce(); });
  if (remote_) prefetcher_ = std::thread([this] { prefetch_loop(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard g(mu_);
    stop_ = true;
  }
  producer_cv_.notify_all();
  consumer_cv_.notify_all();
  prefetch_cv_.notify_all();
  if (producer_.joinable()) producer_.join();
  if (prefetcher_.joinable()) prefetcher_.join();
}

void BatchLoader::produce() {
  try {
    for (;;) {
      uint64_t k;
      Batch b;
      {
        std::unique_lock lock(mu_);
        producer_cv_.wait(lock, [&] { return stop_ || int(ready_.size()) < depth_; });
        if (stop_) return;
        k = next_k_++;
        if (!spare_.empty()) {
          b = std::move(spare_.back());
          spare_.pop_back();
        }
      }
      b.inputs.resize(size_t(B_) * T_);
      b.targets.resize(b.inputs.size());
      b.positions.resize(b.inputs.size());
      b.origins.resize(size_t(B_));
      injected_delay(faults().slow_data_ms);  // the data-bound verdict's test: a slow source or disk
      b.documents = reader_.fill(first_of_(k), B_, b.inputs.data(), b.targets.data(), b.origins.data(),
                                 b.positions.data());
      {
        std::lock_guard g(mu_);
        ready_.push_back(std::move(b));
        source_ms_ = reader_.read_ms();
      }
      consumer_cv_.notify_one();
    }
  } catch (...) {
    std::lock_guard g(mu_);
    error_ = std::current_exception();
    consumer_cv_.notify_all();
  }
}

void BatchLoader::prefetch_loop() {
  try {
    uint64_t done_for = UINT64_MAX;
    while (true) {
      const uint64_t g = consumer_g_.load();
      if (g != done_for) {
        for (const auto& [src, shard] : prefetch_reader_.upcoming_shards(g, prefetch_blocks_)) {
          {
            std::lock_guard lock(mu_);
            if (stop_) return;
          }
          naming_source(data_, src, [&] { data_.sets[src]->prefetch_shard(shard); });
        }
        done_for = g;
      }
      std::unique_lock lock(mu_);
      prefetch_cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stop_; });
      if (stop_) return;
    }
  } catch (...) {
    std::lock_guard g(mu_);
    error_ = std::current_exception();
    consumer_cv_.notify_all();
  }
}

void BatchLoader::wait_ahead(int n, double* wait_ms, const std::function<bool()>& give_up) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t want = size_t(std::clamp(n, 1, depth_));
  producer_cv_.notify_one();  // the producer otherwise refills only once the queue is half empty
  std::unique_lock lock(mu_);
  auto ready = [&] { return ready_.size() >= want || error_ || stop_; };
  while (!consumer_cv_.wait_for(lock, std::chrono::milliseconds(50), ready))
    if (give_up && give_up()) break;
  if (wait_ms) *wait_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

bool BatchLoader::failed() {
  std::lock_guard g(mu_);
  return error_ != nullptr;
}

void BatchLoader::rethrow_failure() {
  std::exception_ptr e;
  {
    std::lock_guard g(mu_);
    e = error_;
  }
  ZT_CHECK(e != nullptr, "rethrow_failure without a failure");
  std::rethrow_exception(e);
}

std::vector<double> BatchLoader::source_read_ms() {
  std::lock_guard g(mu_);
  return source_ms_.empty() ? std::vector<double>(data_.sets.size(), 0.0) : source_ms_;
}

int64_t BatchLoader::next(int32_t* inputs, int32_t* targets, double* wait_ms, SampleOrigin* origins,
                          int32_t* positions) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  consumer_cv_.wait(lock, [&] { return !ready_.empty() || error_; });
  if (error_ && ready_.empty()) std::rethrow_exception(error_);
  Batch b = std::move(ready_.front());
  ready_.pop_front();
  consumer_g_ = first_of_(next_k_ - ready_.size());
  const bool wake = int(ready_.size()) <= depth_ / 2;
  lock.unlock();
  if (wake) producer_cv_.notify_one();
  std::copy(b.inputs.begin(), b.inputs.end(), inputs);
  std::copy(b.targets.begin(), b.targets.end(), targets);
  if (origins) std::copy(b.origins.begin(), b.origins.end(), origins);
  if (positions) std::copy(b.positions.begin(), b.positions.end(), positions);
  const int64_t documents = b.documents;
  {
    std::lock_guard g(mu_);
    spare_.push_back(std::move(b));
  }
  if (wait_ms) *wait_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return documents;
}

}  // namespace zt::data
