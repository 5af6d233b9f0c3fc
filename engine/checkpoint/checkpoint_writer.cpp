// CheckpointWriter (see checkpoint_writer.h).
#include "engine/checkpoint/checkpoint_writer.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/checkpoint/checkpoint_files.h"
#include "engine/checkpoint/h5_file.h"
#include "engine/checkpoint/remote.h"
#include "engine/core/faults.h"
#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/core/timer.h"

namespace zt {

namespace fs = std::filesystem;

namespace {
constexpr size_t kChunkElems = size_t(16) << 20 >> 2;  // 16 MiB chunks: a synchronous save's buffers
constexpr int kWriteThreads = 4;                        // hold at most 4 of them (64 MiB)
constexpr ModelStates::State kStates[] = {ModelStates::State::Master, ModelStates::State::AdamM,
                                         ModelStates::State::AdamV};

// The crash tests' hook (faults().pause_save): that rank stops in the middle of writing its part of
// that checkpoint (after the parameters, before the moments).
void pause_if_asked(int rank, int64_t step) {
  if (!faults().pause_save.hits(rank, step)) return;
  std::fprintf(stderr, "ztrain: test hook: rank %d (pid %d) pauses in the middle of saving step %lld\n", rank,
               int(::getpid()), (long long)step);
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::minutes(10));
}
}  // namespace

// Async saves: this rank's pieces of each state, concatenated in piece order, in host memory.
struct CheckpointWriter::Snapshot {
  Backend& be;
  float* data[3] = {nullptr, nullptr, nullptr};
  explicit Snapshot(Backend& b) : be(b) {}
  ~Snapshot() {
    for (float* p : data) be.free(p);
  }
};

CheckpointWriter::CheckpointWriter(const RunSpec::Checkpoint& opts, ModelStates& store, const ParamTable& model,
                                   const Topology& topo, Backend& backend, int64_t job_id,
                                   data::ObjectStore* remote)
    : opts_(opts), store_(store), model_(model), topo_(topo), be_(backend), job_id_(job_id), remote_(remote) {
  // The real part of each tensor (a prefix of it: padding rows are left out of checkpoints).
  std::vector<RunRef> refs;
  for (const auto& r : store.global_runs()) {
    const size_t stored = model.params()[size_t(r.param)].stored_numel;
    if (r.owner && r.global_begin < stored)
      runs_.push_back(r), refs.push_back({r.param, r.global_begin, std::min(r.n, stored - r.global_begin)});
  }
  std::vector<TensorShape> shapes;
  for (const auto& p : model.params()) shapes.push_back({p.stored_shape});
  pieces_ = make_pieces(refs, shapes);
  for (const Piece& p : pieces_) total_elems_ += p.numel();
  gather_blocks();
  host_bytes_ = kWriteThreads * kChunkElems * sizeof(float);  // synchronous saves: the writers' chunks
  if (opts_.async) {
    // The host buffers of async saves, allocated once: allocating (and first touching) them takes
    // longer than the copy itself. A save waits for the previous one before refilling them.
    snap_ = std::make_unique<Snapshot>(be_);
    size_t total = 0;
    for (const Piece& p : pieces_) total += p.numel();
    host_bytes_ = 3 * total * sizeof(float);
    for (float*& d : snap_->data)
      d = static_cast<float*>(be_.alloc(std::max<size_t>(total, 1) * sizeof(float), MemTag::Other, MemKind::PinnedHost));
  }
}

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();
  if (commit_thread_.joinable()) commit_thread_.join();
}

namespace {
// Elements [e0, e1) of piece `p` of state `st` where they already are in host memory (the CPU
// backend, the range within one run; not the NVMe tier), or null.
const float* in_place(const Backend& be, const ModelStates& store, const std::vector<ModelStates::GlobalRun>& runs,
                      const Piece& p, ModelStates::State st, size_t e0, size_t e1) {
  if (!be.host_accessible()) return nullptr;
  size_t at = 0;
  for (const Piece::Source& s : p.sources) {
    if (e0 >= at && e1 <= at + s.n) {
      const float* d = store.run_data(st, runs[s.run]);  // null: not in memory (the NVMe tier)
      return d ? d + s.off + (e0 - at) : nullptr;
    }
    at += s.n;
  }
  return nullptr;
}

// Elements [e0, e1) of piece `p` (row-major in the block) of state `st`, from its runs.
void copy_piece_range(const ModelStates& store, const std::vector<ModelStates::GlobalRun>& runs, const Piece& p,
                      ModelStates::State st, size_t e0, size_t e1, float* dst) {
  size_t at = 0;  // element index of the current source's first element within the piece
  for (const Piece::Source& s : p.sources) {
    const size_t lo = std::max(e0, at), hi = std::min(e1, at + s.n);
    if (lo < hi) store.read_run(st, runs[s.run], s.off + (lo - at), hi - lo, dst + (lo - e0));
    at += s.n;
  }
}
}  // namespace

