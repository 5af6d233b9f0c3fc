// Which checkpoint a run resumes from and when it saves (see checkpoint_manager.h).
#include "engine/checkpoint/checkpoint_manager.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <cstdio>
#include <ctime>
#include <exception>
#include <filesystem>
#include <set>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/checkpoint/checkpoint_files.h"
#include "engine/checkpoint/checkpoint_reader.h"
#include "engine/checkpoint/remote.h"
#include "engine/comm/agreement.h"
#include "engine/config/data_options.h"
#include "engine/core/atomic_file.h"
#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/core/user_path.h"
#include "engine/core/preemption.h"

namespace zt {

namespace fs = std::filesystem;

CheckpointManager::CheckpointManager(const RunSpec& spec, const Topology& topo) : spec_(spec), topo_(topo) {
  if (!enabled()) return;
  // one id for the job, from rank 0 (the time too: a container's pid repeats across restarts)
  double id = topo_.is_root() ? double(int64_t(std::time(nullptr)) % 100000000 * 100000 + ::getpid() % 100000) : 0.0;
  topo_.world->all_reduce_doubles(&id, 1);
  job_id_ = int64_t(id);
  root_ = local_checkpoint_root(spec_);
  run_agreed(*topo_.world, [&] {
    const std::string key = fmt::format("{}: [checkpoint] {}", spec_.source,
                                        root_ == spec_.checkpoint.dir     ? "dir"
                                        : !spec_.checkpoint.local_dir.empty() ? "local_dir"
                                                                          : "local_dir (unset: [run] out_dir/checkpoints)");
    check_dir_arg(root_, key);
    // One run at a time: another job's saves and prunes would destroy this one's (and the
    // unfinished saves this job removes are then surely of dead jobs). For s3:// the lock is on
    // the local directory: two runs sharing the store but not local_dir are not stopped.
    if (topo_.is_root()) {
      lock_ = DirLock(root_, ".checkpoint.lock", fmt::format("{} = \"{}\"", key, root_), "wait for it to end, or give this run its own checkpoint dir");
      remove_stale_probes();
    }
    probe_local(key);
    if (is_remote_dir(spec_.checkpoint.dir)) {
      store_ = open_checkpoint_store(spec_, data_options(spec_).store, spec_.checkpoint.dir);
      if (topo_.is_root()) probe_store();
    }
  });
}

void CheckpointManager::remove_stale_probes() const {
  // Probe files are removed by the job that writes them, unless it is killed first (kill -9 during
  // the preemption probe left .probe-write-* behind for good). The lock says no other job uses
  // this directory: a probe file of another job id is a dead job's.
  const std::string mine = std::to_string(job_id_);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_, ec)) {
    const std::string name = entry.path().filename().string();
    const bool probe = name.starts_with(".probe-") || name.starts_with("ztrain-probe-");
    const bool ours = name.find("-" + mine + "-rank") != std::string::npos || name.ends_with("-" + mine);
    if (probe && !ours && entry.is_regular_file(ec)) fs::remove(entry.path(), ec);
  }
}

void CheckpointManager::probe_local(const std::string& key) const {
  // Each rank writes its own rank file here: each finds out now, not after every_steps of training.
  const std::string probe = (fs::path(root_) / fmt::format(".probe-{}-rank{}", job_id_, topo_.world_rank)).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && ::write(fd, "ztrain", 6) == 6;
  int err = errno;
  if (fd >= 0 && ::close(fd) != 0 && ok) ok = false, err = errno;  // NFS reports a full disk here
  ::unlink(probe.c_str());
  if (!ok) user_error("{}: {}: checkpoints cannot be written there: {}", key, root_, std::strerror(err));
}

