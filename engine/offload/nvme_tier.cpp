// The NVMe tier: masters and moments in one file per rank under nvme_path (engine/offload/
// nvme_file.h), streamed through io_depth pinned buffer sets of buffer_mb, reading ahead and
// writing behind while the CPU updates the block in between. With params = "nvme", ZeRO-3's
// compute shards live in a second file: the step writes each block's shards there, and a gather
// reads a group's shards into a ring of pinned read-ahead buffers.
#include "engine/offload/nvme_tier.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <unistd.h>

#include "engine/core/status.h"
#include "engine/offload/async_io.h"
#include "engine/offload/nvme_file.h"
#include "engine/offload/pinned_tier.h"

namespace zt {

namespace {

size_t aligned_up(size_t bytes) { return (bytes + NvmeFile::kAlign - 1) / NvmeFile::kAlign * NvmeFile::kAlign; }
void* aligned_in(void* raw) {
  return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(raw) + NvmeFile::kAlign - 1) / NvmeFile::kAlign *
                                 NvmeFile::kAlign);
}

// The pinned buffers and the block arithmetic both NVMe tiers share.
class NvmeTier : public PinnedTier {
 public:
  NvmeTier(Backend& device, const ZeroPlacement& place, const TierShape& shape)
      : PinnedTier(device, place, shape, false),
        params_nvme_(place.params == ZeroPlacement::Tier::Nvme),
        io_depth_(place.io_depth) {
    // blocks of a multiple of 2048 elements: aligned in the fp32 states and in 16-bit compute
    // shards; no larger than the states themselves (a small model does not pin buffer_mb blocks)
    chunk_ = std::max<size_t>(2048, size_t(place.buffer_mb * 1048576.0) / sizeof(float) / 2048 * 2048);
    chunk_ = std::min(chunk_, std::max<size_t>(2048, (flat_ + 2047) / 2048 * 2048));
    blocks_ = (flat_ + chunk_ - 1) / chunk_;
    // The block sets, allocated once (a pinned allocation and its free synchronize a GPU) and
    // kept: three states (and the compute shard with parameters on NVMe) per set, io_depth sets
    // or one per block if there are fewer blocks.
    sets_.resize(std::max<size_t>(1, std::min(size_t(std::max(1, io_depth_)), blocks_)));
    for (StreamSet& st : sets_) {
      for (int k = 0; k < 3; ++k) {
        st.raw[k] = device_.alloc(chunk_ * sizeof(float) + NvmeFile::kAlign, MemTag::OptimStates, MemKind::PinnedHost);
        st.buf[k] = static_cast<float*>(aligned_in(st.raw[k]));
      }
      if (params_nvme_) {
        st.raw[3] = device_.alloc(chunk_ * esize_ + NvmeFile::kAlign, MemTag::Params, MemKind::PinnedHost);
        st.buf[3] = static_cast<float*>(aligned_in(st.raw[3]));
      }
    }
    if (params_nvme_) {  // the read-ahead ring: the groups being gathered and the one read ahead
      ring_.resize(size_t(place.prefetch) + 2);
      for (Slot& s : ring_) {
        s.raw = device_.alloc(shape.largest_group_shard_bytes + 3 * NvmeFile::kAlign, MemTag::Params, MemKind::PinnedHost);
        s.buf = aligned_in(s.raw);
      }
    }
  }
  ~NvmeTier() override {
    for (Slot& s : ring_) device_.free(s.raw);
    for (StreamSet& st : sets_)
      for (void* r : st.raw) device_.free(r);
  }
  bool streams() const override { return true; }
  Bytes bytes() const override {
    Bytes t;
    const double n = double(flat_) * sizeof(float);
    t.nvme[0] = n;        // masters
    t.nvme[2] = 2 * n;    // AdamW moments
    t.pinned[1] = n;      // the optimizer's gradient shard
    (params_nvme_ ? t.nvme : t.pinned)[0] += double(flat_) * double(esize_);  // the compute copy AdamW writes
    return t;
  }

