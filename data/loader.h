// A dataset of token shards (local directory, HTTP or S3 through the SSD cache) and the
// deterministic sample order over it.
//
// A sample is a window of seq_len + 1 consecutive tokens inside one shard (inputs = first T,
// targets = last T); windows start every seq_len tokens. A fine-tuning dataset (version 2
// shards: documents and a loss mask) is read as rows of whole documents instead ([data]
// packing): a document of L tokens fills L - 1 positions of a row (its last token is only a
// target), its targets are -1 where the loss mask says no loss, and its positions restart at 0.
// "documents" packs each shard's documents into rows by best-fit decreasing (the row with the
// least room that still holds it; a new row when none does): it leaves the fewest rows, so the
// least padding, and the order it takes does not matter because rows are shuffled anyway.
// "padded" puts one document in each row. A document longer than seq_len + 1 tokens is cut into
// pieces of seq_len + 1 tokens that overlap by one, each attending within itself. The end of a
// row is padding: token 0, no loss, each at position 0 (attending only to itself). The order of an epoch: the shards in a
// seeded permutation, cut into blocks of `shuffle_block` shards, and the windows of each block in a
// seeded permutation. It depends only on (seed, epoch, dataset), never on the number of ranks, so a
// data-parallel rank takes its slice of each global batch without changing the math; and a few
// blocks of shards are all that must be local at once, which is what lets the cache stream.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/manifest.h"
#include "data/mixture.h"
#include "data/sample_order.h"
#include "data/shard.h"
#include "data/shard_cache.h"
#include "data/store/object_store.h"
#include "engine/core/run_choices.h"

namespace zt::data {

struct DataOptions {
  StoreOptions store;
  Packing packing = Packing::None;  // how version 2 (fine-tuning) shards become rows
  std::string cache_dir = "/tmp/ztrain-cache";
  uint64_t cache_limit = 200ull << 30;
  int prefetch = 1;       // blocks of shards downloaded ahead of use
  int shuffle_block = 4;  // shards whose windows are shuffled together
};

class TokenDataset {
 public:
  // Opens the manifest of `uri` (a directory, file://, http(s)://, s3://). Local shards are
  // checked (size, CRC-32, ids < vocab_size) at once; remote ones when first opened. UserError on
  // any mismatch, naming the shard.
  TokenDataset(const std::string& uri, int seq_len, int vocab_size, const DataOptions& options = {});
  ~TokenDataset();

  uint64_t n_windows() const { return window_start_.back(); }
  int seq_len() const { return seq_len_; }
  size_t n_shards() const { return manifest_.shards.size(); }
  uint64_t shard_first_window(size_t s) const { return window_start_[s]; }
  uint64_t shard_windows(size_t s) const { return window_start_[s + 1] - window_start_[s]; }
  size_t shard_of_window(uint64_t w) const;
  // inputs (T), targets (T) of window `w` < n_windows(), and its positions (T) when `positions`
  // is given (each token's position in its document); returns the documents in it (1 for a
  // token stream's window). Not thread-safe (one reader thread).
  int window(uint64_t w, int32_t* inputs, int32_t* targets, int32_t* positions = nullptr);
  // Rows of whole documents (a version 2 dataset, packed); windows of the token stream otherwise.
  bool packed() const { return !row_first_.empty(); }
  // Packed: the documents cut into pieces (longer than seq_len + 1 tokens), and the rows' filled
  // share of their positions.
  uint64_t documents_split() const { return documents_split_; }
  double fill_rate() const { return fill_rate_; }
  // Brings shard `s` into the cache ahead of use (thread-safe; no-op for local datasets).
  void prefetch_shard(size_t s);
  const Manifest& manifest() const { return manifest_; }
  const std::string& uri() const { return uri_; }
  ObjectStore& store() { return *store_; }
  ShardCache* cache() { return cache_.get(); }
  // Bytes of this dataset's shards that must be in the cache at once (0 for a local dataset).
  uint64_t cache_need() const { return cache_need_; }