void CheckpointManager::probe_store() const {
  // A small object written and deleted, as `ztrain doctor` does: a missing bucket or bad
  // credentials end the run now.
  const std::string name = fmt::format("ztrain-probe-{}", job_id_);
  const std::string local = (fs::path(root_) / name).string();
  // few retries and a short timeout: the other ranks wait in a collective meanwhile
  data::StoreOptions quick = data_options(spec_).store;
  quick.retries = std::min(quick.retries, 1);
  quick.timeout_s = std::min(quick.timeout_s, 15.0);
  try {
    write_file_atomic(local, "ztrain checkpoint probe\n");
    const auto store = open_checkpoint_store(spec_, quick, spec_.checkpoint.dir);
    store->put(name, local);
    store->remove(name);
  } catch (const std::exception& e) {
    ::unlink(local.c_str());
    user_error("{}: [checkpoint] dir = \"{}\": checkpoints cannot be uploaded there: {}", spec_.source,
               spec_.checkpoint.dir, e.what());
  }
  ::unlink(local.c_str());
}

CheckpointManager::~CheckpointManager() = default;

std::string CheckpointManager::find(const std::string& wanted) {
  std::string path;
  if (wanted == "auto") {
    run_agreed(*topo_.world, [&] { path = choose(); });
    return path;
  }
  run_agreed(*topo_.world, [&] { path = local_copy(wanted); });
  run_agreed(*topo_.world, [&] {
    const std::string problem = verify_checkpoint(path, topo_.world_rank, topo_.world_size);
    if (!problem.empty()) user_error("{}", problem);
  });
  return path;
}

std::string CheckpointManager::newest_before(int64_t step) {
  writer_->finish();
  std::string path;
  run_agreed(*topo_.world, [&] { path = choose(step); });
  return path;
}

