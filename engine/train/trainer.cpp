// The training loop (see trainer.h).
#include "engine/train/trainer.h"

#include "engine/comm/agreement.h"
#include "engine/core/atomic_file.h"
#include "engine/plan/memory_plan.h"
#include "engine/train/throughput.h"
#include "engine/train/telemetry.h"
#include "engine/train/verdict.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <ctime>
#include <exception>
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
#include "engine/optim/schedule.h"
#include "engine/train/metrics.h"
#include "engine/train/preemption.h"
#include "engine/train/sampler.h"

namespace zt {

namespace {

// "data 2% fwd 31% bwd 55% opt 7% comm 3% other 2%": where the step's time went (checkpoint and
// offload shares only when present).
std::string breakdown_shares(const StepResult& r) {
  const double total = std::max(r.step_ms, 1e-9);
  std::string out;
  auto add = [&](const char* name, double ms, bool always) {
    if (!always && ms <= 0) return;
    out += fmt::format("{}{} {:.0f}%", out.empty() ? "" : " ", name, 100 * ms / total);
  };
  add("data", r.data_wait_ms, true);
  add("fwd", r.forward_ms, true);
  add("bwd", r.backward_ms, true);
  add("opt", r.optimizer_ms, true);
  add("comm", r.comm_ms, true);
  add("ckpt", r.checkpoint_ms, false);
  add("offload", r.offload_ms, false);
  add("other", r.other_ms, true);
  return out;
}

// 3725 s -> "1h02m", 95 s -> "1m35s", 7 s -> "7s"
std::string duration_text(double s) {
  const int64_t t = int64_t(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, int(t % 3600 / 60));
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, int(t % 60));
  return fmt::format("{}s", t);
}

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
  const std::string& c = spec.precision.compute;
  if (c == "auto") return backend.kind() == DeviceKind::CUDA ? DType::BF16 : DType::F32;
  return c == "bf16" ? DType::BF16 : c == "fp16" ? DType::F16 : DType::F32;
}

data::DataOptions data_options(const RunSpec& spec) {
  const auto& d = spec.data;
  data::DataOptions o;
  o.store.retries = int(d.retries);
  o.store.timeout_s = d.timeout_s;
  o.store.s3_endpoint = d.s3_endpoint;
  o.store.s3_region = d.s3_region;
  o.store.s3_path_style = d.s3_path_style;
  o.store.access_key_id = d.s3_access_key_id;
  o.store.secret_access_key = d.s3_secret_access_key;
  o.store.session_token = d.s3_session_token;
  o.cache_dir = d.cache_dir;
  o.cache_limit = parse_byte_size(d.cache_limit, "[data] cache_limit");
  o.prefetch = int(d.prefetch);
  o.shuffle_block = int(d.shuffle_block);
  return o;
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

std::string Trainer::choose_checkpoint() {
  const std::string& dir = ckpt_root_;
  // Candidates, newest first: the complete local ones and (s3://) the complete ones in the store,
  // listed by rank 0 and shared (every rank must try the same ones in the same order).
  std::set<int64_t> steps;
  for (const auto& c : list_checkpoints(dir))
    if (c.complete) steps.insert(c.step);
  if (ckpt_store_) {
    constexpr int kMax = 256;
    std::vector<double> shared(kMax + 1, 0.0);
    std::exception_ptr error;  // rank 0's listing failed: every rank must still reach the all-reduce
    if (topo_.is_root()) {
      try {
        const auto names = remote_checkpoints(*ckpt_store_);
        const size_t first = names.size() > kMax ? names.size() - kMax : 0;
        for (size_t i = first; i < names.size(); ++i)
          shared[1 + i - first] = double(std::stoll(names[i].substr(5))) + 1, shared[0] += 1;
      } catch (...) {
        error = std::current_exception();
        shared[0] = -1;
      }
    }
    topo_.world->all_reduce_doubles(shared.data(), shared.size());
    if (error) std::rethrow_exception(error);
    if (shared[0] < 0) throw PeerFailure(1, "rank 0 could not list the checkpoints in the store");
    for (int i = 0; i < int(shared[0]); ++i) steps.insert(int64_t(shared[size_t(1 + i)]) - 1);
  }
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string name = checkpoint_name(*it);
    std::string path = (std::filesystem::path(dir) / name).string();
    if (ckpt_store_ && !std::filesystem::exists(std::filesystem::path(path) / "checkpoint.h5")) {
      // one download per machine, then every rank reads the local copy
      agreed([&] {
        if (topo_.local_rank == 0) download_checkpoint(*ckpt_store_, name, dir);
      });
      if (topo_.is_root()) spdlog::info("checkpoint: downloaded {} to {}", ckpt_store_->describe(name), path);
    }
    // the ranks share the verification: each checks every world_size-th rank file
    const std::string problem = verify_checkpoint(path, topo_.world_rank, topo_.world_size);
    double bad = problem.empty() ? 0 : 1;
    topo_.world->all_reduce_doubles(&bad, 1);
    if (bad == 0) return path;
    if (!problem.empty())
      spdlog::warn("checkpoint {} is damaged: {}; falling back to the previous complete one", path, problem);
  }
  if (!steps.empty())
    user_error("{}: no complete checkpoint verifies (see the warnings above); resume = \"\" starts afresh",
               spec_.checkpoint.dir);
  return "";
}