 protected:
  struct StreamSet {     // pinned block buffers, aligned for O_DIRECT inside raw
    float* buf[4] = {};  // masters, m, v, and the compute shard (params on NVMe)
    void* raw[4] = {};
  };
  struct Slot {          // a read-ahead buffer of ZeRO-3's compute shards (params on NVMe)
    void* raw = nullptr;  // pinned
    void* buf = nullptr;  // aligned for O_DIRECT
    uint64_t upload = 0;  // the upload that last read it (Backend::wait_upload)
    int owner = -1;       // the group read into it last
    bool reading = false;  // owner's read issued and not yet taken
    AsyncIo::Ticket read = 0;
    const void* host = nullptr;  // owner's shards within buf
  };
  size_t len(size_t b) const { return std::min(chunk_, flat_ - b * chunk_); }
  Slot* reading_slot(int g) {
    for (Slot& s : ring_)
      if (s.owner == g && s.reading) return &s;
    return nullptr;
  }
  bool params_nvme_;
  int io_depth_;
  size_t chunk_ = 0;  // elements per I/O block
  size_t blocks_ = 0;
  std::vector<StreamSet> sets_;
  std::vector<Slot> ring_;  // params on NVMe: prefetch + 2 buffers of the largest group
  uint64_t next_slot_ = 0;
};

// The planner's NVMe tier: the buffers in its books, the blocks' work through fn, no file.
class CountedNvmeTier final : public NvmeTier {
 public:
  using NvmeTier::NvmeTier;
  void stream(bool moments, bool, const BlockFn& fn) override {
    for (size_t b = 0; b < blocks_; ++b) {
      float** buf = sets_[b % sets_.size()].buf;
      fn(b * chunk_, len(b), buf[0], moments ? buf[1] : nullptr, moments ? buf[2] : nullptr, buf[3]);
    }
  }
  void read(StateKind, size_t, float*, size_t) override { ZT_CHECK(false, "the planner's NVMe tier holds no values"); }
  void write(StateKind, size_t, const float*, size_t) override {
    ZT_CHECK(false, "the planner's NVMe tier holds no values");
  }
};

class NvmeFileTier final : public NvmeTier {
 public:
  NvmeFileTier(Backend& device, const ZeroPlacement& place, const TierShape& shape, OffloadClock& clock)
      : NvmeTier(device, place, shape), clock_(clock) {
    states_ = std::make_unique<NvmeFile>(place.nvme_path,
                                         fmt::format("ztrain-states.rank{:05d}.pid{}", shape.rank, ::getpid()),
                                         3 * offset(StateKind::AdamM, 0));
    if (params_nvme_) {  // the compute shards of ZeRO-3, read at each gather
      params_ = std::make_unique<NvmeFile>(place.nvme_path,
                                           fmt::format("ztrain-params.rank{:05d}.pid{}", shape.rank, ::getpid()),
                                           uint64_t(flat_) * esize_ + 2 * NvmeFile::kAlign);
      param_io_ = std::make_unique<AsyncIo>(int(ring_.size()));
    }
  }
  ~NvmeFileTier() override {
    param_io_.reset();  // every read finished before the buffers go
    prefetch_io_.reset();
  }
  const NvmeFile* nvme_file() const override { return states_.get(); }

  void prefetch() override {
    // The first blocks' masters and moments, read into their sets while the step's last
    // micro-batch computes; stream(true, true) takes them. Reads already in flight (a skipped
    // fp16 step left them: the states did not change) are kept.
    if (!early_reads_.empty()) return;
    const size_t n = std::min(blocks_, sets_.size());
    if (!prefetch_io_) prefetch_io_ = std::make_unique<AsyncIo>(int(3 * sets_.size()));
    const StateKind kinds[3] = {StateKind::Master, StateKind::AdamM, StateKind::AdamV};
    try {
      for (size_t b = 0; b < n; ++b) {
        const size_t bytes = aligned_up(len(b) * sizeof(float));
        early_reads_.emplace_back();
        for (int k = 0; k < 3; ++k)
          early_reads_.back().push_back(prefetch_io_->read(*states_, offset(kinds[k], b * chunk_), sets_[b].buf[k], bytes));
      }
    } catch (...) {  // no read may land in the buffers later: wait for them all
      prefetch_io_.reset();
      early_reads_.clear();
      throw;
    }
  }

