// Saving checkpoints (layout in checkpoint.h). Every rank writes its own blocks; rank 0 then
// writes checkpoint.h5 and makes the checkpoint visible (rename, then `latest`), so a crash of
// any rank at any moment of a save leaves the previous checkpoint as it was.
//
// Async (the default): save() copies this rank's states into host buffers (the only pause the
// training step sees) and a background thread writes and fsyncs the rank file. The trainer
// agrees at each step boundary whether every rank is done (one small all-reduce it does anyway)
// and calls complete(). A new save first finishes the previous one; each save has its own
// buffers and directory, so nothing is reused while still being written.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/pieces.h"
#include "engine/comm/topology.h"
#include "engine/config/spec.h"
#include "engine/model/model.h"
#include "engine/parallel/param_store.h"

namespace zt {

class CheckpointWriter {
 public:
  CheckpointWriter(const RunSpec::Checkpoint& opts, ParamStore& store, const Model& model, const Topology& topo,
                   Backend& backend, int64_t job_id);
  ~CheckpointWriter();  // waits for the background write (does not commit)

  // Saves the current states as checkpoint `state.step` (collective: every rank, same step).
  // Synchronous mode, and wait = true, return with the checkpoint complete and visible.
  void save(const TrainState& state, bool wait);
  bool pending() const { return pending_; }
  // This rank's part of the pending save is on disk (or failed: error() says why).
  bool local_done() const { return !pending_ || done_.load(); }
  bool local_failed() const { return pending_ && done_.load() && !error_.empty(); }
  // After every rank agreed that every part is done: rank 0 writes checkpoint.h5 and makes the
  // checkpoint visible. Throws RuntimeFailure when a rank failed to write its part.
  void complete(bool any_failed);
  // Waits for the pending save and completes it (collective).
  void finish();
  const std::string& last_complete() const { return last_complete_; }
  double host_buffer_mib() const { return host_bytes_ / 1048576.0; }
  double last_stall_ms() const { return stall_ms_; }  // what the last save() cost the caller

 private:
  struct Snapshot;
  void write_rank_file(const std::string& path, const Snapshot* snap);
  void commit();  // rank 0
  void prune();   // rank 0: keep_last

  RunSpec::Checkpoint opts_;
  ParamStore& store_;
  const Model& model_;
  const Topology& topo_;
  Backend& be_;
  int64_t job_id_;
  std::vector<ParamStore::GlobalRun> runs_;  // the ones this rank owns
  std::vector<Piece> pieces_;

  bool pending_ = false;
  std::atomic<bool> done_{false};
  std::string error_;
  std::thread thread_;
  std::unique_ptr<Snapshot> snap_;
  TrainState state_;
  std::string tmp_dir_;
  std::string last_complete_;
  size_t host_bytes_ = 0;
  double stall_ms_ = 0;
};

}  // namespace zt