 private:
  const ShardView& shard(size_t s);
  // Packed: a shard's documents as rows, appended to pieces_ and row_first_; returns its rows.
  uint64_t plan_rows(const ShardView& view);

  std::string uri_;
  int seq_len_, vocab_size_;
  DataOptions options_;
  std::unique_ptr<ObjectStore> store_;
  Manifest manifest_;
  std::unique_ptr<ShardCache> cache_;
  std::vector<uint64_t> window_start_;  // prefix sums of windows per shard (n_shards + 1)
  struct Piece {     // tokens [start, start + len) of a shard: one document, or a piece of one
    uint64_t start;
    uint32_t len;
  };
  std::vector<Piece> pieces_;         // packed: every row's pieces, row after row, shard after shard
  std::vector<uint64_t> row_first_;   // packed: row r's pieces are [row_first_[r], row_first_[r + 1])
  uint64_t documents_split_ = 0;
  double fill_rate_ = 0;
  std::vector<uint8_t> mask_;  // window()'s loss-mask buffer
  // Open shards, most recently used last; local datasets keep all of them.
  std::map<size_t, std::unique_ptr<OpenShard>> open_;
  std::list<size_t> lru_;
  size_t max_open_;
  uint64_t cache_need_ = 0;
};

class SampleOrder {
 public:
  // shuffle = false gives windows in dataset order (evaluation).
  SampleOrder(const TokenDataset& ds, uint64_t seed, bool shuffle, int shuffle_block = 4);
  // The window used for global sample number `g` (g counts samples from the start of training).
  uint64_t window_for(uint64_t g);
  // The shards of the block holding global sample g, and of the `ahead` blocks after it.
  std::vector<size_t> upcoming_shards(uint64_t g, int ahead);
  // Fills a (B, T) batch with global samples first, first+1, ..., first+B-1 (and their positions,
  // when given); returns the documents in it.
  int64_t fill(TokenDataset& ds, uint64_t first, int B, int32_t* inputs, int32_t* targets,
               int32_t* positions = nullptr);

 private:
  void plan_epoch(uint64_t epoch);
  const TokenDataset& ds_;
  uint64_t seed_;
  bool shuffle_;
  int block_;
  uint64_t epoch_ = UINT64_MAX;
  std::vector<size_t> shard_order_;         // shards of this epoch, in order
  std::vector<uint64_t> block_start_;       // first in-epoch index of each block (+ total)
  uint64_t perm_block_ = UINT64_MAX;        // block whose permutation is cached
  std::vector<uint64_t> perm_;              // windows of that block, permuted
};

// Where training is in the data: the next global sample, and what identifies the order. Saved
// with checkpoints; restoring it with another data-parallel degree (same global batch) continues
// the same global order.
struct LoaderPosition {
  uint64_t next_sample = 0;   // a multiple of global_batch: the first sample of the next step
  uint64_t seed = 0;
  uint64_t dataset_crc = 0;   // the sources' fingerprints combined (mixture_fingerprint)
  int64_t global_batch = 0;
  // The mixture: its configuration and where it is (JSON, written by the trainer; empty in
  // checkpoints of single-source runs written before mixtures existed).
  std::string mixture;
};
uint64_t dataset_fingerprint(const Manifest& m);
// One source: its dataset_fingerprint; several: a combination of theirs, in order.
uint64_t mixture_fingerprint(const std::vector<uint64_t>& source_fingerprints);

// The training data: its sources and the schedule that mixes them. Global sample g is, with
// (s, k) = the schedule's source and the source's count at g, window orders[s].window_for(k) of
// sets[s].
struct MixedData {
  std::vector<std::string> names;
  std::vector<TokenDataset*> sets;
  std::vector<SampleOrder> orders;  // one shuffled order per source
  MixSchedule schedule;
};

// Where a sample came from: its source, its index in that source's order, and the window.
struct SampleOrigin {
  uint32_t source = 0;
  uint64_t index = 0, window = 0;
};

// Reads a mixture's global samples in increasing order from a saved state. One per thread: it
// keeps its own copies of the orders (their permutation caches).
class MixReader {
 public:
  MixReader(MixedData& data, MixState start);
  // B samples from global sample `first` on (first >= every sample read before): (B, T) inputs
  // and targets, each row's origin when `origins` is given and its positions when `positions` is;
  // returns the documents in them.
  int64_t fill(uint64_t first, int B, int32_t* inputs, int32_t* targets, SampleOrigin* origins = nullptr,
               int32_t* positions = nullptr);
  // The shards the sources in use read from sample g on, `ahead` blocks of each: (source, shard).
  std::vector<std::pair<size_t, size_t>> upcoming_shards(uint64_t g, int ahead);
  const MixState& state() const { return state_; }
  // Per source: milliseconds spent reading its samples (waits for its downloads included).
  const std::vector<double>& read_ms() const { return read_ms_; }