std::string Trainer::local_checkpoint(const std::string& wanted) {
  namespace fs = std::filesystem;
  if (!is_remote_dir(wanted)) {
    if (fs::exists(fs::path(wanted) / "checkpoint.h5")) return wanted;
    const std::string latest = read_latest(wanted);
    if (latest.empty())
      user_error("{}: not a checkpoint (no checkpoint.h5) nor a checkpoint directory (no latest)", wanted);
    return (fs::path(wanted) / latest).string();
  }
  // s3://.../step_XXXXXXXX, or s3://... holding `latest`
  std::string uri = wanted;
  while (!uri.empty() && uri.back() == '/') uri.pop_back();
  const std::string last = uri.substr(uri.find_last_of('/') + 1);
  long long step = 0;
  int used = 0;
  const bool is_step = std::sscanf(last.c_str(), "step_%lld%n", &step, &used) == 1 && used == int(last.size());
  const auto store = open_checkpoint_store(spec_, data_options(spec_).store,
                                           is_step ? uri.substr(0, uri.size() - last.size() - 1) : uri);
  std::string name = last;
  if (!is_step) {
    name = store->get("latest");
    while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  }
  const std::string root = local_checkpoint_root(spec_);
  fs::create_directories(root);
  std::string path = (fs::path(root) / name).string();
  if (topo_.local_rank == 0) path = download_checkpoint(*store, name, root);
  return path;
}

void Trainer::resume_or_init() {
  const auto& k = spec_.checkpoint;
  if (!k.dir.empty()) {
    // one id for the job, from rank 0 (the time too: a container's pid repeats across restarts)
    double id = topo_.is_root() ? double(int64_t(std::time(nullptr)) % 100000000 * 100000 + ::getpid() % 100000) : 0.0;
    topo_.world->all_reduce_doubles(&id, 1);
    job_id_ = int64_t(id);
    ckpt_root_ = local_checkpoint_root(spec_);
    agreed([&] {
      std::filesystem::create_directories(ckpt_root_);
      if (is_remote_dir(k.dir)) ckpt_store_ = open_checkpoint_store(spec_, data_options(spec_).store, k.dir);
    });
  }
  const bool weights_only = !k.init_from.empty();
  const std::string wanted = weights_only ? k.init_from : k.resume;
  std::string path;
  if (wanted == "auto") {
    agreed([&] { path = choose_checkpoint(); });
    if (path.empty()) {
      if (topo_.is_root()) spdlog::info("checkpoint: none in {} yet: starting from step 0", k.dir);
      init_from_hf();
      return;
    }
  } else if (!wanted.empty()) {
    agreed([&] { path = local_checkpoint(wanted); });
    agreed([&] {
      const std::string problem = verify_checkpoint(path, topo_.world_rank, topo_.world_size);
      if (!problem.empty()) user_error("{}", problem);
    });
  }
  if (path.empty()) {
    init_from_hf();
    return;
  }
  Timer load_timer;
  TrainState st;
  agreed([&] {
    st = read_train_state(path);
    const std::string mismatch = model_mismatch(path, *model_);
    if (!mismatch.empty()) user_error("checkpoint does not fit [model]: {}", mismatch);
    if (!weights_only) start_step_ = restore_loader_position(st.data);
    load_states(path, *store_, *model_, weights_only);
  });
  store_->publish_written_masters();
  if (weights_only) {
    if (topo_.is_root()) spdlog::info("checkpoint: weights from {} (optimizer fresh, step 0)", path);
    return;
  }
  adam_steps_ = int(st.adam_steps);
  scaler_->restore(st.scaler);
  set_aside_newer_checkpoints(st.step);
  if (topo_.is_root())
    spdlog::info("checkpoint: resumed from {} at step {} (written by {} ranks: tensor {}, data {}, ZeRO-{}; "
                 "verified and loaded in {:.2f} s)", path, start_step_, st.world, st.tensor, st.data_parallel,
                 st.zero_stage, load_timer.seconds());
}

