// The training loop (see trainer.h).
#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "engine/checkpoint/checkpoint_reader.h"
#include "engine/comm/agreement.h"
#include "engine/core/log.h"
#include "engine/core/preemption.h"
#include "engine/core/status.h"
#include "engine/core/timer.h"
#include "engine/hf/spec_loading.h"
#include "engine/observe/metrics.h"
#include "engine/observe/progress.h"
#include "engine/observe/telemetry.h"
#include "engine/train/evaluation.h"
#include "engine/train/memory_report.h"
#include "engine/train/out_dir.h"
#include "engine/train/resume_probe.h"
#include "engine/train/sampler.h"

namespace zt {

Trainer::Trainer(const RunSpec& spec)
    : spec_(spec), topo_(make_topology(int(spec.parallel.tensor), spec.comm.timeout_s, int(spec.parallel.replicate))) {
  // Start-up can fail on some ranks only (a missing file on one machine). The ranks agree on
  // the outcome before any training collective, so that every rank exits cleanly with the
  // failing rank's status and only that rank prints its message.
  dist_set_phase(DistPhase::Startup);
  agreed([&] { build(); });
  // The peak MFU is judged against. On the CPU it is measured, one rank at a time: ranks probing
  // together on shared cores would each measure a share of the machine.
  const bool probe_in_turn = run_.backend->kind() == DeviceKind::CPU && spec_.run.peak_tflops <= 0;
  for (int r = 0; r < (probe_in_turn ? topo_.world_size : 1); ++r) {
    if (!probe_in_turn || r == topo_.world_rank) peak_ = device_peak(spec_, *run_.backend);
    if (probe_in_turn) topo_.world->barrier();
  }
  resume_or_init();
  dist_set_phase(DistPhase::Running);
}

// The job is destroyed before the backend and the communicators it uses (members go in reverse).
Trainer::~Trainer() = default;

void Trainer::agreed(const std::function<void()>& f) { run_agreed(*topo_.world, f); }

void Trainer::resume_or_init() {
  const auto& k = spec_.checkpoint;
  ckpts_ = std::make_unique<CheckpointManager>(spec_, topo_);
  const bool weights_only = !k.init_from.empty();
  const std::string wanted = weights_only ? k.init_from : k.resume;
  const std::string path = wanted.empty() ? "" : ckpts_->find(wanted);
  if (path.empty()) {
    if (wanted == "auto" && topo_.is_root()) spdlog::info("checkpoint: none in {} yet: starting from step 0", k.dir);
    load_hf_init(job(), spec_, topo_);
    lora_base_ = lora_base(job(), spec_, *topo_.world, topo_.is_root());
    agreed([&] { init_lora_from_peft(job(), spec_, topo_.is_root()); });
    if (!spec_.lora.init_from.empty()) store().publish_written_masters();
    return;
  }
  if (job().base) {  // [lora]: the frozen base comes from [model] init_from (or the seed) on every start
    load_hf_init(job(), spec_, topo_);
    lora_base_ = lora_base(job(), spec_, *topo_.world, topo_.is_root());
  }
  Timer load_timer;
  TrainState st;
  agreed([&] {
    st = read_train_state(path);
    const std::string mismatch = model_mismatch(path, job().trained_table());
    if (!mismatch.empty()) user_error("checkpoint does not fit [model]{}: {}", job().base ? " and [lora]" : "", mismatch);
    check_lora_base(st, lora_base_, path);
    // Past the run's end: it would train nothing and evaluate those weights under a wrong step.
    if (!weights_only && st.step > spec_.train.max_steps)
      user_error("checkpoint {} is at step {}, past [train] max_steps = {}: raise max_steps to train on, or "
                 "resume an earlier checkpoint", path, st.step, spec_.train.max_steps);
    try {
      if (!weights_only) start_step_ = data_->restore(st.data, topo_.is_root());
    } catch (const UserError& e) {
      user_error("{}: {}", path, e.what());
    }
    load_states(path, store(), job().trained_table(), weights_only, topo_.world_rank, topo_.world_size);
  });
  job().store->publish_written_masters();
  if (weights_only) {
    if (topo_.is_root()) spdlog::info("checkpoint: weights from {} (optimizer fresh, step 0)", path);
    return;
  }
  continue_from(st, path);
  ckpts_->set_aside_newer(st.step);
  if (topo_.is_root())
    spdlog::info("checkpoint: resumed from {} at step {} (written by {} ranks: tensor {}, data {}, ZeRO-{}; "
                 "verified and loaded in {:.2f} s)", path, start_step_, st.world, st.tensor, st.data_parallel,
                 st.zero_stage, load_timer.seconds());
}

void Trainer::continue_from(const TrainState& st, const std::string& path) {
  agreed([&] {  // the weights as loaded reproduce the probe batch's saved loss
    const bool deterministic = run_.backend->kind() == DeviceKind::CPU || spec_.run.deterministic;
    check_resume_probe(model(), int(spec_.model.seq_len), st.probe, computed_on(), run_.backend->compute_dtype(),
                       deterministic, path, spec_.checkpoint.resume_unchecked, topo_.is_root());
  });
  job().adam_steps = int(st.adam_steps);
  // The scaler's state only where the saving run scaled its loss (fp16): a checkpoint of an fp32
  // or bf16 run holds scale 1, and an fp16 run resumed from it starts at the spec's initial scale.
  bool saved_fp16 = st.scaler.scale != 1;  // a spec that no longer parses: an fp16 run's scale has moved
  try {
    saved_fp16 = parse_run_spec(st.spec_toml, path + " (its run spec)").precision.compute == PrecisionChoice::Fp16;
  } catch (const UserError&) {
  }
  if (saved_fp16) job().scaler.restore(st.scaler);
}

int64_t Trainer::roll_back(int64_t step) {
  // Skipped steps leave the weights alone: those of the first skipped step came from the steps
  // applied before it, so the checkpoint must be older than that step's (at least one applied
  // step is undone). The data goes on from step + 1: the samples in between are the window
  // skipped. The step counter and the learning-rate schedule go on too.
  const int64_t in_a_row = job().skips.in_a_row(), first_skipped = step + 1 - in_a_row;
  job().skips.rolled_back(step);
  std::string path;
  try {
    path = ckpts_->newest_before(first_skipped);
  } catch (const UserError& e) {  // every candidate damaged: not the user's input at this point
    throw RuntimeFailure(fmt::format("step {}: no checkpoint to roll back to: {}", step + 1, e.what()));
  }
  if (path.empty())
    throw RuntimeFailure(fmt::format("step {}: {} skipped steps in a row, but no checkpoint written before step {} is "
                                     "kept to roll back to: save more often ([checkpoint] every_steps) or keep more "
                                     "([checkpoint] keep_last)", step + 1, in_a_row, first_skipped + 1));
  Timer t;
  TrainState st;
  agreed([&] {
    st = read_train_state(path);
    load_states(path, store(), job().trained_table(), /*weights_only=*/false, topo_.world_rank, topo_.world_size);
  });
  job().store->publish_written_masters();
  continue_from(st, path);
  // the saves since that checkpoint hold the history rolled back: resume = "auto" after a crash
  // must not take one of them, nor keep_last count them
  ckpts_->set_aside_newer(st.step);
  if (topo_.is_root())
    spdlog::warn("step {}: {} skipped steps in a row ([train] rollback_after = {}): rolled back to {} (step {}) in "
                 "{:.2f} s; the samples of steps {}-{} (global {}-{}) are skipped, training goes on at step {}",
                 step + 1, in_a_row, spec_.train.rollback_after, path, st.step, t.seconds(),
                 st.step + 1, step + 1, st.step * spec_.train.global_batch, (step + 1) * spec_.train.global_batch - 1,
                 step + 2);
  return st.step;
}

std::string Trainer::computed_on() const {
  return fmt::format("{}, {}, tensor {} x data {}, ZeRO-{}{}", run_.backend->name(),
                     dtype_name(run_.backend->compute_dtype()), topo_.tp, topo_.dp, spec_.parallel.zero_stage,
                     topo_.replicas > 1 ? fmt::format(" in {} replicas", topo_.replicas) : "");
}

TrainState Trainer::train_state(int64_t steps_done) {
  TrainState s;
  s.step = steps_done;
  s.adam_steps = job().adam_steps;
  s.scaler = job().scaler.state();
  s.data = data_->position(steps_done);
  s.probe = capture_probe(model(), *topo_.world, topo_.is_root(), job().inputs.data(), job().targets.data(),
                          int(spec_.train.micro_batch), int(spec_.model.seq_len), run_.backend->compute_dtype(),
                          computed_on());
  s.spec_toml = resolved_toml(spec_);
  s.lora_base = lora_base_.origin, s.lora_base_fingerprint = lora_base_.fingerprint;
  s.world = topo_.world_size, s.tensor = topo_.tp, s.data_parallel = topo_.dp, s.zero_stage = spec_.parallel.zero_stage;
  return s;
}

void Trainer::build() {
  (void)micro_batches_per_step(spec_, topo_);  // a batch that does not divide: before any data is read
  data_ = std::make_unique<TrainingData>(spec_);
  build_run_job(spec_, topo_, run_);
  origins_.resize(size_t(spec_.train.micro_batch));
  trace_ = std::make_unique<StepTrace>(spec_.run.trace_steps, topo_.world_rank,
                                       (std::filesystem::path(spec_.run.out_dir) /
                                        fmt::format("trace.rank{}.json", topo_.world_rank)).string());
  std::vector<Comm*> groups{topo_.world.get(), topo_.tp_group.get(), topo_.dp_group.get()};
  for (Comm* g : {topo_.shard_group.get(), topo_.replica_group.get()})  // hybrid sharding's
    if (g) groups.push_back(g);
  breakdown_ = std::make_unique<StepBreakdown>(
      *run_.backend, std::move(groups),
      store().offload_clock(), trace_.get());
  faults_ = std::make_unique<FaultHooks>(topo_, *run_.backend, store());
  marks_ = std::make_unique<CollectiveStepMarks>(run_.comms.order.get());
  // The order check's step boundaries around the breakdown (its closing all-reduce is step time,
  // as before the step had hooks); the faults inside it (a slow host's delay is step time too).
  for (StepHook* h : std::initializer_list<StepHook*>{marks_.get(), breakdown_.get(), faults_.get()}) hooks_.add(h);
}

uint64_t Trainer::first_sample(uint64_t k) const {
  // Micro-batch k of this rank (k counts from step 0) covers global samples
  // [first_sample(k), first_sample(k) + B): its slice of step k / micro_batches' global batch.
  return data::micro_batch_first_sample(k, spec_.train.global_batch, topo_.dp, topo_.dp_rank, int(spec_.train.micro_batch));
}

void Trainer::next_batch(int64_t step, int64_t micro, MicroBatch& mb) {
  const int B = int(spec_.train.micro_batch);
  const auto start = std::chrono::steady_clock::now();
  double blocked_ms = 0;
  // token streams only: one window a row, no positions (the attention kernels' plain instances)
  if (spec_.data.packing == Packing::None || !data_->packed()) mb.positions = nullptr;
  mb.documents = loader_->next(mb.inputs, mb.targets, &blocked_ms, origins_.data(), mb.positions);
  if (spec_.data.packing == Packing::None) mb.documents = 0;
  breakdown_->data_wait(start, std::chrono::steady_clock::now(), blocked_ms);
  if (topo_.tp_rank == 0)
    data_->log_samples(step, first_sample(uint64_t(step * job().micro_batches + micro)), origins_.data(), B);
  if (on_batch) on_batch(mb);
}

StepResult Trainer::step(int64_t step) {
  const int64_t accum = job().micro_batches;
  if (!loader_ || loader_step_ != step) {  // (re)start the background loader at this step
    loader_.reset();  // its threads read the datasets: never two loaders at once
    loader_ = std::make_unique<data::BatchLoader>(data_->mixed(), data_->state(), int(spec_.train.micro_batch),
                                                  [this](uint64_t k) { return first_sample(k); },
                                                  uint64_t(step * accum), int(std::max<int64_t>(4, accum)),
                                                  int(spec_.data.prefetch));
  }
  loader_step_ = step + 1;
  auto next = [&](int64_t micro, MicroBatch& mb) { next_batch(step, micro, mb); };
  StepResult r = train_step(job(), step, next, hooks_);
  data_->step_done(step);
  r.tokens_per_s = double(spec_.train.global_batch) * double(spec_.model.seq_len) / (r.step_ms / 1e3);
  if (r.early_update && !early_update_logged_ && topo_.is_root())
    spdlog::info("offload: each layer's host AdamW runs while backward goes on (no clipping, no loss scaling)");
  early_update_logged_ |= r.early_update;
  return r;
}

void Trainer::run() {
  namespace fs = std::filesystem;
  const auto& t = spec_.train;
  const bool root = topo_.is_root();
  std::unique_ptr<MetricsWriter> metrics;
  agreed([&] {  // a bad out_dir (or a metrics.jsonl that is a directory) ends every rank alike
    if (!root) return;
    out_lock_ = claim_out_dir(spec_);  // and config.resolved.toml
    metrics = std::make_unique<MetricsWriter>(spec_.run.out_dir, start_step_);
    if (spec_.run.tensorboard)
      spdlog::info("tensorboard: {}",
                   metrics->enable_tensorboard(spec_.run.tensorboard_dir, spec_.run.name, resolved_toml(spec_)));
  });
  std::unique_ptr<Telemetry> telemetry;  // rank 0's devices (or process), into metrics.jsonl
  if (root && spec_.run.telemetry_s > 0) {
    const int threads = spec_.run.threads > 0 ? int(spec_.run.threads) : int(std::thread::hardware_concurrency());
    telemetry = std::make_unique<Telemetry>(spec_.run.telemetry_s, run_.backend->kind() == DeviceKind::CUDA, threads,
                                            [&metrics](const nlohmann::json& row) { metrics->write(row); },
                                            run_.backend->pci_bus_id());
    spdlog::info("telemetry every {:g} s: {}", spec_.run.telemetry_s, telemetry->status());
  }
  if (ckpts_->enabled())
    ckpts_->start_writer(store(), job().trained_table(), *run_.backend, [&metrics](const SaveStats& s) {
      if (metrics)  // rank 0
        metrics->write({{"kind", "checkpoint"}, {"step", s.step}, {"async", s.async}, {"stall_ms", s.stall_ms},
                        {"write_s", s.write_s}, {"commit_ms", s.commit_ms}, {"rank0_bytes", s.bytes}});
    });
  else
    install_interrupt_report(root);
  // The writer outlives run(); its callback writes to `metrics`, which does not: detached on the
  // way out (declared after `metrics`, so it runs first).
  struct DetachSaveReports {
    CheckpointManager& ckpts;
    ~DetachSaveReports() {
      if (ckpts.writer()) ckpts.writer()->on_complete = nullptr;
    }
  } detach_save_reports{*ckpts_};
  const auto& m = spec_.model;
  const int64_t micro_batches = job().micro_batches;
  if (root) {
    size_t real = 0;  // without the zero rows that pad the vocabulary (as checkpoints and exports hold it)
    for (const ParamInfo& p : model().params()) real += p.stored_numel;
    const size_t held = model().num_global_params();
    spdlog::info("run '{}': {}: {:.2f}M parameters{}", spec_.run.name, model().describe(), real / 1e6,
                 held == real ? std::string()
                              : fmt::format(" ({:.2f}M held, with the vocabulary's padding rows)", held / 1e6));
    spdlog::info("data: {}; samples of {} tokens; global batch {} = {} ranks x {} micro-batches x {}; {} steps",
                 data_->describe(), m.seq_len, t.global_batch, topo_.dp, micro_batches, t.micro_batch, t.max_steps);
  }
  if (root && spec_.precision.fp8 != Fp8Recipe::None && spec_.parallel.zero_stage == 3) {
    const size_t all = model().fp8_weights().size();
    const size_t fp8 = job().weights().fp8_gathered_weights();
    spdlog::info("FP8 gather: {} of the {} FP8 weights gathered as FP8 bytes, cast once per update{}", fp8, all,
                 !spec_.precision.fp8_all_gather ? " ([precision] fp8_all_gather = false)"
                 : ZeroPlacement(spec_).offloads_compute_shards() ? " (not with [offload] params)"
                 : fp8 < all ? "; the others in the compute type (they do not start and end on multiples of "
                               "4 x the ZeRO ranks in their layer, or their place is not 16-byte aligned)"
                             : "");
  }
  log_memory(*run_.backend, store(), topo_, spec_);
  // MFU against one device's peak (found in build()), for every device of the job
  const double flops_per_token = model_flops_per_token(spec_.model, spec_.lora);
  if (root)
    spdlog::info("MFU against {:.3g} TFLOP/s per device ({}){}; {:.3g} GFLOP per token", peak_.tflops, peak_.source,
                 spec_.precision.fp8 != Fp8Recipe::None ? ", FP8 products too (torchtitan's convention)" : "",
                 flops_per_token / 1e9);
  Progress progress(spec_, topo_.world_size, peak_, flops_per_token, *run_.backend, metrics.get(), telemetry.get(),
                    job().scaler.active(), start_step_,
                    [this](int64_t step) { return memory_record(*run_.backend, store(), topo_.world_rank, step); });
  progress.tokens_by_source = [this] { return data_->tokens_by_source(); };
  progress.predicted_step_ms = run_.predicted_step_ms;
  std::optional<StragglerWatch> stragglers;
  if (topo_.world_size > 1) progress.stragglers = &stragglers.emplace(*topo_.world, topo_.hosts, spec_.run.straggler_threshold);
  progress.slow_source = [this, last_ms = std::vector<double>(), last_drawn = std::vector<uint64_t>()]() mutable {
    if (!loader_ || data_->n_sources() < 2) return std::string();
    return data_->slowest_source(loader_->source_read_ms(), last_ms, last_drawn);
  };
  agreed([&] {  // [data] sample_log: one file per data-parallel rank
    data_->open_sample_log(topo_.world_rank, topo_.world_size, start_step_, topo_.tp_rank == 0);
  });
  double carried_stall_ms = 0;  // a checkpoint save's stall, paid by the next step
  double carried_data_ms = 0;   // the wait for the next step's data before the agreement, paid by it
  for (int64_t s = start_step_; s < t.max_steps; ++s) {
    StepResult r = step(s);
    r.checkpoint_ms = carried_stall_ms, r.step_ms += carried_stall_ms, carried_stall_ms = 0;
    r.data_wait_ms += carried_data_ms, r.step_ms += carried_data_ms, carried_data_ms = 0;
    r.tokens_per_s = double(t.global_batch) * double(m.seq_len) / (r.step_ms / 1e3);
    if (!std::isfinite(r.loss) && !r.skipped)
      throw RuntimeFailure(fmt::format("step {}: loss is {} (diverged); lower [optim] lr", s + 1, r.loss));
    if (!r.skip_reason.empty() && root) {  // the skipped step's samples, for a user to inspect
      spdlog::warn("step {} skipped: {} (its samples: global {}-{}; metrics.jsonl lists them by source)", s + 1,
                   r.skip_reason, s * t.global_batch, (s + 1) * t.global_batch - 1);
      metrics->write({{"kind", "skip"}, {"step", s + 1}, {"why", r.skip_reason},
                      {"samples", {{"first", s * t.global_batch}, {"count", t.global_batch}}},
                      {"by_source", data_->samples_of_last_step()}});
    }
    if (job().skips.rollback_due()) {
      const int64_t to = roll_back(s);
      if (root)
        metrics->write({{"kind", "rollback"}, {"step", s + 1}, {"to_step", to},
                        {"samples", {{"first", to * t.global_batch}, {"count", (s + 1 - to) * t.global_batch}}}});
    }
    const int64_t done = s + 1;
    set_current_step(long(s));
    progress.step_done(s, r);
    if (t.eval_every > 0 && done % t.eval_every == 0 && done != t.max_steps) evaluate_and_report(job(), *data_, ckpts_->enabled(), done, metrics.get());
    if (!ckpts_->enabled() || done == t.max_steps) continue;  // the last step's checkpoint is written below
    // A source gone for good shows in the loader before the next step uses it: every rank waits
    // for its next step's micro-batches (normally ready already), so the ranks learn of the
    // failure at this step's agreement, and write a checkpoint of this step before its error.
    // A preemption signal does not wait for a slow source: this step's checkpoint is complete.
    if (loader_) loader_->wait_ahead(int(micro_batches), &carried_data_ms, [] { return preemption_signal() != 0; });
    const bool data_failed = loader_ && loader_->failed();
    if (ckpts_->after_step(done, start_step_, [&] { return train_state(done); }, &carried_stall_ms, data_failed)) {
      agreed([&] {
        if (loader_ && loader_->failed()) loader_->rethrow_failure();
      });
      return;
    }
  }
  evaluate_and_report(job(), *data_, ckpts_->enabled(), t.max_steps, metrics.get());
  if (ckpts_->enabled() && start_step_ < t.max_steps) ckpts_->save_final(train_state(t.max_steps));
  const MemoryStats ms = run_.backend->memory_stats();
  spdlog::info("rank {} peak memory: {:.3f} MiB allocated by the {} backend ({} bytes)", topo_.world_rank,
               ms.peak / 1048576.0, run_.backend->name(), ms.peak);
  if (t.sample_tokens > 0)
    print_sample(model(), *run_.backend, data_->tokenizer(), t, uint64_t(spec_.run.seed), root);
  if (root) spdlog::info("done: metrics in {}", metrics->path());
}

}  // namespace zt