 private:
  MixedData& data_;
  std::vector<SampleOrder> orders_;
  MixState state_;
  std::vector<double> read_ms_;
};

// Assembles micro-batches on a background thread, ahead of the training step, and keeps the
// next blocks of shards downloading on another. The trainer asks for the micro-batches in the
// order it announced; `wait_ms` says how long it waited.
class BatchLoader {
 public:
  // first_of(k): first global sample of the k-th micro-batch this rank will ask for; `at` is the
  // mixture's state at or before first_of(start_k).
  BatchLoader(MixedData& data, const MixState& at, int B, std::function<uint64_t(uint64_t)> first_of,
              uint64_t start_k, int depth, int prefetch_blocks);
  ~BatchLoader();
  // The k-th micro-batch (k must be the next one): copies (B, T) inputs and targets, the B rows'
  // origins when `origins` is given, and their positions when `positions` is; returns the
  // documents in it.
  int64_t next(int32_t* inputs, int32_t* targets, double* wait_ms, SampleOrigin* origins = nullptr,
               int32_t* positions = nullptr);
  // Waits until the next n micro-batches (at most the queue's depth) are ready or one of them
  // failed, and adds the wait to `wait_ms`: the trainer calls it before the step's agreement, so
  // that every rank knows at the same step boundary whether its next step's data exists.
  // `give_up` (checked every 50 ms) ends the wait early: a preemption signal must not wait for a
  // slow source.
  void wait_ahead(int n, double* wait_ms, const std::function<bool()>& give_up = {});
  // A batch ahead failed for good (a source gone): the error is queued behind the ready batches.
  bool failed();
  [[noreturn]] void rethrow_failure();
  // Per source: milliseconds the producer has spent reading its samples (the slow-source verdict).
  std::vector<double> source_read_ms();

 private:
  void produce();
  void prefetch_loop();
  MixedData& data_;
  MixReader reader_, prefetch_reader_;  // one per thread
  bool remote_ = false;                 // some source streams through the cache
  int B_, T_;
  std::function<uint64_t(uint64_t)> first_of_;
  int depth_, prefetch_blocks_;
  struct Batch {
    std::vector<int32_t> inputs, targets, positions;
    std::vector<SampleOrigin> origins;
    int64_t documents = 0;
  };
  std::mutex mu_;
  // Separate wake-ups for the three threads: a step should not wake the prefetcher, and the
  // producer is woken only when the queue is half empty (batches are handed over in bursts).
  std::condition_variable producer_cv_, consumer_cv_, prefetch_cv_;
  std::deque<Batch> ready_;
  std::vector<double> source_ms_;  // the producer's reader_.read_ms(), as of its last batch
  std::vector<Batch> spare_;  // recycled buffers: no allocation per micro-batch
  uint64_t next_k_;        // next micro-batch to produce
  std::atomic<uint64_t> consumer_g_{0};  // first sample the consumer will need next
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread producer_, prefetcher_;
};

}  // namespace zt::data
