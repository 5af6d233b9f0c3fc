// Saving checkpoints (layout in checkpoint.h). Every rank writes its own blocks; rank 0 then
// writes checkpoint.h5 and makes the checkpoint visible (rename, then `latest`), so a crash of
// any rank at any moment of a save leaves the previous checkpoint as it was.
//
// Async (the default): save() copies this rank's states into host buffers (the only pause the
// training step sees) and a background thread writes and fsyncs the rank file. The trainer
// agrees at each step boundary whether every rank is done (one small all-reduce it does anyway)
// and calls complete(); rank 0 then commits (checkpoint.h5, renames, fsyncs) on a background
// thread too. A new save first finishes the previous one, commit included; each save has its own
// buffers and directory, so nothing is reused while still being written.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_files.h"
#include "data/store/object_store.h"
#include "engine/checkpoint/pieces.h"
#include "engine/backend/backend.h"
#include "engine/comm/topology.h"
#include "engine/config/spec.h"
#include "engine/model/model.h"
#include "engine/model/model_states.h"

namespace zt {

// What one save cost, reported when it completes.
struct SaveStats {
  int64_t step = 0;
  bool async = true;
  double stall_ms = 0;   // the training loop's pause in save() (async: the copy to host buffers)
  double write_s = 0;    // this rank's file: write + fsync (+ upload to s3://) (async: in the background)
  double commit_ms = 0;  // rank 0: checkpoint.h5, renames, fsyncs (in the background)
  double bytes = 0;      // this rank's file
};

// Writes `bytes` to a probe file at `path` as a save writes a rank file (the same threads,
// chunks, checksums, write-back hints and fsync), removes it, and returns the seconds it took:
// the measured write rate of a save's time estimate.
double time_probe_write(const std::string& path, size_t bytes);

class CheckpointWriter {
 public:
  // opts.dir is the local directory; `remote` (may be null) receives every checkpoint too.
  CheckpointWriter(const RunSpec::Checkpoint& opts, ModelStates& store, const ParamTable& model, const Topology& topo,
                   Backend& backend, int64_t job_id, data::ObjectStore* remote = nullptr);
  ~CheckpointWriter();  // waits for the background threads

  // Saves the current states as checkpoint `state.step` (collective: every rank, same step).
  // Synchronous mode, and wait = true, return with the checkpoint complete and visible.
  void save(const TrainState& state, bool wait);
  bool pending() const { return pending_; }
  // This rank's part of the pending save is on disk (or failed: error() says why).
  bool local_done() const { return !pending_ || done_.load(); }
  bool local_failed() const { return pending_ && done_.load() && !error_.empty(); }
  // After every rank agreed that every part is done: rank 0 starts writing checkpoint.h5 and
  // making the checkpoint visible, in the background. Throws RuntimeFailure when a rank failed to
  // write its part.
  void complete(bool any_failed);
  // Rank 0: reports a finished commit (on_complete), waiting for it when `wait`; a failure is
  // kept for commit_failed(), which the trainer's per-step agreement shares, so that every rank
  // stops (a rank-0-only throw would leave the others waiting in a collective).
  void poll_commit(bool wait);
  bool commit_failed() const { return !commit_error_.empty() && commit_reported_; }
  [[noreturn]] void throw_commit_failure() const;
  // Waits for the pending save and completes it, commit included (collective: every rank agrees
  // on failures).
  void finish();
  const std::string& last_complete() const { return last_complete_; }
  double host_buffer_mib() const { return host_bytes_ / 1048576.0; }
  double last_stall_ms() const { return stall_ms_; }  // what the last save() cost the caller
  double rank_bytes() const { return double(3 * total_elems_ * sizeof(float)); }  // this rank's part of a save
  std::function<void(const SaveStats&)> on_complete;

 private:
  struct Snapshot;
  void write_rank_file(const std::string& path, const Snapshot* snap);
  void commit();  // rank 0
  void gather_blocks();  // collective: every rank's blocks, into all_blocks_ on rank 0
  // After finish(): this machine's parts of finished saves, but the directory named `keep`.
  void remove_other_machines_parts(const std::string& keep);
  void prune();   // rank 0: keep_last

  RunSpec::Checkpoint opts_;
  ModelStates& store_;
  const ParamTable& model_;
  const Topology& topo_;
  Backend& be_;
  int64_t job_id_;
  data::ObjectStore* remote_;
  std::vector<ModelStates::GlobalRun> runs_;  // the ones this rank owns
  std::vector<Piece> pieces_;
  std::vector<std::vector<RankBlock>> all_blocks_;  // rank 0: (rank): each rank file's blocks

  bool pending_ = false;
  std::atomic<bool> done_{false};
  std::string error_;
  std::thread thread_;
  std::thread commit_thread_;
  std::atomic<bool> committed_{false};
  std::string commit_error_;
  bool commit_reported_ = false;  // commit_error_ belongs to a joined commit
  SaveStats commit_stats_;
  std::unique_ptr<Snapshot> snap_;
  TrainState state_;
  std::string tmp_dir_;
  std::string last_complete_;
  size_t host_bytes_ = 0;
  size_t total_elems_ = 0;  // of this rank's pieces
  double stall_ms_ = 0;
  double write_s_ = 0, file_bytes_ = 0;
};

}  // namespace zt
