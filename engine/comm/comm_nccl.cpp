// NcclComm (see comm_nccl.h). Plain C++ over the CUDA runtime and NCCL C APIs.
#include "engine/comm/comm_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <unordered_map>
#include <vector>

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
    if (faults().hold_comm_init_rank == world_rank_)
      std::this_thread::sleep_for(std::chrono::seconds(faults().hold_comm_init_s));
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
  }
  ~NcclComm() override {
    for (auto& [h, ev] : pending_)
      if (ev.event) cudaEventDestroy(ev.event);
    cudaFree(scratch_);
    cudaStreamDestroy(stream_);
    if (comm_) ncclCommDestroy(comm_);
  }
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  std::string name() const override { return name_ + "(nccl)"; }

  void group_begin() override {
    if (group_depth_ == 0) after_producer();  // once for the group's collectives
    ++group_depth_;
    nccl_check(ncclGroupStart(), "group start");
  }
  void group_end() override {
    nccl_check(ncclGroupEnd(), "group end");  // the group's collectives are launched here
    if (--group_depth_ > 0) return;
    // their completion events, recorded after the launch (one recorded inside the group would
    // complete before the collectives run)
    for (Handle h : grouped_) pending_[h].event = record();
    grouped_.clear();
  }
  Handle all_reduce(float* buf, size_t n, ReduceOp op) override {
    after_producer();
    nccl_check(ncclAllReduce(buf, buf, n, ncclFloat, op == ReduceOp::Sum ? ncclSum : ncclMax, comm_, stream_),
               "all_reduce");
    return track("all_reduce", n);
  }
  Handle reduce_scatter(const float* send, float* recv, size_t n) override {
    after_producer();
    nccl_check(ncclReduceScatter(send, recv, n, ncclFloat, ncclSum, comm_, stream_), "reduce_scatter");
    return track("reduce_scatter", n);
  }
  Handle all_gather(const float* send, float* recv, size_t n) override {
    after_producer();
    nccl_check(ncclAllGather(send, recv, n, ncclFloat, comm_, stream_), "all_gather");
    return track("all_gather", n);
  }
  Handle broadcast(float* buf, size_t n, int root) override {
    after_producer();
    nccl_check(ncclBroadcast(buf, buf, n, ncclFloat, root, comm_, stream_), "broadcast");
    return track("broadcast", n);
  }
  void wait(Handle h) override {
    auto it = pending_.find(h);
    ZT_CHECK(it != pending_.end(), "wait on unknown handle {}", h);
    ZT_CHECK(it->second.event, "wait on {} inside its group (before group_end)", it->second.what);
    const Pending p = it->second;
    pending_.erase(it);
    poll(p.event, p.what, p.n);
    cudaEventDestroy(p.event);
  }
  void all_reduce_doubles(double* buf, size_t n) override {
    ZT_CHECK(n <= 64, "all_reduce_doubles of {} values", n);
    cuda_check(cudaMemcpyAsync(scratch_, buf, n * sizeof(double), cudaMemcpyHostToDevice, stream_), "copy");
    nccl_check(ncclAllReduce(scratch_, scratch_, n, ncclDouble, ncclSum, comm_, stream_), "all_reduce(double)");
    cuda_check(cudaMemcpyAsync(buf, scratch_, n * sizeof(double), cudaMemcpyDeviceToHost, stream_), "copy");
    wait(track("all_reduce(double)", n));
  }
  void barrier() override { all_reduce_doubles(dummy_, 1); }

 private:
  struct Pending {
    cudaEvent_t event;
    const char* what;
    size_t n;
  };
  void nccl_check(ncclResult_t r, const char* what) const {
    if (r != ncclSuccess)
      throw RuntimeFailure(fmt::format("rank {}: NCCL {} on group {} failed: {}", world_rank_, what,
                                       name(), ncclGetErrorString(r)));
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
  cudaEvent_t record() {
    cudaEvent_t ev;
    cuda_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "event");
    cuda_check(cudaEventRecord(ev, stream_), "event record");
    return ev;
  }
  Handle track(const char* what, size_t n) {
    const Handle h = next_++;
    pending_[h] = {group_depth_ > 0 ? nullptr : record(), what, n};
    if (group_depth_ > 0) grouped_.push_back(h);
    return h;
  }
  void poll(cudaEvent_t ev, const char* what, size_t n) {
    const auto start = std::chrono::steady_clock::now();
    for (int spins = 0;; ++spins) {
      const cudaError_t q = cudaEventQuery(ev);
      if (q == cudaSuccess) {
        waited(what, start);
        return;
      }
      if (q != cudaErrorNotReady) cuda_check(q, what);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) nccl_check(async, what);
      if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout_s_) {
        print_collective_timeout(world_rank_, what, n, name(), timeout_s_);
        ncclCommAbort(comm_);
        comm_ = nullptr;
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
  }

  std::string name_;
  double timeout_s_;
  cudaStream_t producer_ = nullptr, stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  double* scratch_ = nullptr;
  double dummy_[1] = {0};
  int size_ = 1, rank_ = 0, world_rank_ = 0;
  Handle next_ = 1;
  std::unordered_map<Handle, Pending> pending_;
  int group_depth_ = 0;
  std::vector<Handle> grouped_;  // issued in the open group: their events come at group_end
};

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(MPI_Comm group, const std::string& name, double timeout_s,
                                     void* producer_stream) {
  return std::make_unique<NcclComm>(group, name, timeout_s, producer_stream);
}

}  // namespace zt