// [model] init_from: a fresh run (no checkpoint to resume) starts from Hugging Face weights,
// resharded to this layout; resuming from this run's own checkpoints takes precedence.
void Trainer::init_from_hf() {
  const std::string& dir = spec_.model.init_from;
  if (dir.empty()) return;
  Timer t;
  agreed([&] {
    const std::string mismatch = hf_mismatch(dir, spec_.model.arch, *model_);
    if (!mismatch.empty()) user_error("[model] init_from does not fit the model: {}", mismatch);
    load_hf_weights(dir, spec_.model.arch, *store_, *model_);
  });
  store_->publish_written_masters();
  if (topo_.is_root())
    spdlog::info("init_from: weights from {} ({} parameters, resharded to this layout in {:.2f} s; optimizer fresh)",
                 dir, model_->num_global_params(), t.seconds());
}

void Trainer::set_aside_newer_checkpoints(int64_t step) {
  // Resuming from an older checkpoint than the newest (an explicit path, or auto falling back
  // past a damaged one) starts a new history: the newer checkpoints of the old one must not be
  // taken for this run's (resume = auto would jump back to them; keep_last would delete this
  // run's saves first). Rank 0 renames them to step_X.superseded-<job> (kept, never listed);
  // in the store, their checkpoint.h5 goes, so they no longer count as complete.
  if (!topo_.is_root() || ckpt_root_.empty()) return;
  namespace fs = std::filesystem;
  for (const auto& c : list_checkpoints(ckpt_root_))
    if (c.step > step) {
      std::error_code ec;
      fs::rename(c.path, fmt::format("{}.superseded-{}", c.path, job_id_), ec);
      spdlog::warn("checkpoint: {} is newer than the resumed step {}: set aside as {}.superseded-{}", c.path, step,
                   c.path, job_id_);
    }
  if (ckpt_store_)
    for (const std::string& name : remote_checkpoints(*ckpt_store_))
      if (std::stoll(name.substr(5)) > step) ckpt_store_->remove(name + "/checkpoint.h5");
}

TrainState Trainer::train_state(int64_t steps_done) const {
  TrainState s;
  s.step = steps_done;
  s.adam_steps = adam_steps_;
  s.scaler = scaler_->state();
  s.data = loader_position(steps_done);
  s.spec_toml = resolved_toml(spec_);
  s.world = topo_.world_size, s.tensor = topo_.tp, s.data_parallel = topo_.dp, s.zero_stage = spec_.parallel.zero_stage;
  return s;
}

