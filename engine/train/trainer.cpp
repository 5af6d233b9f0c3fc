// The training loop (see trainer.h).
#include "engine/train/trainer.h"

#include "engine/comm/agreement.h"
#include "engine/core/atomic_file.h"
#include "engine/plan/memory_check.h"
#include "engine/observe/throughput.h"
#include "engine/observe/telemetry.h"
#include "engine/observe/verdict.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <ctime>
#include <exception>
#include <optional>
#include <thread>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "data/tokenizer/tokenizer.h"
#include "engine/checkpoint/checkpoint_files.h"
#include "engine/checkpoint/checkpoint_manager.h"
#include "engine/checkpoint/checkpoint_reader.h"
#include "engine/checkpoint/remote.h"
#include "engine/comm/agreement.h"
#include "engine/core/byte_size.h"
#include "engine/core/faults.h"
#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/core/timer.h"
#include "engine/hf/hf_weights.h"
#include "engine/model/registry.h"
#include "engine/offload/async_io.h"
#include "engine/offload/core_binding.h"
#include "engine/offload/pinned_pool.h"
#include "engine/optim/optimizer_step.h"
#include "engine/optim/schedule.h"
#include "engine/observe/metrics.h"
#include "engine/observe/progress.h"
#include "engine/core/preemption.h"
#include "engine/train/out_dir.h"
#include "engine/train/resume_probe.h"
#include "engine/train/sampler.h"

namespace zt {

namespace {

// The failure tests' hooks (engine/core/faults.h): that rank exits abruptly (no cleanup, no
// MPI_Finalize) in the middle of the step, as a crashed process would, or stops responding, as a
// wedged one would.
void exit_if_fault_injected(int rank, int64_t step) {
  if (faults().exit.hits(rank, step)) {
    std::fprintf(stderr, "ztrain: fault injection: rank %d exits during step %lld\n", rank, (long long)step + 1);
    std::fflush(stderr);
    std::_Exit(3);
  }
  if (faults().hang.hits(rank, step)) {
    std::fprintf(stderr, "ztrain: fault injection: rank %d hangs during step %lld\n", rank, (long long)step + 1);
    std::fflush(stderr);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

}  // namespace

DType compute_dtype_for(const RunSpec& spec, const Backend& backend) {
  return compute_dtype_of(spec.precision.compute, backend.kind());
}

Trainer::Trainer(const RunSpec& spec)
    : spec_(spec), topo_(make_topology(int(spec.parallel.tensor), spec.comm.timeout_s)) {
  // Start-up can fail on some ranks only (a missing file on one machine). The ranks agree on
  // the outcome before any training collective, so that every rank exits cleanly with the
  // failing rank's status and only that rank prints its message.
  dist_set_phase(DistPhase::Startup);
  agreed([&] { build(); });
  // The peak MFU is judged against. On the CPU it is measured, one rank at a time: ranks probing
  // together on shared cores would each measure a share of the machine.
  const bool probe_in_turn = backend_->kind() == DeviceKind::CPU && spec_.run.peak_tflops <= 0;
  for (int r = 0; r < (probe_in_turn ? topo_.world_size : 1); ++r) {
    if (!probe_in_turn || r == topo_.world_rank) peak_ = device_peak(spec_, *backend_);
    if (probe_in_turn) topo_.world->barrier();
  }
  resume_or_init();
  dist_set_phase(DistPhase::Running);
}

void Trainer::agreed(const std::function<void()>& f) { run_agreed(*topo_.world, f); }

void Trainer::resume_or_init() {
  const auto& k = spec_.checkpoint;
  ckpts_ = std::make_unique<CheckpointManager>(spec_, topo_);
  const bool weights_only = !k.init_from.empty();
  const std::string wanted = weights_only ? k.init_from : k.resume;
  const std::string path = wanted.empty() ? "" : ckpts_->find(wanted);
  if (path.empty()) {
    if (wanted == "auto" && topo_.is_root()) spdlog::info("checkpoint: none in {} yet: starting from step 0", k.dir);
    init_from_hf();
    return;
  }
  Timer load_timer;
  TrainState st;
  agreed([&] {
    st = read_train_state(path);
    const std::string mismatch = model_mismatch(path, *model_);
    if (!mismatch.empty()) user_error("checkpoint does not fit [model]: {}", mismatch);
    // Past the run's end: it would train nothing and evaluate those weights under a wrong step.
    if (!weights_only && st.step > spec_.train.max_steps)
      user_error("checkpoint {} is at step {}, past [train] max_steps = {}: raise max_steps to train on, or "
                 "resume an earlier checkpoint", path, st.step, spec_.train.max_steps);
    try {
      if (!weights_only) start_step_ = data_->restore(st.data, topo_.is_root());
    } catch (const UserError& e) {
      user_error("{}: {}", path, e.what());
    }
    load_states(path, *store_, *model_, weights_only, topo_.world_rank, topo_.world_size);
  });
  store_->publish_written_masters();
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
    const bool deterministic = backend_->kind() == DeviceKind::CPU || spec_.run.deterministic;
    check_resume_probe(*model_, int(spec_.model.seq_len), st.probe, computed_on(), backend_->compute_dtype(),
                       deterministic, path, spec_.checkpoint.resume_unchecked, topo_.is_root());
  });
  adam_steps_ = int(st.adam_steps);
  // The scaler's state only where the saving run scaled its loss (fp16): a checkpoint of an fp32
  // or bf16 run holds scale 1, and an fp16 run resumed from it starts at the spec's initial scale.
  bool saved_fp16 = st.scaler.scale != 1;  // a spec that no longer parses: an fp16 run's scale has moved
  try {
    saved_fp16 = parse_run_spec(st.spec_toml, path + " (its run spec)").precision.compute == "fp16";
  } catch (const UserError&) {
  }
  if (saved_fp16) scaler_->restore(st.scaler);
}

int64_t Trainer::roll_back(int64_t step) {
  // Skipped steps leave the weights alone: those of the first skipped step came from the steps
  // applied before it, so the checkpoint must be older than that step's (at least one applied
  // step is undone). The data goes on from step + 1: the samples in between are the window
  // skipped. The step counter and the learning-rate schedule go on too.
  const int64_t in_a_row = skips_->in_a_row(), first_skipped = step + 1 - in_a_row;
  skips_->rolled_back(step);
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
    load_states(path, *store_, *model_, /*weights_only=*/false, topo_.world_rank, topo_.world_size);
  });
  store_->publish_written_masters();
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

