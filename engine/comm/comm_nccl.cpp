// NcclComm (see comm_nccl.h). Plain C++ over the CUDA runtime and NCCL C APIs.
#include "engine/comm/comm_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/comm/nccl_launch_order.h"
#include "engine/core/faults.h"
#include "engine/core/status.h"

namespace zt {

namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeFailure(fmt::format("CUDA {}: {}", what, cudaGetErrorString(e)));
}

class NcclComm final : public Comm {
 public:
  NcclComm(MPI_Comm group, std::string name, double timeout_s, void* producer)
      : name_(std::move(name)), timeout_s_(timeout_s), producer_(static_cast<cudaStream_t>(producer)) {
    MPI_Comm_size(group, &size_);
    MPI_Comm_rank(group, &rank_);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    // before any NCCL call (the unique id's bootstrap reads NCCL's environment and config files)
    const nccl_order::Choice& order = nccl_order::establish();
    static bool said = false;
    if (!order.said.empty() && world_rank_ == 0 && !said) std::fprintf(stderr, "ztrain: %s\n", order.said.c_str());
    said = true;
    // A rank that stalls before its init (a hung driver call, a slow node) must not hang the
    // others: the id's exchange and the non-blocking init both run under the job's timeout, and
    // past it the communicator is aborted and the job ends naming the init.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    ncclUniqueId id;
    if (rank_ == 0) nccl_check(ncclGetUniqueId(&id), "get unique id");
    MPI_Request req;
    MPI_Ibcast(&id, sizeof id, MPI_BYTE, 0, group, &req);
    for (int done = 0;;) {
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (done) break;
      if (std::chrono::steady_clock::now() > deadline) init_timed_out();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (faults().hold_comm_init_rank == world_rank_) {
      std::fprintf(stderr, "ztrain: test hook: rank %d waits %d s before its communicator init on group %s\n",
                   world_rank_, faults().hold_comm_init_s, name_.c_str());
      std::fflush(stderr);
      std::this_thread::sleep_for(std::chrono::seconds(faults().hold_comm_init_s));
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (r != ncclInProgress) nccl_check(r, "init");
    for (;;) {
      ncclResult_t state = ncclInProgress;
      nccl_check(ncclCommGetAsyncError(comm_, &state), "init");
      if (state == ncclSuccess) break;
      if (state != ncclInProgress) nccl_check(state, "init");
      if (std::chrono::steady_clock::now() > deadline) init_timed_out();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream create");
    cuda_check(cudaMalloc(&scratch_, 64 * sizeof(double)), "malloc");
    cuda_check(cudaMallocHost(reinterpret_cast<void**>(&host_doubles_), 64 * sizeof(double)), "pinned malloc");
    // Device time to host time, for the trace: an event the stream has passed, and when.
    cuda_check(cudaEventCreate(&anchor_), "event");
    cuda_check(cudaEventRecord(anchor_, stream_), "event record");
    cuda_check(cudaEventSynchronize(anchor_), "event sync");
    anchor_host_ = std::chrono::steady_clock::now();
    cuda_check(cudaGetDevice(&device_), "get device");  // the watchdog's thread uses this rank's GPU too
    watchdog_ = std::thread([this] { watch(); });
  }
  ~NcclComm() override {
    observer_ = nullptr;  // the trainer's observer may be gone
    cudaDeviceSynchronize();  // under the watchdog: a peer that never comes still ends the job
    stop_ = true;
    watchdog_.join();
    harvest_done();
    pending_.clear();
    watched_.clear();
    inflight_.clear();
    cudaEventDestroy(anchor_);
    cudaFree(scratch_);
    cudaFreeHost(host_doubles_);
    cudaStreamDestroy(stream_);
    if (comm_) ncclCommDestroy(comm_);
  }
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  std::string name() const override { return name_ + "(nccl)"; }

  void group_begin() override {
    if (group_depth_ == 0) {  // once for the group's collectives (each still records its start)
      after_producer();
      nccl_order::before_launch(stream_, this);
    }
    ++group_depth_;
    nccl_check(ncclGroupStart(), "group start");
  }
  void group_end() override {
    issued(ncclGroupEnd(), "group end");  // the group's collectives are launched here
    if (--group_depth_ > 0) return;
    nccl_order::after_launch(stream_, this);
    // their completion events, recorded after the launch (one recorded inside the group would
    // complete before the collectives run)
    const Event done = record();
    for (Handle h : grouped_) {
      pending_[h].done = done;
      watch_from_issue(pending_[h]);
    }
    grouped_.clear();
  }
  Handle all_reduce(float* buf, size_t n, ReduceOp op) override {
    begin();
    issued(ncclAllReduce(buf, buf, n, ncclFloat, op == ReduceOp::Sum ? ncclSum : ncclMax, comm_, stream_),
           "all_reduce");
    return track("all_reduce", n);
  }
  Handle reduce_scatter(const float* send, float* recv, size_t n) override {
    begin();
    issued(ncclReduceScatter(send, recv, n, ncclFloat, ncclSum, comm_, stream_), "reduce_scatter");
    return track("reduce_scatter", n);
  }
  Handle all_gather(const float* send, float* recv, size_t n) override {
    begin();
    issued(ncclAllGather(send, recv, n, ncclFloat, comm_, stream_), "all_gather");
    return track("all_gather", n);
  }
  Handle broadcast(float* buf, size_t n, int root) override {
    begin();
    issued(ncclBroadcast(buf, buf, n, ncclFloat, root, comm_, stream_), "broadcast");
    return track("broadcast", n);
  }
  // The consumer (the producer stream: everything after this call) waits for the collective on
  // the device; the host goes on enqueueing. The watchdog thread enforces the timeout, and the
  // stall's length comes from device events once the stream has passed it.
  void wait(Handle h) override {
    const Pending p = take(h);
    const Event reached = timing_event();
    cuda_check(cudaEventRecord(reached.get(), producer_), "event record");
    if (!faults().skip_comm_stream_wait)
      cuda_check(cudaStreamWaitEvent(producer_, p.done.get(), 0), "stream wait");
    const int64_t index = begin_wait();
    watched_.push_back({p.done, reached, p.what, index});
    harvest_done();
  }
  double exposed_ms(int64_t from, int64_t to) override {
    harvest_done();
    return Comm::exposed_ms(from, to);
  }
  void all_reduce_doubles(double* buf, size_t n) override {
    ZT_CHECK(n <= 64, "all_reduce_doubles of {} values", n);
    begin(/*after_producer_work=*/false);
    // Through pinned memory only: a copy to or from pageable memory may wait for the stream on the
    // host (CUDA's API synchronization behavior) before the watchdog knows the collective, and a
    // stopped peer then hung the job with no timeout. The host waits in host_wait, watched.
    std::memcpy(host_doubles_, buf, n * sizeof(double));
    cuda_check(cudaMemcpyAsync(scratch_, host_doubles_, n * sizeof(double), cudaMemcpyHostToDevice, stream_), "copy");
    issued(ncclAllReduce(scratch_, scratch_, n, ncclDouble, ncclSum, comm_, stream_), "all_reduce(double)");
    cuda_check(cudaMemcpyAsync(host_doubles_, scratch_, n * sizeof(double), cudaMemcpyDeviceToHost, stream_), "copy");
    host_wait(take(track("all_reduce(double)", n)));  // the host reads the result: it blocks, watched
    std::memcpy(buf, host_doubles_, n * sizeof(double));
  }
  void barrier() override { all_reduce_doubles(dummy_, 1); }

 private:
  // Events are shared by the handle, the watchdog's list and the wait's record; the last owner
  // destroys it (the watchdog's thread too: it has this rank's device current).
  using Event = std::shared_ptr<CUevent_st>;
  struct Pending {
    Event started;  // the comm stream reached the collective (the timeout counts from there)
    Event done;     // its end (null inside an open group: recorded at group_end)
    const char* what;
    size_t n;
  };
  struct InFlight {  // issued, not seen done: the watchdog's
    Event started, done;
    const char* what;
    size_t n;
    std::chrono::steady_clock::time_point began;  // when the watchdog first saw it started
  };
  struct Watched {  // waited, exposure not yet harvested: the host thread's
    Event done, reached;  // the collective's end; the consumer reaching its wait
    const char* what;
    int64_t index;  // its wait's number (Comm::begin_wait)
  };

  void nccl_check(ncclResult_t r, const char* what) const {
    if (r != ncclSuccess)
      throw RuntimeFailure(fmt::format("NCCL {} on group {} failed: {}", what, name(), ncclGetErrorString(r)));
  }
  // A launch on a non-blocking communicator may answer ncclInProgress (NCCL's documentation):
  // the call is complete once the communicator's state leaves it.
  void issued(ncclResult_t r, const char* what) {
    while (r == ncclInProgress) {
      std::this_thread::yield();
      if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) break;
    }
    nccl_check(r, what);
  }
  [[noreturn]] void init_timed_out() {
    std::fprintf(stderr,
                 "ztrain: failure: rank %d: NCCL communicator init on group %s did not complete within %.0f s "
                 "([comm] timeout_s); another rank has not reached its init (stalled or failed). Aborting the job.\n",
                 world_rank_, name().c_str(), timeout_s_);
    std::fflush(stderr);
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();  // MPI_Abort does not return
  }
  // The collective must see the producer stream's writes: the comm stream waits on an event.
  void after_producer() {
    if (group_depth_ > 0) return;  // group_begin waited already
    cudaEvent_t ev;
    cuda_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "event");
    cuda_check(cudaEventRecord(ev, producer_), "event record");
    cuda_check(cudaStreamWaitEvent(stream_, ev, 0), "stream wait");
    cudaEventDestroy(ev);
  }
  Event timing_event() {
    cudaEvent_t ev;
    cuda_check(cudaEventCreate(&ev), "event");  // with timing: the exposed time is measured with it
    return Event(ev, [](cudaEvent_t e) { cudaEventDestroy(e); });
  }
  Event record() {
    Event ev = timing_event();
    cuda_check(cudaEventRecord(ev.get(), stream_), "event record");
    return ev;
  }
  Pending take(Handle h) {
    auto it = pending_.find(h);
    ZT_CHECK(it != pending_.end(), "wait on unknown handle {}", h);
    ZT_CHECK(it->second.done, "wait on {} inside its group (before group_end)", it->second.what);
    const Pending p = it->second;
    pending_.erase(it);
    return p;
  }
  // Before each collective: the comm stream waits for the producer's work, then marks its start.
  void begin(bool after_producer_work = true) {
    if (after_producer_work) after_producer();
    if (group_depth_ == 0) nccl_order::before_launch(stream_, this);
    started_ = record();
  }
  Handle track(const char* what, size_t n) {
    const Handle h = next_++;
    Pending& p = pending_[h];
    p = {std::move(started_), group_depth_ > 0 ? nullptr : record(), what, n};
    if (group_depth_ > 0) grouped_.push_back(h);
    else nccl_order::after_launch(stream_, this), watch_from_issue(p);
    return h;
  }
  // Every collective is watched from its launch, waited or not: a device drain (the allocator's,
  // a destructor's) behind one whose peer never comes still ends the job.
  void watch_from_issue(const Pending& p) {
    std::lock_guard lock(mu_);
    inflight_.push_back({p.started, p.done, p.what, p.n, {}});
  }
  [[noreturn]] void abort_job(const std::string& message) {
    if (aborting_.exchange(true))  // the other thread is ending the job already
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    std::fprintf(stderr, "%s", message.c_str());
    std::fflush(stderr);
    ncclCommAbort(comm_);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();  // MPI_Abort does not return
  }
  [[noreturn]] void collective_timed_out(const char* what, size_t n) {
    if (aborting_.exchange(true))
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    print_collective_timeout(world_rank_, what, n, name(), timeout_s_);
    ncclCommAbort(comm_);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
  }
  // Whether a collective has run on this rank's comm stream for longer than the timeout. It is
  // timed from when the stream reached it (first seen by the caller: `began`), not from its
  // issue: the host may run far ahead of its own device.
  bool expired(cudaEvent_t started, std::chrono::steady_clock::time_point& began) const {
    const auto now = std::chrono::steady_clock::now();
    if (began == std::chrono::steady_clock::time_point{}) {
      if (cudaEventQuery(started) == cudaSuccess) began = now;
      return false;
    }
    return std::chrono::duration<double>(now - began).count() > timeout_s_;
  }
  // The host waits for the collective (its result is read by the host): polled, with the timeout.
  // Its exposed time is the collective's own time on the comm stream when the host got there first:
  // the host's wait for its device's earlier work (it runs ahead) is not communication.
  void host_wait(const Pending& p) {
    const auto start = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point began{};
    for (int spins = 0;; ++spins) {
      const cudaError_t q = cudaEventQuery(p.done.get());
      if (q == cudaSuccess) {
        const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        float device_ms = 0;
        if (cudaEventElapsedTime(&device_ms, p.started.get(), p.done.get()) != cudaSuccess) device_ms = float(host_ms);
        const double ms = std::min(host_ms, double(device_ms));
        set_wait_ms(begin_wait(), ms);
        if (observer_) observer_(p.what, start, ms);
        return;
      }
      if (q != cudaErrorNotReady) cuda_check(q, p.what);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) nccl_check(async, p.what);
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (spins > 1000 && spins % 64 == 0) comm_idle_poll();  // the flight recorder's questions
      if (expired(p.started.get(), began)) collective_timed_out(p.what, p.n);
    }
  }
  // The watchdog: a collective that has run longer than the timeout, or a failed communicator,
  // ends the job (NCCL kernels of a dead peer never finish; the host may be anywhere, or blocked
  // in a device drain).
  void watch() {
    cudaSetDevice(device_);
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      if (aborting_) return;
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      std::lock_guard lock(mu_);
      if (async != ncclSuccess && async != ncclInProgress)
        abort_job(fmt::format("ztrain: failure: rank {}: NCCL {} on group {} failed: {}. Aborting the job.\n",
                              world_rank_, inflight_.empty() ? "collective" : inflight_.front().what, name(),
                              ncclGetErrorString(async)));
      while (!inflight_.empty() && cudaEventQuery(inflight_.front().done.get()) == cudaSuccess) inflight_.pop_front();
      for (InFlight& f : inflight_)
        if (cudaEventQuery(f.done.get()) == cudaErrorNotReady && expired(f.started.get(), f.began))
          collective_timed_out(f.what, f.n);
    }
  }
  // The waits the compute stream has passed: the stall is from reaching the wait to the
  // collective's end (none when it ended before: fully overlapped). Host thread only.
  void harvest_done() {
    while (!watched_.empty()) {
      const Watched& w = watched_.front();
      if (cudaEventQuery(w.done.get()) != cudaSuccess || cudaEventQuery(w.reached.get()) != cudaSuccess) break;
      float ms = 0, at = 0;
      if (cudaEventElapsedTime(&ms, w.reached.get(), w.done.get()) != cudaSuccess) ms = 0;
      set_wait_ms(w.index, std::max(0.0f, ms));
      if (observer_ && cudaEventElapsedTime(&at, anchor_, w.reached.get()) == cudaSuccess)
        observer_(w.what, anchor_host_ + std::chrono::microseconds(int64_t(double(at) * 1e3)), std::max(0.0f, ms));
      watched_.pop_front();
    }
  }

  std::string name_;
  double timeout_s_;
  cudaStream_t producer_ = nullptr, stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  double* scratch_ = nullptr;
  double* host_doubles_ = nullptr;  // pinned: all_reduce_doubles' host side
  double dummy_[1] = {0};
  int size_ = 1, rank_ = 0, world_rank_ = 0, device_ = 0;
  Handle next_ = 1;
  std::unordered_map<Handle, Pending> pending_;
  Event started_;  // begin()'s, for the next track()
  int group_depth_ = 0;
  std::vector<Handle> grouped_;  // issued in the open group: their events come at group_end
  std::deque<Watched> watched_;  // waited, not yet harvested, in wait order
  std::mutex mu_;                // guards inflight_
  std::deque<InFlight> inflight_;  // issued, in issue order (one stream: they end in that order)
  cudaEvent_t anchor_ = nullptr;
  std::chrono::steady_clock::time_point anchor_host_;
  std::atomic<bool> stop_{false}, aborting_{false};
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(MPI_Comm group, const std::string& name, double timeout_s,
                                     void* producer_stream) {
  return std::make_unique<NcclComm>(group, name, timeout_s, producer_stream);
}

}  // namespace zt