void Trainer::save_checkpoint(int64_t steps_done, bool wait) {
  ckpt_->save(train_state(steps_done), wait);
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
  const auto& d = spec.data;
  const data::DataOptions dopt = data_options(spec);
  train_ = std::make_unique<data::TokenDataset>(d.train, int(m.seq_len), int(m.vocab_size), dopt);
  if (!d.val.empty()) {
    val_ = std::make_unique<data::TokenDataset>(d.val, int(m.seq_len), int(m.vocab_size), dopt);
    // a val_loss over another tokenizer's ids would be meaningless, yet look like a number
    const auto &a = train_->manifest().tokenizer, &b = val_->manifest().tokenizer;
    if (a.kind != b.kind || a.name != b.name || a.n_vocab != b.n_vocab || a.eot != b.eot)
      user_error("{}: [data] train and val were tokenized differently: train by {} ({} ids, end-of-text {}), "
                 "val by {} ({} ids, end-of-text {}); tokenize both with the same vocabulary", spec.source,
                 a.name, a.n_vocab, a.eot, b.name, b.n_vocab, b.eot);
  }
  train_order_ = std::make_unique<data::SampleOrder>(*train_, uint64_t(spec.run.seed), true, int(d.shuffle_block));
  // Offload runs AdamW on the host's cores: ranks sharing a machine (and not bound by the
  // launcher) each take their own slice, so their optimizer threads do not fight.
  if (spec.offload.optimizer != "none") bind_rank_to_cores(topo_.local_rank, topo_.local_size);
  backend_ = make_backend(spec.run.device, int(spec.run.threads), topo_.local_rank);
  attach_device_comms(topo_, spec.comm.backend, *backend_, spec.comm.timeout_s);
  if (spec.comm.backend == "nccl" && backend_->kind() != DeviceKind::CUDA)
    user_error("{}: [comm] backend = \"nccl\" needs GPU buffers, but this run is on the {} backend "
               "(use \"mpi\" or \"auto\")", spec.source, backend_->name());
  if (!spec.run.device_memory_limit.empty())
    backend_->set_memory_limit(parse_byte_size(spec.run.device_memory_limit, "[run] device_memory_limit"));
  // One bounded pool of pinned host memory per rank: the key, or half the machine's memory
  // shared by the ranks on it.
  const double host_memory = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  const int local_ranks = std::max(1, topo_.local_size);
  const double pinned_limit = !spec.offload.pinned_limit.empty()
                                  ? double(parse_byte_size(spec.offload.pinned_limit, "[offload] pinned_limit"))
                                  : host_memory / 2 / local_ranks;
  if (pinned_limit * local_ranks > host_memory)  // the ranks on this machine each have a pool
    user_error("{}: [offload] pinned_limit = \"{}\" x {} rank(s) on this machine is more than its {:.3f} GiB of "
               "memory: pinned pages cannot be swapped, so the machine would run out of memory",
               spec.source, spec.offload.pinned_limit, local_ranks, host_memory / 1073741824.0);
  backend_->set_pinned_limit(size_t(pinned_limit));
  trace_ = std::make_unique<StepTrace>(spec.run.trace_steps, topo_.world_rank,
                                       (std::filesystem::path(spec.run.out_dir) /
                                        fmt::format("trace.rank{}.json", topo_.world_rank)).string());
  const DType compute = compute_dtype_for(spec, *backend_);
  backend_->set_compute_dtype(compute);
  backend_->set_deterministic(spec.run.deterministic);
  scaler_ = std::make_unique<LossScaler>(spec.precision, compute);
  if (topo_.is_root())
    spdlog::info("precision: {} compute, fp32 master weights, gradients and optimizer states{}", dtype_name(compute),
                 scaler_->active() ? fmt::format(", loss scale {} ({})", scaler_->scale(),
                                                 spec.precision.loss_scale == 0 ? "dynamic" : "fixed")
                                   : "");
  // before anything large is allocated: a spec that cannot fit says so with the numbers
  const MemoryPlan mem_plan = plan_memory(spec, topo_.tp, topo_.dp, dtype_size(compute));
  {
    const size_t available = backend_->memory_available();
    const int sharing = backend_->kind() == DeviceKind::CPU && spec.run.device_memory_limit.empty() ? topo_.local_size : 1;
    const double per_rank = available == SIZE_MAX ? 0 : double(available) / sharing;
    check_memory_fits(mem_plan, available, sharing,
                      !spec.run.device_memory_limit.empty() ? "[run] device_memory_limit"
                      : backend_->kind() == DeviceKind::CPU ? "this machine" : "the GPU",
                      spec.source, offload_hint(spec, topo_.tp, topo_.dp, dtype_size(compute), per_rank));
  }
  model_ = make_model(spec.model, *backend_, int(t.micro_batch), topo_.tp_group.get(), recompute_of(t.recompute));
  if (spec.offload.optimizer == "nvme")  // room for this rank's files (masters, moments, parameters on NVMe)
    agreed([&] { check_nvme_path(spec.offload.nvme_path, uint64_t(mem_plan.nvme)); });
  agreed([&] {  // the offloaded states (and the NVMe tier's block buffers) within the pinned pool
    if (mem_plan.pinned_host > pinned_limit)
      user_error("{}: the offloaded states need {:.3f} MiB of pinned host memory per rank ({:.0f} bytes), more than "
                 "the pinned pool of {:.3f} MiB ({}): raise [offload] pinned_limit, use optimizer = \"nvme\", or more "
                 "ranks", spec.source, mem_plan.pinned_host / 1048576.0, mem_plan.pinned_host,
                 pinned_limit / 1048576.0,
                 spec.offload.pinned_limit.empty() ? "half this machine's memory over its ranks" : "[offload] pinned_limit");
  });
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
}

Trainer::~Trainer() {
  // an early host AdamW still queued (a step that failed mid-backward) uses the optimizer, which
  // is destroyed before the store
  if (store_) store_->cancel_early_update();
  if (out_lock_fd_ >= 0) ::close(out_lock_fd_);  // releases the lock
}

void Trainer::claim_out_dir() {
  namespace fs = std::filesystem;
  const fs::path dir(spec_.run.out_dir);
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    user_error("{}: [run] out_dir = \"{}\" is a file, not a directory", spec_.source, dir.string());
  fs::create_directories(dir, ec);
  if (ec) user_error("{}: [run] out_dir = \"{}\": cannot create it: {}", spec_.source, dir.string(), ec.message());
  const fs::path resolved = dir / "config.resolved.toml";
  if (fs::exists(resolved, ec) && fs::equivalent(resolved, spec_.source, ec))
    user_error("{}: this is the run's own config.resolved.toml in [run] out_dir, which the run rewrites; copy it "
               "elsewhere first, or pass --set run.out_dir=ANOTHER_DIR", spec_.source);
  const std::string lock = (dir / ".lock").string();
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) user_error("{}: cannot create: {}", lock, std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {0};
    (void)!::pread(fd, pid, sizeof pid - 1, 0);
    ::close(fd);
    user_error("{}: [run] out_dir = \"{}\" is in use by another ztrain run (pid {}); wait for it to end, or "
               "choose another out_dir", spec_.source, dir.string(), std::string(pid).empty() ? "unknown" : pid);
  }
  const std::string me = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size()))
    spdlog::warn("{}: cannot record this run's pid", lock);
  out_lock_fd_ = fd;
}