std::string CheckpointManager::choose(int64_t before) {
  const std::string& dir = root_;
  // Candidates, newest first: the complete local ones and (s3://) the complete ones in the store,
  // listed by rank 0 and shared (every rank must try the same ones in the same order).
  std::set<int64_t> steps;
  for (const auto& c : list_checkpoints(dir))
    if (c.complete && c.step < before) steps.insert(c.step);
  if (store_) {
    // Rank 0's list (its local copies and the store's), shared: on several machines each local
    // directory holds other files, and every rank must try the same candidates in one order.
    constexpr int kMax = 256;
    std::vector<double> shared(kMax + 1, 0.0);
    std::exception_ptr error;  // rank 0's listing failed: every rank must still reach the all-reduce
    if (topo_.is_root()) {
      try {
        for (const std::string& name : remote_checkpoints(*store_))
          if (const int64_t st = std::stoll(name.substr(5)); st < before) steps.insert(st);
        std::vector<int64_t> newest(steps.begin(), steps.end());
        const size_t first = newest.size() > kMax ? newest.size() - kMax : 0;
        for (size_t i = first; i < newest.size(); ++i) shared[1 + i - first] = double(newest[i]) + 1, shared[0] += 1;
      } catch (...) {
        error = std::current_exception();
        shared[0] = -1;
      }
    }
    topo_.world->all_reduce_doubles(shared.data(), shared.size());
    if (error) std::rethrow_exception(error);
    if (shared[0] < 0) throw PeerFailure(1, "rank 0 could not list the checkpoints in the store");
    steps.clear();
    for (int i = 0; i < int(shared[0]); ++i) steps.insert(int64_t(shared[size_t(1 + i)]) - 1);
  }
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string name = checkpoint_name(*it);
    std::string path = (fs::path(dir) / name).string();
    std::string fetch_problem;
    if (store_) {
      // once per machine: the files its local copy lacks (all, or other machines' rank files)
      // A fetch that fails (a save complete on rank 0's machine whose upload failed) makes this
      // candidate damaged for every rank, through the verification's agreement below.
      bool fetched = false;
      run_agreed(*topo_.world, [&] {
        if (topo_.local_rank == 0) try {
            download_checkpoint(*store_, name, dir, &fetched);
          } catch (const std::exception& e) {
            fetch_problem = e.what();
          }
      });
      if (fetched) spdlog::info("checkpoint: rank {}: downloaded {} to {}", topo_.world_rank, store_->describe(name), path);
      if (!fetch_problem.empty()) fetch_problem = "this machine cannot fetch it: " + fetch_problem;
    }
    // the ranks share the verification: each checks every world_size-th rank file
    const std::string problem =
        !fetch_problem.empty() ? fetch_problem : verify_checkpoint(path, topo_.world_rank, topo_.world_size);
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

std::string CheckpointManager::local_copy(const std::string& wanted) {
  if (!is_remote_dir(wanted)) return resolve_local_checkpoint(wanted);
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

void CheckpointManager::set_aside_newer(int64_t step) {
  // Resuming from an older checkpoint than the newest (an explicit path, or auto falling back
  // past a damaged one) starts a new history: the newer checkpoints of the old one must not be
  // taken for this run's (resume = auto would jump back to them; keep_last would delete this
  // run's saves first). Rank 0 renames them to step_X.superseded-<job> (kept, never listed);
  // in the store, their checkpoint.h5 goes, so they no longer count as complete.
  // An unfinished save (step_X.tmp-JOB) is never set aside: its job is dead (this one holds the
  // directory's lock and has not saved yet), and the next save removes it.
  if (!topo_.is_root() || root_.empty()) return;
  for (const auto& c : list_checkpoints(root_))
    if (c.complete && c.step > step) {
      std::error_code ec;
      fs::rename(c.path, fmt::format("{}.superseded-{}", c.path, job_id_), ec);
      spdlog::warn("checkpoint: {} is newer than the resumed step {}: set aside as {}.superseded-{}", c.path, step,
                   c.path, job_id_);
    }
  if (store_)
    for (const std::string& name : remote_checkpoints(*store_))
      if (std::stoll(name.substr(5)) > step) store_->remove(name + "/checkpoint.h5");
}

void CheckpointManager::start_writer(ModelStates& store, const ParamTable& model, Backend& backend,
                                     std::function<void(const SaveStats&)> on_complete) {
  const auto& k = spec_.checkpoint;
  RunSpec::Checkpoint local = k;
  local.dir = root_;
  writer_ = std::make_unique<CheckpointWriter>(local, store, model, topo_, backend, job_id_, store_.get());
  // A completed save is the best estimate of the next one: rank 0's stall + write + commit (an
  // async save's write shares the cores with training, so it reads high, on the safe side).
  writer_->on_complete = [this, report = std::move(on_complete)](const SaveStats& s) {
    // a synchronous save's stall is its write
    const double notice = spec_.checkpoint.preemption_notice_s,
                 took = s.stall_ms / 1e3 + (s.async ? s.write_s : 0.0) + s.commit_ms / 1e3;
    if (notice > 0) {
      if (took > notice && estimate_s_ <= notice)
        spdlog::warn("checkpoint: the save of step {} took {:.2f} s (rank 0), more than [checkpoint] "
                     "preemption_notice_s = {:g}: a save on a signal would not fit", s.step, took, notice);
      estimate_s_ = took;
    }
    if (report) report(s);
  };
  install_preemption_handlers();
  if (topo_.is_root())
    spdlog::info("checkpoint: {}{}; {} saves hold {:.1f} MiB of host buffers (rank 0)", k.dir,
                 k.every_steps > 0 ? fmt::format(" every {} steps", k.every_steps) : "",
                 k.async ? "async" : "synchronous", writer_->host_buffer_mib());
  if (k.preemption_notice_s > 0) estimate_save();
  if (k.preemption_notice_s > 0 && topo_.is_root()) warn_if_mpirun_kills_early();  // a run expecting SIGTERMs
  since_save_.reset();
}

void CheckpointManager::warn_if_mpirun_kills_early() const {
  // Open MPI's mpirun given SIGTERM (docker stop, a spot VM's shutdown, kill) waits
  // odls_base_sigkill_timeout (1 s), passes the SIGTERM on, waits as long again and kills the
  // ranks: about 1 s for a save on the signal. A larger timeout only delays the SIGTERM itself.
  // SIGUSR1 and SIGUSR2 it passes on at once and kills nothing. (Checked with Open MPI 4.1.)
  if (topo_.world_size < 2 || !std::getenv("OMPI_COMM_WORLD_SIZE")) return;
  spdlog::warn("checkpoint: under Open MPI's mpirun, a SIGTERM to mpirun reaches the ranks about 1 s before "
               "mpirun kills them, too soon for a save on the signal: stop the job with SIGUSR1, which mpirun "
               "passes on at once (docker run --stop-signal SIGUSR1, Slurm --signal=B:USR1@180, kill -USR1), "
               "or signal the ranks themselves (docs/runbooks.md, \"mpirun and SIGTERM\")");
}

void CheckpointManager::estimate_save() {
  const auto& k = spec_.checkpoint;
  const double mib = 1048576.0, bytes = writer_->rank_bytes();
  // up to 1 GiB: a virtual disk with a write cache takes a few hundred MiB at memory speed
  const size_t probe = size_t(std::clamp(bytes, mib, 1024 * mib));
  // (rank): each rank's estimated write time, gathered by a sum; then the bytes in all, and rank
  // 0's upload time and rate
  const size_t world = size_t(topo_.world_size);
  std::vector<double> per_rank(world + 3, 0.0);
  double &total = per_rank[world], &upload_s = per_rank[world + 1], &upload_rate = per_rank[world + 2];
  run_agreed(*topo_.world, [&] {
    const std::string path = (fs::path(root_) / fmt::format(".probe-write-{}-rank{}", job_id_, topo_.world_rank)).string();
    per_rank[size_t(topo_.world_rank)] = time_probe_write(path, probe) * bytes / double(probe);
    total = bytes;
    if (store_ && topo_.is_root()) {  // one upload stream; the ranks of a machine share its link
      const size_t up = size_t(std::clamp(bytes, mib, 32 * mib));
      const std::string local = path + ".up";
      {
        std::ofstream f(local, std::ios::binary);
        std::vector<char> block(size_t(mib), 'z');
        for (size_t done = 0; done < up; done += block.size()) f.write(block.data(), std::streamsize(block.size()));
      }
      const std::string name = fmt::format("ztrain-probe-upload-{}", job_id_);
      Timer t;
      try {
        store_->put(name, local);
        store_->remove(name);
      } catch (const std::exception& e) {
        ::unlink(local.c_str());
        user_error("{}: [checkpoint] dir = \"{}\": the upload probe failed: {}", spec_.source, k.dir, e.what());
      }
      ::unlink(local.c_str());
      upload_rate = double(up) / std::max(t.seconds(), 1e-6);
      upload_s = double(topo_.local_size) * bytes / upload_rate;
    }
  });
  topo_.world->all_reduce_doubles(per_rank.data(), per_rank.size());
  const double write_s = *std::max_element(per_rank.begin(), per_rank.begin() + long(world));
  estimate_s_ = write_s + upload_s;
  if (!topo_.is_root()) return;
  const std::string upload_part =
      store_ ? fmt::format(" + {:.1f} s uploading ({} rank(s) of a machine sharing one upload stream's {:.0f} MiB/s)",
                           upload_s, topo_.local_size, upload_rate / mib)
             : "";
  const std::string line = fmt::format(
      "checkpoint: a save writes {:.1f} MiB per rank ({:.1f} MiB in all); the write probe in {} ({:.0f} MiB per rank, "
      "every rank at once) says it is durable about {:.2f} s after a signal ({:.2f} s writing{}), and up to twice "
      "that when a background save is still being written",
      bytes / mib, total / mib, root_, double(probe) / mib, estimate_s_, write_s, upload_part);
  if (estimate_s_ <= k.preemption_notice_s) {
    spdlog::info("{}: it fits [checkpoint] preemption_notice_s = {:g}", line, k.preemption_notice_s);
    return;
  }
  std::string would;
  if (store_)
    would += fmt::format("; a [checkpoint] dir on a persistent local or network volume, uploaded after the restart, "
                         "would take {:.1f} s", write_s);
  would += fmt::format("; a faster disk for {} (the probe wrote {:.0f} MiB/s per rank)", root_,
                       bytes / mib / std::max(write_s, 1e-6));
  would += "; fewer bytes per rank: more data-parallel ranks (each writes only the states it owns)";
  would += "; keep_last does not shorten a save, but saving more often ([checkpoint] every_minutes) loses less "
           "when the notice is too short";
  spdlog::warn("{}: it does NOT fit [checkpoint] preemption_notice_s = {:g}{}", line, k.preemption_notice_s, would);
}

bool CheckpointManager::after_step(int64_t done, int64_t start_step, const std::function<TrainState()>& state,
                                   double* stall_ms, bool data_failed) {
  const auto& k = spec_.checkpoint;
  const bool root = topo_.is_root();
  CheckpointWriter& w = *writer_;
  // The ranks agree, in one small all-reduce per step: a signal on any rank, rank 0's clock for
  // every_minutes, and whether every rank finished writing its part of the pending save.
  double agree[6] = {preemption_signal() ? 1.0 : 0.0,
                     root && k.every_minutes > 0 && since_save_.seconds() >= 60 * k.every_minutes ? 1.0 : 0.0,
                     w.local_done() ? 1.0 : 0.0, w.local_failed() ? 1.0 : 0.0, w.commit_failed() ? 1.0 : 0.0,
                     data_failed ? 1.0 : 0.0};
  topo_.world->all_reduce_doubles(agree, 6);
  if (agree[4] > 0) w.throw_commit_failure();  // rank 0's commit failed: every rank stops
  if (w.pending() && agree[2] == topo_.world_size) w.complete(agree[3] > 0);
  w.poll_commit(/*wait=*/false);
  const bool stop = agree[0] > 0 || agree[5] > 0 || (k.exit_after > 0 && done - start_step >= k.exit_after);
  if (stop) {
    Timer t_save;
    w.save(state(), /*wait=*/true);
    if (root) {
      const int sig = preemption_signal();
      const std::string why = agree[5] > 0  ? "a data source failed"
                              : agree[0] == 0 ? "[checkpoint] exit_after reached"
                              : sig       ? fmt::format("stopped by {}", signal_name(sig))
                                          : "stopped by a signal to another rank";
      std::string budget;  // a signal here: the time from it to a durable checkpoint
      if (const double since = seconds_since_preemption_signal(); sig && since >= 0)
        budget = fmt::format(", durable {:.2f} s after the signal{}", since,
                             k.preemption_notice_s > 0
                                 ? fmt::format(" (save estimated at {:.2f} s; preemption_notice_s = {:g})", estimate_s_,
                                               k.preemption_notice_s)
                                 : "");
      std::printf("%s after step %lld: checkpoint %s written in %.2f s%s; %scontinue with --resume auto\n", why.c_str(),
                  (long long)done, w.last_complete().c_str(), t_save.seconds(), budget.c_str(),
                  agree[5] > 0 ? "the error follows; once the source is back, " : "");
      std::fflush(stdout);
    }
    return true;
  }
  if ((k.every_steps > 0 && done % k.every_steps == 0) || agree[1] > 0) {
    Timer stall;
    w.save(state(), /*wait=*/false);
    *stall_ms = stall.ms();
    since_save_.reset();
    if (root)
      spdlog::info("checkpoint: step {} {} ({:.1f} ms{}, {:.1f} MiB of host buffers)", done,
                   k.async ? "saving in the background" : "saved", w.last_stall_ms(), k.async ? " paid by the step" : "",
                   w.host_buffer_mib());
  }
  return false;
}

}  // namespace zt