void CheckpointWriter::write_rank_file(const std::string& path, const Snapshot* snap) {
  Timer timer;
  // 1. HDF5 lays the file out: one contiguous dataset per piece and state, allocated now.
  struct Target {
    const Piece* piece;
    int state;
    std::string name;
    int64_t offset = 0;
    size_t snap_off = 0;
  };
  std::vector<Target> targets;
  {
    H5File f(path, H5File::Mode::Create);
    for (int si = 0; si < 3; ++si) {
      std::map<int, int> count;  // pieces per tensor so far
      size_t snap_off = 0;
      for (const Piece& p : pieces_) {
        const ParamInfo& info = model_.params()[size_t(p.param)];
        Target t{&p, si, fmt::format("/{}/{}/{}", kCheckpointStates[si], info.name, count[p.param]++), 0, snap_off};
        const bool two_d = info.stored_shape.size() == 2;
        f.create_floats(t.name, two_d ? std::vector<int64_t>{p.rows, p.cols} : std::vector<int64_t>{p.cols});
        f.set_attr(t.name, "row0", p.row0);
        f.set_attr(t.name, "col0", p.col0);
        t.offset = f.offset(t.name);
        snap_off += p.numel();
        targets.push_back(std::move(t));
      }
    }
    // which save this file belongs to: verify and load refuse a rank file of another one
    f.set_attr("/", "job_id", job_id_);
    f.set_attr("/", "step", state_.step);
    f.set_attr("/", "rank", topo_.world_rank);
    f.close();
  }
  // 2. The bytes go straight to their places (HDF5's own write path is slower than the disk), in
  // chunks of at most kChunkElems written by a few threads (one thread cannot keep up with the
  // page cache), each chunk's CRC-32 computed by the thread that writes it and combined in order.
  struct Job {
    size_t target, e0, e1;
    uLong crc = 0;
  };
  std::vector<Job> jobs;
  for (size_t k = 0; k < targets.size(); ++k)
    for (size_t e0 = 0; e0 < targets[k].piece->numel(); e0 += kChunkElems)
      jobs.push_back({k, e0, std::min(targets[k].piece->numel(), e0 + kChunkElems)});
  const int fd = ::open(path.c_str(), O_WRONLY);
  if (fd < 0) throw RuntimeFailure(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::atomic<size_t> next{0};
  std::string failure;
  std::mutex failure_mu;
  auto worker = [&] {
    std::vector<float> chunk;
    for (size_t i; (i = next++) < jobs.size();) {
      Job& j = jobs[i];
      const Target& t = targets[j.target];
      if (t.state > 0 && j.e0 == 0 && (j.target == 0 || targets[j.target - 1].state != t.state))
        pause_if_asked(topo_.world_rank, state_.step);  // test hook: parameters written, moments not
      try {
        const float* src;
        if (snap) {
          src = snap->data[t.state] + t.snap_off + j.e0;
        } else if ((src = in_place(be_, store_, runs_, *t.piece, kStates[t.state], j.e0, j.e1))) {
          // read where it is: a synchronous save holds the training loop, nothing changes it
        } else {
          chunk.resize(j.e1 - j.e0);
          copy_piece_range(store_, runs_, *t.piece, kStates[t.state], j.e0, j.e1, chunk.data());
          src = chunk.data();
        }
        const size_t bytes = (j.e1 - j.e0) * sizeof(float);
        j.crc = crc32_z(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(src), bytes);
        const char* at = reinterpret_cast<const char*>(src);
        for (size_t done = 0; done < bytes;) {
          const ssize_t w = ::pwrite(fd, at + done, bytes - done, off_t(t.offset + int64_t(j.e0 * sizeof(float) + done)));
          if (w <= 0) throw RuntimeFailure(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
          done += size_t(w);
        }
        // start the disk writing this chunk now: the final fsync then waits for less
        ::sync_file_range(fd, off_t(t.offset + int64_t(j.e0 * sizeof(float))), off_t(bytes), SYNC_FILE_RANGE_WRITE);
      } catch (const std::exception& e) {
        std::lock_guard lock(failure_mu);
        if (failure.empty()) failure = e.what();
        next = jobs.size();
      }
    }
  };
  {
    std::vector<std::thread> pool;
    for (int w = 0; w < kWriteThreads; ++w) pool.emplace_back(worker);
    for (auto& th : pool) th.join();
  }
  ::close(fd);
  if (!failure.empty()) throw RuntimeFailure(failure);
  std::vector<int64_t> crcs(targets.size());
  {
    std::vector<uLong> acc(targets.size(), crc32(0L, Z_NULL, 0));
    for (const Job& j : jobs)  // jobs are in target order, chunks in element order
      acc[j.target] = crc32_combine(acc[j.target], j.crc, z_off_t((j.e1 - j.e0) * sizeof(float)));
    for (size_t k = 0; k < targets.size(); ++k) crcs[k] = int64_t(acc[k]);
  }
  // 3. The checksums, then everything to disk.
  {
    H5File f(path, H5File::Mode::Update);
    for (size_t k = 0; k < targets.size(); ++k) f.set_attr(targets[k].name, "crc32", crcs[k]);
    f.close();
  }
  fsync_path(path);
  if (remote_)  // under its final name: the checkpoint counts as complete there once checkpoint.h5 does
    remote_->put(fmt::format("{}/{}", checkpoint_name(state_.step), rank_file_name(topo_.world_rank)), path);
  write_s_ = timer.seconds();
  std::error_code ec;
  file_bytes_ = double(fs::file_size(path, ec));
}

void CheckpointWriter::gather_blocks() {
  // (rank): its block count, then (block, 5): each block's param, row0, col0, rows, cols; every
  // rank fills its own part and a sum gathers them (exact: all below 2^53)
  const size_t world = size_t(topo_.world_size), me = size_t(topo_.world_rank);
  std::vector<double> counts(world, 0.0);
  counts[me] = double(pieces_.size());
  topo_.world->all_reduce_doubles(counts.data(), counts.size());
  size_t first = 0, total = 0;
  for (size_t r = 0; r < world; ++r) {
    if (r < me) first += size_t(counts[r]);
    total += size_t(counts[r]);
  }
  std::vector<double> flat(5 * total, 0.0);
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const Piece& p = pieces_[i];
    double* x = &flat[5 * (first + i)];
    x[0] = p.param, x[1] = double(p.row0), x[2] = double(p.col0), x[3] = double(p.rows), x[4] = double(p.cols);
  }
  topo_.world->all_reduce_doubles(flat.data(), flat.size());
  if (!topo_.is_root()) return;
  all_blocks_.assign(world, {});
  for (size_t r = 0, at = 0; r < world; ++r)
    for (size_t i = 0; i < size_t(counts[r]); ++i, ++at) {
      const double* x = &flat[5 * at];
      all_blocks_[r].push_back({int(x[0]), int64_t(x[1]), int64_t(x[2]), int64_t(x[3]), int64_t(x[4])});
    }
}

double time_probe_write(const std::string& path, size_t bytes) {
  Timer timer;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw RuntimeFailure(fmt::format("{}: cannot create: {}", path, std::strerror(errno)));
  // a different pattern per chunk: nothing on the way may compress or deduplicate it
  const size_t chunk = kChunkElems * sizeof(float), n = (bytes + chunk - 1) / chunk;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::atomic<int> error{0};  // the failing worker's errno (errno is per thread)
  auto worker = [&] {
    std::vector<uint32_t> buf(kChunkElems);
    for (size_t i; (i = next++) < n && !failed;) {
      const size_t len = std::min(chunk, bytes - i * chunk);
      for (size_t k = 0; k < len / 4; ++k) buf[k] = uint32_t(k * 2654435761u + i);
      (void)crc32_z(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(buf.data()), len);
      const char* at = reinterpret_cast<const char*>(buf.data());
      for (size_t done = 0; done < len;) {
        const ssize_t w = ::pwrite(fd, at + done, len - done, off_t(i * chunk + done));
        if (w <= 0) {
          error = w < 0 ? errno : ENOSPC;  // a short write of nothing: the disk is full
          failed = true;
          break;
        }
        done += size_t(w);
      }
      ::sync_file_range(fd, off_t(i * chunk), off_t(len), SYNC_FILE_RANGE_WRITE);
    }
  };
  {
    std::vector<std::thread> pool;
    for (int w = 0; w < kWriteThreads; ++w) pool.emplace_back(worker);
    for (auto& th : pool) th.join();
  }
  const bool synced = ::fsync(fd) == 0;
  if (!synced && !failed) error = errno;
  ::close(fd);
  ::unlink(path.c_str());
  if (failed || !synced)
    throw RuntimeFailure(fmt::format("{}: the write probe failed: {}", path, std::strerror(error.load())));
  return timer.seconds();
}

void CheckpointWriter::save(const TrainState& state, bool wait) {
  Timer timer;
  finish();  // the previous save, if still pending, commit included
  state_ = state;
  const fs::path dir(opts_.dir);
  const std::string tmp_name = fmt::format("{}.tmp-{}", checkpoint_name(state.step), job_id_);
  remove_other_machines_parts(tmp_name);
  tmp_dir_ = (dir / tmp_name).string();
  const std::string path = (fs::path(tmp_dir_) / rank_file_name(topo_.world_rank)).string();
  pending_ = true;
  done_ = false;
  error_.clear();
  std::error_code ec;
  fs::create_directories(tmp_dir_, ec);
  if (ec) {  // this rank's part failed: the ranks learn it together (finish / the step agreement)
    error_ = fmt::format("{}: cannot create: {}", tmp_dir_, ec.message());
    done_ = true;
  } else if (opts_.async) {
    // the step pays for this copy only (in chunks, by a few threads); the write runs in the background
    struct Copy {
      int state;
      const Piece* piece;
      size_t e0, e1, dst;
    };
    std::vector<Copy> copies;
    for (int si = 0; si < 3; ++si) {
      size_t off = 0;
      for (const Piece& p : pieces_) {
        for (size_t e0 = 0; e0 < p.numel(); e0 += kChunkElems)
          copies.push_back({si, &p, e0, std::min(p.numel(), e0 + kChunkElems), off + e0});
        off += p.numel();
      }
    }
    std::atomic<size_t> next{0};
    auto copier = [&] {
      for (size_t i; (i = next++) < copies.size();) {
        const Copy& c = copies[i];
        copy_piece_range(store_, runs_, *c.piece, kStates[c.state], c.e0, c.e1, snap_->data[c.state] + c.dst);
      }
    };
    std::vector<std::thread> pool;
    for (int w = 1; w < kWriteThreads; ++w) pool.emplace_back(copier);
    copier();
    for (auto& th : pool) th.join();
    stall_ms_ = timer.ms();
    thread_ = std::thread([this, path] {
      try {
        write_rank_file(path, snap_.get());
      } catch (const std::exception& e) {
        error_ = e.what();
      }
      done_ = true;
    });
  } else {
    try {
      write_rank_file(path, nullptr);
    } catch (const std::exception& e) {
      error_ = e.what();
    }
    done_ = true;
  }
  if (!opts_.async) stall_ms_ = timer.ms();  // the write; the commit is reported apart
  if (!opts_.async || wait) {
    finish();
    remove_other_machines_parts("");
  }
}

void CheckpointWriter::finish() {
  if (pending_) {
    if (thread_.joinable()) thread_.join();
    double failed = local_failed() ? 1 : 0;
    topo_.world->all_reduce_doubles(&failed, 1);
    complete(failed > 0);  // throws on every rank alike when one failed
  }
  poll_commit(/*wait=*/true);
  double failed = commit_failed() ? 1 : 0;
  topo_.world->all_reduce_doubles(&failed, 1);
  if (failed > 0) throw_commit_failure();
}

void CheckpointWriter::remove_other_machines_parts(const std::string& keep) {
  // With a local directory per machine (an s3:// dir), rank 0 renamed only its own machine's
  // step_X.tmp-JOB: this machine's ranks' files stay there, in the store already. Called after
  // finish(), whose last all-reduce follows rank 0's commit, so this job's .tmp directories here
  // are finished saves, but `keep`: the one this machine's other ranks may be writing now. One
  // holding rank 0's file is rank 0's own (a directory shared with it): never touched.
  if (topo_.local_rank != 0 || topo_.is_root()) return;
  std::error_code ec;
  const std::string suffix = fmt::format(".tmp-{}", job_id_);
  for (const auto& e : fs::directory_iterator(opts_.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name != keep && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        !fs::exists(e.path() / rank_file_name(0), ec))
      fs::remove_all(e.path(), ec);
  }
}

void CheckpointWriter::throw_commit_failure() const {
  // called by every rank once they agreed that rank 0's commit failed
  if (!commit_failed()) throw PeerFailure(1, "checkpoint: rank 0 failed to commit a checkpoint");
  throw AgreedFailure(fmt::format("checkpoint of step {}: {}", commit_stats_.step, commit_error_));
}

void CheckpointWriter::complete(bool any_failed) {
  if (!pending_) return;
  if (thread_.joinable()) thread_.join();
  if (any_failed) {
    pending_ = false;
    // every rank is done with this save (they agreed it failed): its unfinished directory goes
    std::error_code ec;
    if (topo_.is_root()) fs::remove_all(tmp_dir_, ec);
    if (error_.empty()) throw PeerFailure(1, fmt::format("checkpoint of step {}: another rank failed", state_.step));
    throw AgreedFailure(fmt::format("checkpoint of step {}: {}", state_.step, error_));
  }
  pending_ = false;
  const std::string path = (fs::path(opts_.dir) / checkpoint_name(state_.step)).string();
  if (!topo_.is_root()) {
    last_complete_ = path;
    return;
  }
  commit_stats_ = {state_.step, opts_.async, stall_ms_, write_s_, 0, file_bytes_};
  committed_ = false;
  commit_error_.clear();
  commit_reported_ = false;
  commit_thread_ = std::thread([this, path] {
    Timer timer;
    try {
      commit();
    } catch (const std::exception& e) {
      commit_error_ = e.what();
      std::error_code ec;
      fs::remove_all(tmp_dir_, ec);  // still there when the commit failed before its rename
    }
    commit_stats_.commit_ms = timer.ms();
    if (commit_error_.empty()) last_complete_ = path;
    committed_ = true;
  });
}

void CheckpointWriter::poll_commit(bool wait) {
  if (!commit_thread_.joinable() || (!wait && !committed_)) return;
  commit_thread_.join();
  commit_reported_ = true;
  if (commit_error_.empty() && on_complete) on_complete(commit_stats_);
}

void CheckpointWriter::commit() {
  Timer timer;
  const fs::path tmp(tmp_dir_), dir(opts_.dir);
  const fs::path final_dir = dir / checkpoint_name(state_.step);
  write_master_file(tmp.string(), all_blocks_, job_id_, model_, state_);
  fsync_path(tmp.string());
  std::error_code ec;
  if (fs::exists(final_dir)) {  // the same step saved again (a resumed run): replace it
    const fs::path old = dir / fmt::format("{}.old-{}", checkpoint_name(state_.step), job_id_);
    fs::rename(final_dir, old);
    fs::rename(tmp, final_dir, ec);
    if (ec) {  // the previous save of this step goes back where it was
      const std::string why = ec.message();
      fs::rename(old, final_dir, ec);
      throw RuntimeFailure(fmt::format("{}: cannot rename {} to it: {}", final_dir.string(), tmp.string(), why));
    }
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp, final_dir);
  }
  fsync_path(dir.string());
  write_latest(dir.string(), checkpoint_name(state_.step));
  double bytes = 0;
  for (const auto& e : fs::directory_iterator(final_dir)) bytes += double(e.file_size(ec));
  if (remote_) {  // checkpoint.h5 last: it makes the checkpoint complete in the store
    remote_->put(checkpoint_name(state_.step) + "/checkpoint.h5", (final_dir / "checkpoint.h5").string());
    remote_->put("latest", (dir / "latest").string());
  }
  spdlog::info("checkpoint: step {} complete in {}{} ({:.1f} MiB)", state_.step, final_dir.string(),
               remote_ ? " and " + remote_->describe(checkpoint_name(state_.step)) : "", bytes / 1048576.0);
  prune();
  if (remote_) prune_remote(*remote_, opts_.keep_last);
}

void CheckpointWriter::prune() {
  const auto all = list_checkpoints(opts_.dir);
  std::vector<CheckpointEntry> complete;
  for (const auto& c : all) {
    std::error_code ec;
    if (c.complete) complete.push_back(c);
    // left by a job that died while saving (this job holds the directory's lock: no other runs)
    else if (c.job_id != job_id_) fs::remove_all(c.path, ec);
  }
  if (opts_.keep_last <= 0 || int64_t(complete.size()) <= opts_.keep_last) return;
  for (size_t i = 0; i + size_t(opts_.keep_last) < complete.size(); ++i) {
    if (complete[i].step == state_.step) continue;  // never the one just committed
    std::error_code ec;
    fs::remove_all(complete[i].path, ec);
  }
}

}  // namespace zt