StepResult Trainer::step(int64_t step) {
  Timer timer;
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
  if (!loader_ || loader_step_ != step)  // (re)start the background loader at this step
    loader_ = std::make_unique<data::BatchLoader>(*train_, *train_order_, B, first_of,
                                                  uint64_t(step * accum), 4, int(spec_.data.prefetch));
  loader_step_ = step + 1;
  // The breakdown: timing points around the phases (device time on a GPU, read after the step's
  // synchronize) and the host's blocked time in collectives, read at the same boundaries.
  auto comm_now = [&] { return topo_.world->waited_ms() + topo_.tp_group->waited_ms() + topo_.dp_group->waited_ms(); };
  auto offload_now = [&] { return store_->offload_waited_ms(); };
  struct Phase {
    int from, to;
    double comm, offload = 0;
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
  injected_delay(faults().slow_host_ms);  // the host-bound verdict's test: a slow host
  store_->zero_grad();
  const double lr = lr_at(spec_.optim, step, spec_.train.max_steps);
  // With optimizer offload to CPU memory, each group's host AdamW may run while backward goes on,
  // where nothing global (clipping by the norm, fp16 unscaling) must first touch the gradients.
  if (spec_.optim.grad_clip == 0 && !scaler_->active() &&
      store_->schedule_early_update(*optimizer_, lr, adam_steps_ + 1) && !early_update_logged_) {
    early_update_logged_ = true;
    if (topo_.is_root())
      spdlog::info("offload: each layer's host AdamW runs while backward goes on (no clipping, no loss scaling)");
  }
  double wait_ms = 0;
  for (int64_t micro = 0; micro < accum; ++micro) {
    const auto w0 = std::chrono::steady_clock::now();
    loader_->next(inputs_.data(), targets_.data(), &wait_ms);
    if (traced) data_spans.push_back({ms_since(host_start, w0), ms_since(w0, std::chrono::steady_clock::now())});
    if (on_batch) on_batch(inputs_.data(), targets_.data());
    store_->set_last_micro_batch(micro == accum - 1);
    if (micro == accum - 1) store_->prefetch_optimizer_states();  // NVMe: the step's first reads, now
    const bool timed = 2 * micro + 8 < Backend::kTimingPoints;  // beyond: counted in "other"
    const double c0 = comm_now(), o0 = offload_now();
    const int p0 = timed ? be.timing_point() : 0;
    be.push_range("forward");
    model_->forward_deferred(inputs_.data(), targets_.data(), B, T, grad_scale);
    be.pop_range();
    const double c1 = comm_now(), o1 = offload_now();
    const int p1 = timed ? be.timing_point() : 0;
    exit_if_fault_injected(topo_.world_rank, step);
    be.push_range("backward");
    model_->backward();
    be.pop_range();
    if (timed)
      fwd.push_back({p0, p1, c1 - c0, o1 - o0}),
          bwd.push_back({p1, be.timing_point(), comm_now() - c1, offload_now() - o1});
  }
  const double c_reduce = comm_now(), o_reduce = offload_now();
  const int p_reduce = be.timing_point();
  be.push_range("gradient reduction");
  store_->finish_backward();  // the last gradient reductions: backward's tail
  be.pop_range();
  double loss = model_->take_losses() / double(global_micro);
  topo_.dp_group->all_reduce_doubles(&loss, 1);
  bwd.push_back({p_reduce, be.timing_point(), comm_now() - c_reduce, offload_now() - o_reduce});
  const double c_opt = comm_now(), o_opt = offload_now();
  const int p_opt = be.timing_point();
  StepResult r;
  r.step = step;
  r.loss = float(loss);
  r.grad_norm = optimizer_->clip_grad_norm(store_->spans(), store_->norm_group(), spec_.optim.grad_clip, loss_scale);
  r.lr = lr;
  r.loss_scale = loss_scale;
  // The norm is global (reduced over every rank), so all ranks agree on skipping.
  r.skipped = !scaler_->update(std::isfinite(r.grad_norm));
  if (!r.skipped) {
    be.push_range("optimizer");
    store_->optimizer_step(*optimizer_, r.lr, ++adam_steps_);
    store_->publish_params();
    be.pop_range();
  }
  r.skipped_total = scaler_->skipped();
  const int p_end = be.timing_point();
  const double comm_opt = comm_now() - c_opt, offload_opt = offload_now() - o_opt;
  backend_->synchronize();
  r.step_ms = timer.ms();
  r.tokens_per_s = double(spec_.train.global_batch) * T / (r.step_ms / 1e3);
  r.data_wait_ms = wait_ms;
  // Exposed communication and offload waits are taken out of the phase they blocked (phases are
  // never negative: on a GPU the host's blocked time and the device's phase times are different
  // clocks).
  auto net = [&](const std::vector<Phase>& ph) {
    double ms = 0;
    for (const Phase& x : ph)
      ms += std::max(0.0, be.timing_ms(x.from, x.to) - x.comm - x.offload), r.comm_ms += x.comm,
          r.offload_ms += x.offload;
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
      trace_->add(name, step, base + be.timing_ms(p_start, x.from), be.timing_ms(x.from, x.to), 0, x.comm);
    };
    for (const Phase& x : fwd) add("forward", x);
    for (size_t i = 0; i < bwd.size(); ++i) add(i + 1 < bwd.size() ? "backward" : "gradient reduction + loss", bwd[i]);
    add("optimizer", {p_opt, p_end, comm_opt});
    for (const auto& [start, dur] : data_spans) trace_->add("data wait", step, base + start, dur, 1);
    for (Comm* g : {topo_.world.get(), topo_.tp_group.get(), topo_.dp_group.get()}) g->set_wait_observer(nullptr);
    store_->set_offload_observer(nullptr);
    trace_->finish_step(step);
  }
  return r;
}