// [model] init_from: a fresh run (no checkpoint to resume) starts from Hugging Face weights,
// resharded to this layout; resuming from this run's own checkpoints takes precedence.
void Trainer::init_from_hf() {
  const std::string& dir = spec_.model.init_from;
  if (dir.empty()) return;
  Timer t;
  agreed([&] {
    try {
      const std::string mismatch = hf_mismatch(dir, spec_.model.arch, *model_);
      if (!mismatch.empty()) user_error("does not fit the model: {}", mismatch);
      load_hf_weights(dir, spec_.model.arch, *store_, *model_);
    } catch (const UserError& e) {
      user_error("{}: [model] init_from = \"{}\": {}", spec_.source, dir, e.what());
    }
  });
  store_->publish_written_masters();
  if (topo_.is_root())
    spdlog::info("init_from: weights from {} ({} parameters, resharded to this layout in {:.2f} s; optimizer fresh)",
                 dir, model_->num_global_params(), t.seconds());
}

std::string Trainer::computed_on() const {
  return fmt::format("{}, {}, tensor {} x data {}, ZeRO-{}", backend_->name(), dtype_name(backend_->compute_dtype()),
                     topo_.tp, topo_.dp, spec_.parallel.zero_stage);
}

TrainState Trainer::train_state(int64_t steps_done) {
  TrainState s;
  s.step = steps_done;
  s.adam_steps = adam_steps_;
  s.scaler = scaler_->state();
  s.data = data_->position(steps_done);
  s.probe = capture_probe(*model_, *topo_.world, topo_.is_root(), inputs_.data(), targets_.data(),
                          int(spec_.train.micro_batch), int(spec_.model.seq_len), backend_->compute_dtype(),
                          computed_on());
  s.spec_toml = resolved_toml(spec_);
  s.world = topo_.world_size, s.tensor = topo_.tp, s.data_parallel = topo_.dp, s.zero_stage = spec_.parallel.zero_stage;
  return s;
}

