// A run's checkpoints from the trainer's side: where they live ([checkpoint] dir, a local
// directory or s3://), which one a launch resumes from, setting aside a newer history after an
// older resume, and, after each step, when to save or stop (the ranks agree on it). Saving
// itself is the CheckpointWriter's; loading, the reader's.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "data/store/object_store.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_writer.h"
#include "engine/comm/topology.h"
#include "engine/config/spec.h"
#include "engine/core/dir_lock.h"
#include "engine/core/timer.h"

namespace zt {

class CheckpointManager {
 public:
  // Collective over the world: one id for the job (rank 0's time and pid, which name this job's
  // unfinished saves), the local checkpoint directory and, for s3://, the store.
  CheckpointManager(const RunSpec& spec, const Topology& topo);
  ~CheckpointManager();

  bool enabled() const { return !spec_.checkpoint.dir.empty(); }
  int64_t job_id() const { return job_id_; }

  // The local checkpoint directory `wanted` names, verified by the ranks together (collective):
  // "auto": the newest complete checkpoint in [checkpoint] dir that verifies ("" when there is
  // none yet; UserError when none of several verifies); a path or s3:// URI (a checkpoint, or a
  // directory with `latest`): that checkpoint, downloaded first when remote.
  std::string find(const std::string& wanted);

  // The newest complete checkpoint that verifies among those written after fewer than `step`
  // steps ("" when none is kept), once the pending save is complete: where a rollback goes.
  // Collective.
  std::string newest_before(int64_t step);

  // After resuming from `step`: newer checkpoints of the old history are renamed aside (rank 0),
  // so that neither resume = "auto" nor keep_last mistakes them for this run's.
  void set_aside_newer(int64_t step);

  // Starts saving (after the states exist); on_complete gets rank 0's finished saves.
  void start_writer(ModelStates& store, const ParamTable& model, Backend& backend,
                    std::function<void(const SaveStats&)> on_complete);
  CheckpointWriter* writer() { return writer_.get(); }
  // [checkpoint] preemption_notice_s: the estimated seconds from a signal to a durable save
  // (start_writer measures it with a probe, then each completed save replaces it with its own
  // time, rank 0's; -1 without a notice).
  double estimated_save_s() const { return estimate_s_; }

  // After step `done` (1-based, not the run's last), with launch starting at start_step: the ranks
  // agree in one small all-reduce on a signal on any rank, rank 0's every_minutes clock and the
  // pending save's completion, then save as [checkpoint] says (state(): what a checkpoint after
  // `done` steps holds). Returns true when the run must stop now (a signal, exit_after, or
  // `data_failed` on some rank: its loader failed for good ahead of use), its checkpoint written.
  bool after_step(int64_t done, int64_t start_step, const std::function<TrainState()>& state,
                  double* stall_ms, bool data_failed = false);
  // The last save of a run (waits for it).
  void save_final(const TrainState& state) { writer_->save(state, /*wait=*/true); }

 private:
  std::string choose(int64_t before = INT64_MAX);     // "auto": the newest with step < before
  std::string local_copy(const std::string& wanted);  // a path or URI
  void warn_if_mpirun_kills_early() const;  // rank 0, with a preemption notice: mpirun's SIGKILL
  void remove_stale_probes() const;  // rank 0, holding the directory's lock
  void probe_local(const std::string& key) const;     // UserError when this rank cannot write root_
  void probe_store() const;                           // rank 0: UserError when uploads fail
  // Collective: every rank writes a probe the size of its part of a save (at most 1 GiB) at
  // once, rank 0 also uploads one (s3://); logs the estimated save time against the notice.
  void estimate_save();

  const RunSpec& spec_;
  const Topology& topo_;
  int64_t job_id_ = 0;
  std::string root_;                           // the local checkpoint directory
  DirLock lock_;                               // rank 0: root_/.checkpoint.lock while the run lasts
  std::unique_ptr<data::ObjectStore> store_;   // s3:// (declared before writer_: destroyed after its threads end)
  std::unique_ptr<CheckpointWriter> writer_;
  Timer since_save_;
  double estimate_s_ = -1;
};

}  // namespace zt