  void stream(bool moments, bool write_back, const BlockFn& fn) override {
    // io_depth buffer sets in a ring: block k uses set k % D. Reads run ahead (up to D - 1 blocks)
    // and writes behind (engine/offload/async_io.h); a set is refilled only after its writes
    // completed.
    const size_t C = chunk_, D = size_t(std::max(1, io_depth_));
    const int states = moments ? 3 : 1;
    const StateKind kinds[3] = {StateKind::Master, StateKind::AdamM, StateKind::AdamV};
    struct Set {
      float** buf;
      std::vector<AsyncIo::Ticket> reads, writes;
    };
    std::vector<Set> sets;
    for (StreamSet& st : sets_) sets.push_back({st.buf, {}, {}});
    // whole aligned blocks (the files are padded to the alignment)
    auto bytes = [&](size_t b) { return aligned_up(len(b) * sizeof(float)); };
    auto cbytes = [&](size_t b) { return aligned_up(len(b) * esize_); };
    // The optimizer's pass takes the first blocks' reads issued during backward (prefetch); any
    // other pass would reuse their buffers: those reads are dropped.
    const bool use_early = moments && write_back;
    if (!use_early) drop_prefetch();
    if (params_nvme_ && write_back) drop_read_ahead();  // the parameter file changes under them
    std::vector<std::vector<AsyncIo::Ticket>> early;  // taken inside the try: an error resets prefetch_io_
    std::exception_ptr error;
    {
      AsyncIo io(int(D) * (states + 1));
      auto drain = [&](std::vector<AsyncIo::Ticket>& ts, const char* what) {
        if (ts.empty()) return;
        clock_.wait(what, [&] {
          for (AsyncIo::Ticket t : ts) io.wait(t);
        });
        ts.clear();
      };
      try {
        early = std::move(early_reads_);
        early_reads_.clear();
        size_t next = 0;
        for (size_t b = 0; b < blocks_; ++b) {
          for (; next < blocks_ && next < b + sets.size(); ++next) {  // read ahead
            if (next < early.size()) continue;  // read during backward already
            Set& st = sets[next % sets.size()];
            drain(st.writes, "nvme write");
            for (int k = 0; k < states; ++k)
              st.reads.push_back(io.read(*states_, offset(kinds[k], next * C), st.buf[k], bytes(next)));
          }
          Set& st = sets[b % sets.size()];
          if (b < early.size())
            clock_.wait("nvme read", [&] {
              for (AsyncIo::Ticket t : early[b]) prefetch_io_->wait(t);
            });
          drain(st.reads, "nvme read");
          // the compute block starts clean: padding between units must not carry another block's bytes
          if (st.buf[3]) std::memset(st.buf[3], 0, len(b) * esize_);
          fn(b * C, len(b), st.buf[0], moments ? st.buf[1] : nullptr, moments ? st.buf[2] : nullptr, st.buf[3]);
          if (write_back)  // write behind
            for (int k = 0; k < states; ++k)
              st.writes.push_back(io.write(*states_, offset(kinds[k], b * C), st.buf[k], bytes(b)));
          if (params_nvme_) st.writes.push_back(io.write(*params_, uint64_t(b * C) * esize_, st.buf[3], cbytes(b)));
        }
        for (Set& st : sets) drain(st.reads, "nvme read"), drain(st.writes, "nvme write");
      } catch (...) {
        error = std::current_exception();
        prefetch_io_.reset();  // ~AsyncIo: its reads finished too
      }
    }  // ~AsyncIo: every request finished before the buffers are reused
    if (error) std::rethrow_exception(error);
  }