void Trainer::build() {
  const RunSpec& spec = spec_;
  const auto& m = spec.model;
  const auto& t = spec.train;
  if (t.global_batch % (t.micro_batch * topo_.dp) != 0)
    user_error("{}: [train] global_batch = {} is not a multiple of micro_batch * data-parallel "
               "degree = {} * {} (world {} / tensor {})", spec.source, t.global_batch,
               t.micro_batch, topo_.dp, topo_.world_size, topo_.tp);
  local_batch_ = t.global_batch / topo_.dp;
  data_ = std::make_unique<TrainingData>(spec);
  // Offload runs AdamW on the host's cores: ranks sharing a machine (and not bound by the
  // launcher) each take their own slice, so their optimizer threads do not fight.
  if (spec.offload.optimizer != "none") bind_rank_to_cores(topo_.local_rank, topo_.local_size);
  backend_ = make_backend(spec.run.device, int(spec.run.threads), topo_.local_rank);
  attach_device_comms(topo_, spec.comm.backend, *backend_, spec.comm.timeout_s);
  if ((faults().check_collective_order || faults().swap_collectives.rank >= 0) && topo_.world_size > 1) {
    order_ = std::make_shared<CollectiveOrder>(*topo_.world, topo_.world_rank);
    if (topo_.tp > 1) topo_.tp_group = make_order_checked_comm(std::move(topo_.tp_group), "tp", order_);
    if (topo_.dp > 1) topo_.dp_group = make_order_checked_comm(std::move(topo_.dp_group), "dp", order_);
  }
  if (spec.comm.flight_entries > 0 && topo_.world_size > 1) {  // no collective: make_topology made its parts
    flight_ = make_flight_recorder(topo_, spec.run.out_dir, size_t(spec.comm.flight_entries));
    topo_.world = make_flight_recorded_comm(std::move(topo_.world), "world", *flight_);
    if (topo_.tp > 1) topo_.tp_group = make_flight_recorded_comm(std::move(topo_.tp_group), "tp", *flight_);
    if (topo_.dp > 1) topo_.dp_group = make_flight_recorded_comm(std::move(topo_.dp_group), "dp", *flight_);
  }
  if (spec.comm.backend == "nccl" && backend_->kind() != DeviceKind::CUDA)
    user_error("{}: [comm] backend = \"nccl\" needs GPU buffers, but this run is on the {} backend "
               "(use \"mpi\" or \"auto\")", spec.source, backend_->name());
  if (!spec.run.device_memory_limit.empty())
    backend_->set_memory_limit(parse_byte_size(spec.run.device_memory_limit, "[run] device_memory_limit"));
  const PinnedPool pinned = pinned_pool(spec, topo_.local_size);
  backend_->set_pinned_limit(size_t(pinned.limit));
  trace_ = std::make_unique<StepTrace>(spec.run.trace_steps, topo_.world_rank,
                                       (std::filesystem::path(spec.run.out_dir) /
                                        fmt::format("trace.rank{}.json", topo_.world_rank)).string());
  const DType compute = compute_dtype_for(spec, *backend_);
  backend_->set_compute_dtype(compute);
  backend_->set_deterministic(spec.run.deterministic);
  // every op the run will call, asked before anything is built: "not supported" is a start-up error
  if (const std::string op = unsupported_op(*backend_, spec.model, compute); !op.empty())
    user_error("{}: the {} backend cannot run this model in {}: {}", spec.source, backend_->name(), dtype_name(compute),
               op);
  scaler_ = std::make_unique<LossScaler>(spec.precision, compute);
  skips_ = std::make_unique<SkipPolicy>(spec_.train);
  if (topo_.is_root())
    spdlog::info("precision: {} compute, fp32 master weights, gradients and optimizer states{}", dtype_name(compute),
                 scaler_->active() ? fmt::format(", loss scale {} ({})", scaler_->scale(),
                                                 spec.precision.loss_scale == 0 ? "dynamic" : "fixed")
                                   : "");
  // before anything large is allocated: a spec that cannot fit says so with the numbers
  MemoryBudget budget;
  budget.device = backend_->memory_available();
  budget.sharing = backend_->kind() == DeviceKind::CPU && spec.run.device_memory_limit.empty() ? topo_.local_size : 1;
  budget.pinned = pinned.limit;
  budget.where = !spec.run.device_memory_limit.empty() ? "[run] device_memory_limit"
                 : backend_->kind() == DeviceKind::CPU ? "this machine" : "the GPU";
  const LayoutPlan plan = check_memory_fits(spec, topo_.world_size, backend_->kind(), compute, budget);
  model_ = make_model(spec.model, *backend_, int(t.micro_batch), topo_.tp_group.get(), recompute_of(t.recompute));
  if (spec.offload.optimizer == "nvme")  // room for this rank's files (masters, moments, parameters on NVMe)
    agreed([&] { check_nvme_path(spec.offload.nvme_path, uint64_t(plan.nvme_bytes)); });
  // the offloaded states, the NVMe tier's block buffers and the checkpoint staging within the pinned pool
  agreed([&] { check_pinned_fits(pinned, double(plan.memory.pinned_host), spec); });
  store_ = std::make_unique<ParamStore>(*model_, *backend_, topo_, spec);
  if (store_->nvme() && topo_.local_rank == 0)
    spdlog::info("offload: NVMe tier in {} through {}, {} requests of {} MiB in flight", spec.offload.nvme_path,
                 AsyncIo::io_uring_available() ? "io_uring" : "a thread per request (no io_uring here)",
                 spec.offload.io_depth, spec.offload.buffer_mb);
  if (store_->nvme() && !store_->nvme()->direct() && topo_.local_rank == 0)
    spdlog::warn("offload: {} does not support O_DIRECT (tmpfs?): buffered I/O, which the page cache doubles in "
                 "host memory", spec.offload.nvme_path);
  store_->init(uint64_t(spec.run.seed));
  optimizer_ = std::make_unique<AdamW>(spec.optim, store_->optimizer_backend());
  model_->set_provider(store_.get());
  inputs_.resize(size_t(t.micro_batch * m.seq_len));
  targets_.resize(inputs_.size());
  origins_.resize(size_t(t.micro_batch));
}

