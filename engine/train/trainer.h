// The training loop: data -> forward/backward with gradient accumulation -> gradient reduction
// over the data-parallel group (ZeRO stage as configured) -> clip -> AdamW, with progress lines,
// metrics.jsonl, periodic evaluation and a generated sample at the end. Every rank runs it; rank 0
// prints and writes files.
#pragma once
#include <functional>
#include <memory>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_manager.h"
#include "engine/checkpoint/checkpoint_writer.h"
#include "engine/backend/backend.h"
#include "engine/config/data_options.h"
#include "engine/config/spec.h"
#include "engine/core/dir_lock.h"
#include "engine/comm/collective_order.h"
#include "engine/comm/device_comms.h"
#include "engine/comm/flight_recorder.h"
#include "engine/comm/topology.h"
#include "engine/observe/step_result.h"
#include "engine/observe/throughput.h"
#include "engine/observe/trace.h"
#include "engine/parallel/param_store.h"
#include "engine/optim/adamw.h"
#include "engine/optim/loss_scaler.h"
#include "engine/model/model.h"
#include "engine/train/skip_policy.h"
#include "engine/train/training_data.h"

namespace zt {

// [precision] compute resolved for a backend ("auto": bf16 on a GPU, fp32 on the CPU).
DType compute_dtype_for(const RunSpec& spec, const Backend& backend);

class Trainer {
 public:
  // Builds topology, backend, model, parameter store (initialized from run.seed) and datasets.
  // UserError (exit 2) for layouts that do not fit the world size or the batch.
  explicit Trainer(const RunSpec& spec);
  ~Trainer();

  // One optimizer step over global_batch sequences; this rank does its data-parallel slice.
  StepResult step(int64_t step);
  // Mean loss over eval_steps micro-batches of each validation set (in dataset order): the mean
  // over the sets, and each set's in `each` when given. With checkpoints on, the ranks agree after
  // each round of micro-batches whether a preemption signal arrived: then it stops early, sets
  // *stopped and returns NaN, so that the checkpoint is not held up by a long evaluation.
  float evaluate(std::vector<float>* each = nullptr, bool* stopped = nullptr);
  // The whole run: rank 0 writes config.resolved.toml and metrics.jsonl under run.out_dir;
  // checkpoints as [checkpoint] says, and on SIGTERM / SIGINT / SIGUSR1.
  void run();
  // The step training continues with (0, or the resumed checkpoint's).
  int64_t start_step() const { return start_step_; }
  // Everything a checkpoint written after `steps_done` steps holds besides the model states.
  // Runs the probe's forward passes: every rank calls it.
  TrainState train_state(int64_t steps_done);

  Model& model() { return *model_; }
  ParamStore& store() { return *store_; }
  AdamW& optimizer() { return *optimizer_; }
  Backend& backend() { return *backend_; }
  const Topology& topology() const { return topo_; }
  TrainingData& data() { return *data_; }

  // Called with each micro-batch (inputs, targets: (micro_batch, seq_len)) before it is used.
  std::function<void(const int32_t*, const int32_t*)> on_batch;

 private:
  void build();  // everything after the topology (the part that may fail on one rank only)
  void log_memory() const;
  nlohmann::json memory_record(int64_t step) const;  // a metrics row of kind "memory"
  // Runs f on every rank and agrees on the outcome: when it threw somewhere, every rank throws
  // (the failing ones their own error; the others PeerFailure with its exit status), so a job
  // prints one message and never leaves ranks waiting in a collective.
  void agreed(const std::function<void()>& f);
  Peak peak_;  // what MFU is judged against
  std::unique_ptr<StepTrace> trace_;  // [run] trace_steps
  std::chrono::steady_clock::time_point trace_origin_{};
  void init_from_hf();
  void resume_or_init();             // [checkpoint] resume / init_from
  // After the model states of checkpoint `path` (training state st) are loaded: the resume check,
  // AdamW's step count and the loss scaler's state.
  void continue_from(const TrainState& st, const std::string& path);
  // spike_policy = "rollback", after step `step` (0-based) was the rollback_after-th skip in a row:
  // the states of the newest checkpoint before the skips; returns its step.
  int64_t roll_back(int64_t step);
  std::string computed_on() const;   // the backend, precision and layout, for the resume check

  RunSpec spec_;
  Topology topo_;
  std::shared_ptr<CollectiveOrder> order_;  // the collective order check, when on (collective_order.h)
  std::shared_ptr<FlightRecorder> flight_;  // the last collectives, for hangs (flight_recorder.h)
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ParamStore> store_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<TrainingData> data_;  // the sources, the mixture's position, the sample log
  std::unique_ptr<LossScaler> scaler_;
  std::unique_ptr<SkipPolicy> skips_;  // non-finite steps and loss spikes
  bool early_update_logged_ = false;
  int adam_steps_ = 0;                         // applied updates (AdamW's t; skipped steps excluded)
  std::unique_ptr<data::BatchLoader> loader_;  // created at the first step
  int64_t loader_step_ = -1;                   // the step the loader's next batch belongs to
  std::vector<int32_t> inputs_, targets_;  // (micro_batch, seq_len) host staging
  std::vector<data::SampleOrigin> origins_;  // (micro_batch): where each row came from
  int64_t local_batch_ = 0;                // sequences per step on this rank
  int64_t start_step_ = 0;
  DirLock out_lock_;                       // rank 0: holds out_dir/.lock while the run lasts
  std::unique_ptr<CheckpointManager> ckpts_;  // where checkpoints live, which one resumes, when to save
};

}  // namespace zt