data::LoaderPosition Trainer::loader_position(int64_t next_step) const {
  return {uint64_t(next_step * spec_.train.global_batch), uint64_t(spec_.run.seed),
          data::dataset_fingerprint(train_->manifest()), spec_.train.global_batch};
}

int64_t Trainer::restore_loader_position(const data::LoaderPosition& p) const {
  if (p.dataset_crc != data::dataset_fingerprint(train_->manifest()))
    user_error("the saved data position belongs to another dataset than {}", spec_.data.train);
  if (p.seed != uint64_t(spec_.run.seed))
    user_error("the saved data position used seed {}, this run has [run] seed = {}", p.seed, spec_.run.seed);
  if (p.global_batch != spec_.train.global_batch || p.next_sample % uint64_t(p.global_batch) != 0)
    user_error("the saved data position used global_batch {}, this run has {}", p.global_batch,
               spec_.train.global_batch);
  return int64_t(p.next_sample / uint64_t(p.global_batch));  // the step to continue with
}

float Trainer::evaluate() {
  ZT_CHECK(val_ != nullptr, "evaluate() without [data] val");
  const int B = int(spec_.train.micro_batch), T = int(spec_.model.seq_len);
  data::SampleOrder order(*val_, 0, /*shuffle=*/false);
  // Micro-batch i is evaluated by data-parallel rank i mod D; every rank runs the same number of
  // forwards (possibly with zero weight) so that ZeRO-3's collectives stay matched.
  const int64_t n = spec_.train.eval_steps, rounds = (n + topo_.dp - 1) / topo_.dp;
  double sum = 0;
  for (int64_t r = 0; r < rounds; ++r) {
    const int64_t i = r * topo_.dp + topo_.dp_rank;
    order.fill(*val_, uint64_t(std::min(i, n - 1) * B), B, inputs_.data(), targets_.data());
    const float l = model_->forward(inputs_.data(), targets_.data(), B, T, 0.0f);
    if (i < n) sum += l;
  }
  topo_.dp_group->all_reduce_doubles(&sum, 1);
  return float(sum / double(n));
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
  agreed([&] {
    if (root) claim_out_dir();
  });
  if (root) {
    write_file_atomic((fs::path(spec_.run.out_dir) / "config.resolved.toml").string(), resolved_toml(spec_));
    metrics = std::make_unique<MetricsWriter>(spec_.run.out_dir, start_step_);
  }
  std::unique_ptr<Telemetry> telemetry;  // rank 0's devices (or process), into metrics.jsonl
  if (root && spec_.run.telemetry_s > 0) {
    const int threads = spec_.run.threads > 0 ? int(spec_.run.threads) : int(std::thread::hardware_concurrency());
    telemetry = std::make_unique<Telemetry>(spec_.run.telemetry_s, backend_->kind() == DeviceKind::CUDA, threads,
                                            [&metrics](const nlohmann::json& row) { metrics->write(row); },
                                            backend_->pci_bus_id());
    spdlog::info("telemetry every {:g} s: {}", spec_.run.telemetry_s, telemetry->status());
  }
  const auto& k = spec_.checkpoint;
  if (!k.dir.empty()) {
    RunSpec::Checkpoint local = k;
    local.dir = ckpt_root_;
    ckpt_ = std::make_unique<CheckpointWriter>(local, *store_, *model_, topo_, *backend_, job_id_, ckpt_store_.get());
    if (root)
      ckpt_->on_complete = [&metrics](const SaveStats& s) {
        metrics->write({{"kind", "checkpoint"}, {"step", s.step}, {"async", s.async}, {"stall_ms", s.stall_ms},
                        {"write_s", s.write_s}, {"commit_ms", s.commit_ms}, {"rank0_bytes", s.bytes}});
      };
    install_preemption_handlers();
    if (root)
      spdlog::info("checkpoint: {}{}; {} saves hold {:.1f} MiB of host buffers (rank 0)", k.dir,
                   k.every_steps > 0 ? fmt::format(" every {} steps", k.every_steps) : "",
                   k.async ? "async" : "synchronous", ckpt_->host_buffer_mib());
  }
  if (!ckpt_) install_interrupt_report(root);
  Timer since_save;
  const auto& m = spec_.model;
  if (root) {
    spdlog::info("run '{}': {}: {:.2f}M parameters", spec_.run.name, model_->describe(),
                 model_->num_global_params() / 1e6);
    spdlog::info("data: {} ({} tokens, {} samples of {}); global batch {} = {} ranks x {} micro-batches x {}; {} steps",
                 spec_.data.train, train_->manifest().total_tokens(), train_->n_windows(), m.seq_len,
                 t.global_batch, topo_.dp, local_batch_ / t.micro_batch, t.micro_batch, t.max_steps);
  }
  log_memory();

  auto do_eval = [&](int64_t step) {
    if (!val_) return;
    const float vl = evaluate();
    if (!root) return;
    std::printf("step %lld | val_loss %.4f\n", (long long)step, vl);
    std::fflush(stdout);
    metrics->write({{"kind", "eval"}, {"step", step}, {"val_loss", vl}});
  };
  // MFU against one device's peak (found in build()), for every device of the job
  const Peak& peak = peak_;
  const double model_flops_per_token = flops_per_token(spec_.model, double(model_->num_global_params()));
  if (root)
    spdlog::info("MFU against {:.3g} TFLOP/s per device ({}); {:.3g} GFLOP per token", peak.tflops, peak.source,
                 model_flops_per_token / 1e9);
  auto mfu_at = [&](double tokens_per_s) {  // of the whole job, against each device's peak
    return peak.tflops > 0 ? tokens_per_s * model_flops_per_token / (peak.tflops * 1e12 * topo_.world_size) : 0;
  };
  double carried_stall_ms = 0;  // a checkpoint save's stall, paid by the next step
  StepResult interval;          // the breakdown summed since the last log line, for the verdict
  int64_t interval_steps = 0;
  std::string last_judged, last_verdict;  // the previous interval's judgement; the verdict last reported
  double mean_step_ms = 0;      // for the time left: mean over this launch's steps after the first
  for (int64_t s = start_step_; s < t.max_steps; ++s) {
    StepResult r = step(s);
    r.checkpoint_ms = carried_stall_ms, r.step_ms += carried_stall_ms, carried_stall_ms = 0;
    r.tokens_per_s = double(t.global_batch) * double(m.seq_len) / (r.step_ms / 1e3);
    if (s > start_step_) mean_step_ms += (r.step_ms - mean_step_ms) / double(s - start_step_);
    const double mfu = mfu_at(r.tokens_per_s);
    for (auto [sum, part] : {std::pair{&interval.step_ms, r.step_ms}, {&interval.data_wait_ms, r.data_wait_ms},
                             {&interval.comm_ms, r.comm_ms}, {&interval.other_ms, r.other_ms},
                             {&interval.offload_ms, r.offload_ms}})
      *sum += part;
    ++interval_steps;
    if (!std::isfinite(r.loss))
      throw RuntimeFailure(fmt::format("step {}: loss is {} (diverged); lower [optim] lr", s + 1, r.loss));
    const int64_t done = s + 1;
    set_current_step(long(s));
    if (root && (done % t.log_every == 0 || done == t.max_steps || s == 0)) {
      const std::string scaling =
          scaler_->active() ? fmt::format(" | scale {:g} | skipped {}", r.loss_scale, r.skipped_total) : "";
      const double left_s = (mean_step_ms > 0 ? mean_step_ms : r.step_ms) * double(t.max_steps - done) / 1e3;
      std::printf("step %lld/%lld | loss %.4f | lr %.3e | grad_norm %s | %.0f tok/s | MFU %.1f%% | %.1f ms (%s)%s | "
                  "left %s\n",
                  (long long)done, (long long)t.max_steps, r.loss, r.lr,
                  r.skipped ? "overflow (step skipped)" : fmt::format("{:.4f}", r.grad_norm).c_str(),
                  r.tokens_per_s, 100 * mfu, r.step_ms, breakdown_shares(r).c_str(), scaling.c_str(),
                  duration_text(left_s).c_str());
      std::fflush(stdout);
      nlohmann::json rec = {{"kind", "train"}, {"step", done}, {"loss", r.loss}, {"lr", r.lr},
                            {"grad_norm", std::isfinite(r.grad_norm) ? nlohmann::json(r.grad_norm) : nlohmann::json()},
                            {"tokens_per_s", r.tokens_per_s}, {"mfu", mfu}, {"step_ms", r.step_ms},
                            {"data_wait_ms", r.data_wait_ms}, {"forward_ms", r.forward_ms},
                            {"backward_ms", r.backward_ms}, {"optimizer_ms", r.optimizer_ms},
                            {"comm_ms", r.comm_ms}, {"checkpoint_ms", r.checkpoint_ms},
                            {"offload_ms", r.offload_ms}, {"other_ms", r.other_ms}, {"eta_s", left_s}};
      if (scaler_->active()) {
        rec["loss_scale"] = r.loss_scale;
        rec["skipped"] = r.skipped;
        rec["skipped_steps"] = r.skipped_total;
      }
      metrics->write(rec);
      metrics->write(memory_record(done));
      if (s > start_step_) {  // the first step pays for warm-up (the first shard, first touches)
        const MemoryStats ms = backend_->memory_stats();
        const size_t avail = backend_->memory_available();
        const double limit = avail == SIZE_MAX ? 0 : double(avail) + double(ms.allocated);
        const double interval_mfu =
            peak.tflops > 0 && interval.step_ms > 0
                ? mfu_at(double(interval_steps) * double(t.global_batch) * double(m.seq_len) / (interval.step_ms / 1e3))
                : -1;
        const Verdict v = judge(interval, ms, limit, spec_, telemetry ? telemetry->signals() : DeviceSignals{},
                                interval_mfu);
        // One interval's hiccup (a scheduler stall, a page-cache miss) is not a verdict: the same
        // kind must hold over two log intervals in a row before it is reported.
        const bool confirmed = !v.kind.empty() && v.kind == last_judged;
        if (confirmed && v.kind != last_verdict) spdlog::warn("{}", v.line());
        if (confirmed)
          metrics->write({{"kind", "verdict"}, {"step", done}, {"verdict", v.kind}, {"evidence", v.evidence},
                          {"knob", v.knob}});
        last_verdict = confirmed ? v.kind : std::string();
        last_judged = v.kind;
      }
    }
    if (done % t.log_every == 0 || done == t.max_steps || s == start_step_) interval = StepResult{}, interval_steps = 0;
    if (t.eval_every > 0 && done % t.eval_every == 0 && done != t.max_steps) do_eval(done);
    if (!ckpt_ || done == t.max_steps) continue;  // the last step's checkpoint is written below
    // The ranks agree, in one small all-reduce per step: a signal on any rank, rank 0's clock for
    // every_minutes, and whether every rank finished writing its part of the pending save.
    double agree[5] = {preemption_signal() ? 1.0 : 0.0,
                       root && k.every_minutes > 0 && since_save.seconds() >= 60 * k.every_minutes ? 1.0 : 0.0,
                       ckpt_->local_done() ? 1.0 : 0.0, ckpt_->local_failed() ? 1.0 : 0.0,
                       ckpt_->commit_failed() ? 1.0 : 0.0};
    topo_.world->all_reduce_doubles(agree, 5);
    if (agree[4] > 0) ckpt_->throw_commit_failure();  // rank 0's commit failed: every rank stops
    if (ckpt_->pending() && agree[2] == topo_.world_size) ckpt_->complete(agree[3] > 0);
    ckpt_->poll_commit(/*wait=*/false);
    const bool stop = agree[0] > 0 || (k.exit_after > 0 && done - start_step_ >= k.exit_after);
    if (stop) {
      Timer t_save;
      save_checkpoint(done, /*wait=*/true);
      if (root) {
        const int sig = preemption_signal();
        const std::string why = agree[0] == 0 ? "[checkpoint] exit_after reached"
                                : sig       ? fmt::format("stopped by {}", signal_name(sig))
                                            : "stopped by a signal to another rank";
        std::printf("%s after step %lld: checkpoint %s written in %.2f s; continue with --resume auto\n",
                    why.c_str(), (long long)done, ckpt_->last_complete().c_str(), t_save.seconds());
        std::fflush(stdout);
      }
      return;
    }
    if ((k.every_steps > 0 && done % k.every_steps == 0) || agree[1] > 0) {
      Timer stall;
      save_checkpoint(done, /*wait=*/false);
      carried_stall_ms = stall.ms();
      since_save.reset();
      if (root)
        spdlog::info("checkpoint: step {} {} ({:.1f} ms{}, {:.1f} MiB of host buffers)", done,
                     k.async ? "saving in the background" : "saved", ckpt_->last_stall_ms(),
                     k.async ? " paid by the step" : "", ckpt_->host_buffer_mib());
    }
  }
  do_eval(t.max_steps);
  if (ckpt_ && start_step_ < t.max_steps) save_checkpoint(t.max_steps, /*wait=*/true);
  const MemoryStats ms = backend_->memory_stats();
  spdlog::info("rank {} peak memory: {:.3f} MiB allocated by the {} backend ({} bytes)", topo_.world_rank,
               ms.peak / 1048576.0, backend_->name(), ms.peak);

  if (t.sample_tokens > 0) {
    const auto& info = train_->manifest().tokenizer;
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