Trainer::~Trainer() {
  // an early host AdamW still queued (a step that failed mid-backward) uses the optimizer, which
  // is destroyed before the store
  if (store_) store_->cancel_early_update();
}

StepResult Trainer::step(int64_t step) {
  Timer timer;
  if (order_) order_->begin_step(step);
  const int B = int(spec_.train.micro_batch), T = int(spec_.model.seq_len);
  const int64_t accum = local_batch_ / B;
  // Every micro-batch contributes its mean loss / (micro-batches in the global batch), so the
  // summed (reduced) gradient is that of the mean over the global batch.
  const int64_t global_micro = spec_.train.global_batch / B;
  const double loss_scale = scaler_->scale();
  const float grad_scale = float(loss_scale / double(int64_t(B) * T * global_micro));
  // Micro-batch k of this rank (k counts from step 0) covers global samples
  // [first_of(k), first_of(k) + B): its slice of step k / accum's global batch.
  const int64_t GB = spec_.train.global_batch;
  const int dp = topo_.dp, dp_rank = topo_.dp_rank;
  auto first_of = [GB, dp, dp_rank, B](uint64_t k) { return data::micro_batch_first_sample(k, GB, dp, dp_rank, B); };
  if (!loader_ || loader_step_ != step) {  // (re)start the background loader at this step
    loader_.reset();  // its threads read the datasets: never two loaders at once
    loader_ = std::make_unique<data::BatchLoader>(data_->mixed(), data_->state(), B, first_of,
                                                  uint64_t(step * accum), int(std::max<int64_t>(4, accum)),
                                                  int(spec_.data.prefetch));
  }
  loader_step_ = step + 1;
  // The breakdown: timing points around the phases and points in the communicators' waits at the
  // same boundaries (device time and device-measured stalls on a GPU, both read after the step's
  // synchronize), and the host's blocked time in offload transfers.
  struct CommPoint {
    int64_t world, tp, dp;
  };
  auto comm_now = [&] {
    return CommPoint{topo_.world->wait_point(), topo_.tp_group->wait_point(), topo_.dp_group->wait_point()};
  };
  auto comm_between = [&](CommPoint a, CommPoint b) {
    return topo_.world->exposed_ms(a.world, b.world) + topo_.tp_group->exposed_ms(a.tp, b.tp) +
           topo_.dp_group->exposed_ms(a.dp, b.dp);
  };
  auto offload_now = [&] { return store_->offload_waited_ms(); };
  struct Phase {
    int from, to;
    CommPoint c0, c1;
    double offload = 0;
  };
  std::vector<Phase> fwd, bwd;
  Backend& be = *backend_;
  const bool traced = trace_->wants(step);
  const auto host_start = std::chrono::steady_clock::now();
  if (traced && trace_origin_ == std::chrono::steady_clock::time_point{}) trace_origin_ = host_start;
  const int p_start = be.timing_point();
  if (traced)  // each blocking wait on a collective, on its own track
    for (Comm* g : {topo_.world.get(), topo_.tp_group.get(), topo_.dp_group.get()})
      g->set_wait_observer([this, step, g](const char* what, std::chrono::steady_clock::time_point start, double ms) {
        trace_->add(fmt::format("{} {}", g->name(), what), step,
                    std::chrono::duration<double, std::milli>(start - trace_origin_).count(), ms, 2);
      });
  if (traced)  // each blocking offload transfer or NVMe wait, on its own track
    store_->set_offload_observer([this, step](const char* what, std::chrono::steady_clock::time_point start, double ms) {
      trace_->add(fmt::format("offload {}", what), step,
                  std::chrono::duration<double, std::milli>(start - trace_origin_).count(), ms, 3);
    });
  std::vector<std::pair<double, double>> data_spans;  // (start, duration) ms from the step's start
  auto ms_since = [](std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  flight_set_step(step);
  injected_delay(faults().slow_host_ms);  // the host-bound verdict's test: a slow host
  store_->zero_grad();
  const double lr = lr_at(spec_.optim, step, spec_.train.max_steps);
  // With optimizer offload to CPU memory, each group's host AdamW may run while backward goes on,
  // where nothing global (clipping by the norm, fp16 unscaling) must first touch the gradients.
  // Not with spike_policy = "skip": a step must be judged before it is applied.
  const bool early = spec_.optim.grad_clip == 0 && !scaler_->active() && spec_.train.spike_policy == "off" &&
                     schedule_early_adamw(*store_, *optimizer_, lr, adam_steps_ + 1);
  if (early && !early_update_logged_) {
    early_update_logged_ = true;
    if (topo_.is_root())
      spdlog::info("offload: each layer's host AdamW runs while backward goes on (no clipping, no loss scaling)");
  }
  double wait_ms = 0;
  for (int64_t micro = 0; micro < accum; ++micro) {
    const auto w0 = std::chrono::steady_clock::now();
    loader_->next(inputs_.data(), targets_.data(), &wait_ms, origins_.data());
    if (topo_.tp_rank == 0) data_->log_samples(step, first_of(uint64_t(step * accum + micro)), origins_.data(), B);
    if (traced) data_spans.push_back({ms_since(host_start, w0), ms_since(w0, std::chrono::steady_clock::now())});
    if (on_batch) on_batch(inputs_.data(), targets_.data());
    store_->set_last_micro_batch(micro == accum - 1);
    if (micro == accum - 1) store_->prefetch_optimizer_states();  // NVMe: the step's first reads, now
    const bool timed = 2 * micro + 8 < Backend::kTimingPoints;  // beyond: counted in "other"
    const CommPoint c0 = comm_now();
    const double o0 = offload_now();
    const int p0 = timed ? be.timing_point() : 0;
    be.push_range("forward");
    if (faults().slow_rank == topo_.world_rank) injected_delay(faults().slow_rank_ms);
    model_->forward_deferred(inputs_.data(), targets_.data(), B, T, grad_scale);
    be.pop_range();
    const CommPoint c1 = comm_now();
    const double o1 = offload_now();
    const int p1 = timed ? be.timing_point() : 0;
    exit_if_fault_injected(topo_.world_rank, step);
    be.push_range("backward");
    model_->backward();
    be.pop_range();
    if (timed)
      fwd.push_back({p0, p1, c0, c1, o1 - o0}),
          bwd.push_back({p1, be.timing_point(), c1, comm_now(), offload_now() - o1});
  }
  data_->step_done(step);
  const CommPoint c_reduce = comm_now();
  const double o_reduce = offload_now();
  const int p_reduce = be.timing_point();
  be.push_range("gradient reduction");
  store_->finish_backward();  // the last gradient reductions: backward's tail
  be.pop_range();
  if (faults().nan_grad.hits(topo_.world_rank, step))  // the skip policy's test: one rank's gradient
    for (const StateSpan& s : store_->spans())
      if (s.n > 0) {
        const float nan = std::nanf("");
        be.copy_to_device(s.grad, &nan, sizeof nan);
        break;
      }
  double loss = model_->take_losses() / double(global_micro);
  topo_.dp_group->all_reduce_doubles(&loss, 1);
  if (step >= faults().loss_spike_step && step < faults().loss_spike_step + faults().loss_spike_steps)
    loss *= faults().loss_spike_factor;  // the spike policy's test
  bwd.push_back({p_reduce, be.timing_point(), c_reduce, comm_now(), offload_now() - o_reduce});
  const CommPoint c_opt = comm_now();
  const double o_opt = offload_now();
  const int p_opt = be.timing_point();
  StepResult r;
  r.step = step;
  r.loss = float(loss);
  r.grad_norm = optimizer_->clip_grad_norm(store_->spans(), store_->norm_group(), spec_.optim.grad_clip, loss_scale);
  r.lr = lr;
  r.loss_scale = loss_scale;
  // Every rank must decide alike. The loss is reduced over the data-parallel group, but the norm
  // only over the ranks that hold distinct gradients: a NaN that one replica's copy got after the
  // reduction is agreed on here (two doubles per step).
  // Rank 0's loss goes with it, so that the spike test reads the same bits everywhere.
  double agree[2] = {std::isfinite(r.grad_norm) && std::isfinite(loss) ? 0.0 : 1.0, topo_.is_root() ? loss : 0.0};
  topo_.world->all_reduce_doubles(agree, 2);
  if (agree[0] > 0 && std::isfinite(r.grad_norm) && std::isfinite(loss)) r.grad_norm = std::nan("");
  if (agree[0] == 0) loss = agree[1], r.loss = float(loss);
  // fp16's scaler takes its overflows first; then non-finite values in any precision, and spikes.
  r.skipped = !scaler_->update(std::isfinite(r.grad_norm));
  if (!r.skipped) r.skip_reason = skips_->judge(step, loss, r.grad_norm);
  if (!r.skip_reason.empty() && early)
    throw RuntimeFailure(fmt::format("step {}: {}, but the host AdamW had already applied it while backward went on "
                                     "([offload] with grad_clip = 0 and no loss scaling): set [optim] grad_clip so "
                                     "that a step is judged before it is applied", step + 1, r.skip_reason));
  r.skipped |= !r.skip_reason.empty();
  if (!r.skipped) {
    be.push_range("optimizer");
    adamw_step(*store_, *optimizer_, r.lr, ++adam_steps_);
    store_->publish_params();
    be.pop_range();
  }
  r.skipped_total = scaler_->skipped() + skips_->skipped();
  const int p_end = be.timing_point();
  const CommPoint c_end = comm_now();
  const double offload_opt = offload_now() - o_opt;
  backend_->synchronize();
  if (order_) order_->end_step();  // every rank issued this step's collectives in one order
  const double comm_opt = comm_between(c_opt, c_end);
  r.step_ms = timer.ms();
  r.tokens_per_s = double(spec_.train.global_batch) * T / (r.step_ms / 1e3);
  r.data_wait_ms = wait_ms;
  // Exposed communication and offload waits are taken out of the phase they blocked (phases are
  // never negative: on a GPU the host's blocked time and the device's phase times are different
  // clocks).
  auto net = [&](const std::vector<Phase>& ph) {
    double ms = 0;
    for (const Phase& x : ph) {
      const double comm = comm_between(x.c0, x.c1);
      ms += std::max(0.0, be.timing_ms(x.from, x.to) - comm - x.offload), r.comm_ms += comm, r.offload_ms += x.offload;
    }
    return ms;
  };
  r.forward_ms = net(fwd);
  r.backward_ms = net(bwd);
  r.optimizer_ms = std::max(0.0, be.timing_ms(p_opt, p_end) - comm_opt - offload_opt);
  r.comm_ms += comm_opt;
  r.offload_ms += offload_opt;
  r.other_ms = std::max(0.0, r.step_ms - r.data_wait_ms - r.forward_ms - r.backward_ms - r.optimizer_ms - r.comm_ms -
                                r.offload_ms);
  if (traced) {
    const double base = ms_since(trace_origin_, host_start);
    auto add = [&](const char* name, const Phase& x) {
      trace_->add(name, step, base + be.timing_ms(p_start, x.from), be.timing_ms(x.from, x.to), 0, comm_between(x.c0, x.c1));
    };
    for (const Phase& x : fwd) add("forward", x);
    for (size_t i = 0; i < bwd.size(); ++i) add(i + 1 < bwd.size() ? "backward" : "gradient reduction + loss", bwd[i]);
    add("optimizer", {p_opt, p_end, c_opt, c_end});
    for (const auto& [start, dur] : data_spans) trace_->add("data wait", step, base + start, dur, 1);
    for (Comm* g : {topo_.world.get(), topo_.tp_group.get(), topo_.dp_group.get()}) g->set_wait_observer(nullptr);
    store_->set_offload_observer(nullptr);
    trace_->finish_step(step);
  }
  return r;
}

float Trainer::evaluate(std::vector<float>* each, bool* stopped) {
  ZT_CHECK(data_->n_val() > 0, "evaluate() without validation data");
  const int B = int(spec_.train.micro_batch), T = int(spec_.model.seq_len);
  // Micro-batch i is evaluated by data-parallel rank i mod D; every rank runs the same number of
  // forwards (possibly with zero weight) so that ZeRO-3's collectives stay matched.
  const int64_t n = spec_.train.eval_steps, rounds = (n + topo_.dp - 1) / topo_.dp;
  std::vector<double> sums(data_->n_val(), 0.0);
  for (size_t v = 0; v < data_->n_val(); ++v) {
    data::TokenDataset& val = data_->val(v);
    data::SampleOrder order(val, 0, /*shuffle=*/false);
    for (int64_t r = 0; r < rounds; ++r) {
      if (stopped && ckpts_ && ckpts_->enabled()) {  // one small all-reduce per round: every rank stops alike
        double signal = preemption_signal() != 0 ? 1.0 : 0.0;
        topo_.world->all_reduce_doubles(&signal, 1);
        if (signal > 0) {
          *stopped = true;
          return std::nanf("");
        }
      }
      const int64_t i = r * topo_.dp + topo_.dp_rank;
      order.fill(val, uint64_t(std::min(i, n - 1) * B), B, inputs_.data(), targets_.data());
      const float l = model_->forward(inputs_.data(), targets_.data(), B, T, 0.0f);
      if (i < n) sums[v] += l;
    }
  }
  topo_.dp_group->all_reduce_doubles(sums.data(), sums.size());
  double mean = 0;
  if (each) each->clear();
  for (double s : sums) {
    mean += s / double(n) / double(sums.size());
    if (each) each->push_back(float(s / double(n)));
  }
  return float(mean);
}

nlohmann::json Trainer::memory_record(int64_t step) const {
  // bytes by tier and kind of state: the device's (the backend's books), pinned host and NVMe
  const MemoryStats st = backend_->memory_stats();
  nlohmann::json device = {{"allocated", st.allocated}, {"peak", st.peak}, {"reserved", st.reserved}};
  for (size_t t = 0; t < size_t(MemTag::kCount); ++t) device[mem_tag_name(MemTag(t))] = st.by_tag[t];
  nlohmann::json rec = {{"kind", "memory"}, {"step", step}, {"rank", topo_.world_rank}, {"device", device},
                        {"pinned_host_total", st.pinned_host}};
  if (store_->offloads_optimizer()) {
    const ParamStore::TierBytes t = store_->tier_bytes();
    const char* kinds[3] = {"params", "grads", "optimizer"};
    nlohmann::json pinned, nvme;
    for (int k = 0; k < 3; ++k) pinned[kinds[k]] = t.pinned[k], nvme[kinds[k]] = t.nvme[k];
    rec["pinned_host"] = pinned;
    rec["nvme"] = nvme;
  }
  return rec;
}

void Trainer::log_memory() const {
  const MemoryStats s = backend_->memory_stats();
  auto mib = [&](MemTag t) { return s.by_tag[size_t(t)] / 1048576.0; };
  spdlog::info("rank {} memory: params {:.3f} MiB, grads {:.3f} MiB, optimizer {:.3f} MiB, "
               "activations {:.3f} MiB (tensor-parallel {}, ZeRO-{} over {} data-parallel ranks)",
               topo_.world_rank, mib(MemTag::Params), mib(MemTag::Grads), mib(MemTag::OptimStates),
               mib(MemTag::Activations), topo_.tp, spec_.parallel.zero_stage, topo_.dp);
  if (store_->offloads_optimizer()) {  // the other tiers, per kind of state
    const ParamStore::TierBytes t = store_->tier_bytes();
    auto m = [](double b) { return b / 1048576.0; };
    spdlog::info("rank {} offloaded: pinned host: params {:.3f} MiB (fp32 masters{}, compute copy), grads {:.3f} "
                 "MiB, optimizer {:.3f} MiB; nvme: params {:.3f} MiB, optimizer {:.3f} MiB ({}); pinned total "
                 "held {:.3f} MiB", topo_.world_rank, m(t.pinned[0]), t.nvme[0] > 0 ? " on nvme" : "", m(t.pinned[1]),
                 m(t.pinned[2]), m(t.nvme[0]), m(t.nvme[2]),
                 spec_.offload.nvme_path.empty() ? "no nvme_path" : spec_.offload.nvme_path, m(double(s.pinned_host)));
  }
}

void Trainer::run() {
  namespace fs = std::filesystem;
  const auto& t = spec_.train;
  const bool root = topo_.is_root();
  std::unique_ptr<MetricsWriter> metrics;
  agreed([&] {  // a bad out_dir (or a metrics.jsonl that is a directory) ends every rank alike
    if (!root) return;
    out_lock_ = claim_out_dir(spec_);
    write_file_atomic((fs::path(spec_.run.out_dir) / "config.resolved.toml").string(), resolved_toml(spec_));
    metrics = std::make_unique<MetricsWriter>(spec_.run.out_dir, start_step_);
  });
  std::unique_ptr<Telemetry> telemetry;  // rank 0's devices (or process), into metrics.jsonl
  if (root && spec_.run.telemetry_s > 0) {
    const int threads = spec_.run.threads > 0 ? int(spec_.run.threads) : int(std::thread::hardware_concurrency());
    telemetry = std::make_unique<Telemetry>(spec_.run.telemetry_s, backend_->kind() == DeviceKind::CUDA, threads,
                                            [&metrics](const nlohmann::json& row) { metrics->write(row); },
                                            backend_->pci_bus_id());
    spdlog::info("telemetry every {:g} s: {}", spec_.run.telemetry_s, telemetry->status());
  }
  if (ckpts_->enabled())
    ckpts_->start_writer(*store_, *model_, *backend_, [&metrics](const SaveStats& s) {
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
  if (root) {
    size_t real = 0;  // without the zero rows that pad the vocabulary (as checkpoints and exports hold it)
    for (const ParamInfo& p : model_->params()) real += p.stored_numel;
    const size_t held = model_->num_global_params();
    spdlog::info("run '{}': {}: {:.2f}M parameters{}", spec_.run.name, model_->describe(), real / 1e6,
                 held == real ? std::string()
                              : fmt::format(" ({:.2f}M held, with the vocabulary's padding rows)", held / 1e6));
    spdlog::info("data: {}; samples of {} tokens; global batch {} = {} ranks x {} micro-batches x {}; {} steps",
                 data_->describe(), m.seq_len, t.global_batch, topo_.dp, local_batch_ / t.micro_batch, t.micro_batch, t.max_steps);
  }
  log_memory();

  auto do_eval = [&](int64_t step) {
    if (data_->n_val() == 0) return;
    std::vector<float> each;
    bool stopped = false;
    const float vl = evaluate(&each, &stopped);
    if (stopped) {
      if (root) spdlog::warn("evaluation at step {} stopped by a signal: the checkpoint comes first", step);
      return;
    }
    if (!root) return;
    nlohmann::json row = {{"kind", "eval"}, {"step", step}, {"val_loss", vl}};
    std::string text;
    if (each.size() > 1) {  // each set's too, and val_loss is their mean
      nlohmann::json by = nlohmann::json::object();
      for (size_t v = 0; v < each.size(); ++v) {
        by[data_->val_names()[v]] = each[v];
        text += fmt::format(" | {} {:.4f}", data_->val_names()[v], each[v]);
      }
      row["val_loss_by_source"] = by;
    }
    std::printf("step %lld | val_loss %.4f%s\n", (long long)step, vl, text.c_str());
    std::fflush(stdout);
    metrics->write(row);
  };
  // MFU against one device's peak (found in build()), for every device of the job
  const double model_flops_per_token = flops_per_token(spec_.model, model_family(spec_.model.arch).matmul_params(spec_.model));
  if (root)
    spdlog::info("MFU against {:.3g} TFLOP/s per device ({}); {:.3g} GFLOP per token", peak_.tflops, peak_.source,
                 model_flops_per_token / 1e9);
  Progress progress(spec_, topo_.world_size, peak_, model_flops_per_token, *backend_, metrics.get(), telemetry.get(),
                    scaler_->active(), start_step_, [this](int64_t step) { return memory_record(step); });
  progress.tokens_by_source = [this] { return data_->tokens_by_source(); };
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
    if (skips_->rollback_due()) {
      const int64_t to = roll_back(s);
      if (root)
        metrics->write({{"kind", "rollback"}, {"step", s + 1}, {"to_step", to},
                        {"samples", {{"first", to * t.global_batch}, {"count", (s + 1 - to) * t.global_batch}}}});
    }
    const int64_t done = s + 1;
    set_current_step(long(s));
    progress.step_done(s, r);
    if (t.eval_every > 0 && done % t.eval_every == 0 && done != t.max_steps) do_eval(done);
    if (!ckpts_->enabled() || done == t.max_steps) continue;  // the last step's checkpoint is written below
    // A source gone for good shows in the loader before the next step uses it: every rank waits
    // for its next step's micro-batches (normally ready already), so the ranks learn of the
    // failure at this step's agreement, and write a checkpoint of this step before its error.
    // A preemption signal does not wait for a slow source: this step's checkpoint is complete.
    if (loader_)
      loader_->wait_ahead(int(local_batch_ / spec_.train.micro_batch), &carried_data_ms,
                          [] { return preemption_signal() != 0; });
    const bool data_failed = loader_ && loader_->failed();
    if (ckpts_->after_step(done, start_step_, [&] { return train_state(done); }, &carried_stall_ms, data_failed)) {
      agreed([&] {
        if (loader_ && loader_->failed()) loader_->rethrow_failure();
      });
      return;
    }
  }
  do_eval(t.max_steps);
  if (ckpts_->enabled() && start_step_ < t.max_steps) ckpts_->save_final(train_state(t.max_steps));
  const MemoryStats ms = backend_->memory_stats();
  spdlog::info("rank {} peak memory: {:.3f} MiB allocated by the {} backend ({} bytes)", topo_.world_rank,
               ms.peak / 1048576.0, backend_->name(), ms.peak);

  if (t.sample_tokens > 0) {
    const auto& info = data_->tokenizer();
    std::optional<data::Tokenizer> tok;
    if (info.kind == "byte") tok = data::Tokenizer::byte_level();
    else if (!info.vocab_file.empty() && fs::exists(info.vocab_file))
      tok = data::Tokenizer::from_tiktoken(info.vocab_file);
    // Every rank generates (ZeRO-3 gathers are collective); rank 0 prints.
    const auto out = generate(*model_, *backend_, {info.eot}, int(t.sample_tokens),
                              t.sample_temperature, info.n_vocab, uint64_t(spec_.run.seed));
    if (!root) return;
    std::vector<uint32_t> gen(out.begin() + 1, out.end());
    std::printf("---- sample (%lld tokens, temperature %.2f) ----\n", (long long)t.sample_tokens,
                t.sample_temperature);
    if (tok) {
      std::string text = tok->decode(gen);
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else {
      for (auto id : gen) std::printf("%u ", id);
    }
    std::printf("\n---- end of sample ----\n");
    std::fflush(stdout);
  }
  if (root) spdlog::info("done: metrics in {}", metrics->path());
}

}  // namespace zt