  void read(StateKind s, size_t flat, float* host, size_t n) override {
    if (s == StateKind::Grad) return StateTier::read(s, flat, host, n);
    states_->read_any(offset(s, flat), host, n * sizeof(float));
  }
  void write(StateKind s, size_t flat, const float* host, size_t n) override {
    if (s == StateKind::Grad) return StateTier::write(s, flat, host, n);
    drop_prefetch();  // the file changes: reads made before are stale
    states_->write_any(offset(s, flat), host, n * sizeof(float));
  }
  const void* compute_shards(std::vector<char>& scratch) override {
    if (!params_nvme_) return compute_;
    scratch.resize(flat_ * esize_);
    params_->read_any(0, scratch.data(), scratch.size());
    return scratch.data();
  }

  void read_ahead(int g, uint64_t begin, size_t bytes) override {
    if (!params_nvme_ || reading_slot(g)) return;
    Slot& s = ring_[size_t(next_slot_++ % ring_.size())];
    // The buffer's previous group: uploaded (wait for the copy), or only read ahead and never
    // taken (its read is dropped; take() reads it again).
    if (s.reading) param_io_->wait(s.read), s.reading = false;
    clock_.wait("parameters to device", [&] { device_.wait_upload(s.upload); });
    s.upload = 0;
    s.owner = g;
    const uint64_t lo = begin / NvmeFile::kAlign * NvmeFile::kAlign, hi = aligned_up(size_t(begin + bytes));
    s.host = static_cast<const char*>(s.buf) + (begin - lo);
    s.read = param_io_->read(*params_, lo, s.buf, size_t(hi - lo));
    s.reading = true;
  }
  const void* take(int g, uint64_t begin, size_t bytes) override {
    if (!params_nvme_) return StateTier::take(g, begin, bytes);
    read_ahead(g, begin, bytes);  // unless it was read ahead
    Slot* s = reading_slot(g);
    clock_.wait("parameters from nvme", [&] { param_io_->wait(s->read); });
    s->reading = false;
    taken_ = s;
    return s->host;
  }
  void uploaded(int g, uint64_t upload) override {
    if (taken_ && taken_->owner == g) taken_->upload = upload;
  }

 private:
  uint64_t offset(StateKind s, size_t flat) const {
    // three regions, each aligned: masters, then m, then v
    const uint64_t region = aligned_up(flat_ * sizeof(float));
    const int k = s == StateKind::Master ? 0 : s == StateKind::AdamM ? 1 : 2;
    return uint64_t(k) * region + uint64_t(flat) * sizeof(float);
  }
  void drop_prefetch() {
    // the reads must finish before their buffers are reused (or the file written)
    for (auto& ts : early_reads_)
      for (AsyncIo::Ticket t : ts) prefetch_io_->wait(t);
    early_reads_.clear();
  }
  void drop_read_ahead() {
    for (Slot& s : ring_)
      if (s.reading) param_io_->wait(s.read), s.reading = false, s.owner = -1;
  }

  OffloadClock& clock_;
  std::unique_ptr<NvmeFile> states_;  // masters, m, v
  std::unique_ptr<NvmeFile> params_;  // params on NVMe: ZeRO-3's compute shards
  std::unique_ptr<AsyncIo> param_io_, prefetch_io_;
  std::vector<std::vector<AsyncIo::Ticket>> early_reads_;  // per block from 0: masters, m, v
  Slot* taken_ = nullptr;
};

}  // namespace

std::unique_ptr<StateTier> make_nvme_tier(Backend& device, const ZeroPlacement& place, const TierShape& shape,
                                          OffloadClock& clock) {
  if (place.count_only) return std::make_unique<CountedNvmeTier>(device, place, shape);
  return std::make_unique<NvmeFileTier>(device, place, shape, clock);
}

}  // namespace zt
