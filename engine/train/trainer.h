// The training loop: the job (engine/job/job.h) built over this run's backend and communicators
// (run_job.h),
// then steps (engine/job/step.h) over the data with progress lines, metrics.jsonl, periodic
// evaluation, checkpoints, skips and rollbacks, and a generated sample at the end. Every rank runs
// it; rank 0 prints and writes files.
#pragma once
#include <functional>
#include <memory>

#include "data/loader.h"
#include "engine/checkpoint/checkpoint_manager.h"
#include "engine/core/dir_lock.h"
#include "engine/job/step.h"
#include "engine/observe/step_breakdown.h"
#include "engine/observe/throughput.h"
#include "engine/train/run_hooks.h"
#include "engine/train/start_weights.h"
#include "engine/train/run_job.h"
#include "engine/train/training_data.h"

namespace zt {

class Trainer {
 public:
  // Builds topology, backend, communicators, the job (parameters initialized from run.seed, or
  // resumed) and the datasets. UserError (exit 2) for layouts that do not fit the world size or
  // the batch.
  explicit Trainer(const RunSpec& spec);
  ~Trainer();

  // One optimizer step over global_batch sequences; this rank does its data-parallel slice.
  StepResult step(int64_t step);
  // The whole run: rank 0 writes config.resolved.toml and metrics.jsonl under run.out_dir;
  // checkpoints as [checkpoint] says, and on SIGTERM / SIGINT / SIGUSR1.
  void run();
  // The step training continues with (0, or the resumed checkpoint's).
  int64_t start_step() const { return start_step_; }
  // Everything a checkpoint written after `steps_done` steps holds besides the model states.
  // Runs the probe's forward passes: every rank calls it.
  TrainState train_state(int64_t steps_done);

  Job& job() { return *run_.job; }
  Model& model() { return *run_.job->model; }
  ParamStore& store() { return *run_.job->store; }
  Backend& backend() { return *run_.backend; }
  const Topology& topology() const { return topo_; }
  TrainingData& data() { return *data_; }

  // Called with each micro-batch before it is used.
  std::function<void(const MicroBatch&)> on_batch;

 private:
  void build();  // everything after the topology (the part that may fail on one rank only)
  // Runs f on every rank and agrees on the outcome: when it threw somewhere, every rank throws
  // (the failing ones their own error; the others PeerFailure with its exit status), so a job
  // prints one message and never leaves ranks waiting in a collective.
  void agreed(const std::function<void()>& f);
  void resume_or_init();             // [checkpoint] resume / init_from
  // After the model states of checkpoint `path` (training state st) are loaded: the resume check,
  // AdamW's step count and the loss scaler's state.
  void continue_from(const TrainState& st, const std::string& path);
  // spike_policy = "rollback", after step `step` (0-based) was the rollback_after-th skip in a row:
  // the states of the newest checkpoint before the skips; returns its step.
  int64_t roll_back(int64_t step);
  std::string computed_on() const;   // the backend, precision and layout, for the resume check
  // The step's micro-batch `micro` from the background loader (started at `step` when needed).
  void next_batch(int64_t step, int64_t micro, MicroBatch& batch);
  uint64_t first_sample(uint64_t k) const;  // the first global sample of this rank's micro-batch k

  RunSpec spec_;
  Topology topo_;
  RunJob run_;  // the backend, the communicators' checks, the job
  std::unique_ptr<TrainingData> data_;  // the sources, the mixture's position, the sample log
  Peak peak_;                           // what MFU is judged against
  std::unique_ptr<StepTrace> trace_;    // [run] trace_steps
  std::unique_ptr<StepBreakdown> breakdown_;
  std::unique_ptr<FaultHooks> faults_;
  std::unique_ptr<CollectiveStepMarks> marks_;
  StepHooks hooks_;  // the three above: marks, breakdown, faults
  bool early_update_logged_ = false;
  std::unique_ptr<data::BatchLoader> loader_;  // created at the first step
  int64_t loader_step_ = -1;                   // the step the loader's next batch belongs to
  std::vector<data::SampleOrigin> origins_;    // (micro_batch): where each row came from
  int64_t start_step_ = 0;
  LoraBase lora_base_;  // [lora]: the frozen base, recorded in checkpoints
  DirLock out_lock_;                           // rank 0: holds out_dir/.lock while the run lasts
  std::unique_ptr<CheckpointManager> ckpts_;  // where checkpoints live, which one resumes, when to save
};

}  // namespace zt
