// Collective communication behind one interface. Implementations: SelfComm (a group of one: no
// communication), MpiComm (host memory; the CPU backend, and a host-staged fallback for device
// memory), NcclComm (device memory, comm_nccl.h). Collectives are asynchronous: each returns a
// handle and the caller overlaps compute until wait(). A collective that does not finish within
// the group's timeout ends the whole job with a message naming the collective and the rank, never
// a hang.
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

namespace zt {

class Backend;

enum class ReduceOp { Sum, Max };

class Comm {
 public:
  using Handle = int64_t;
  virtual ~Comm() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual std::string name() const = 0;  // e.g. "dp(mpi)"

  // buf (n) <- reduce over ranks of buf (n), in place.
  virtual Handle all_reduce(float* buf, size_t n, ReduceOp op) = 0;
  // recv (n) <- chunk `rank` of the sum over ranks of send (size * n).
  virtual Handle reduce_scatter(const float* send, float* recv, size_t n) = 0;
  // recv (size * n) <- concatenation over ranks of send (n). send may alias recv + rank * n.
  virtual Handle all_gather(const float* send, float* recv, size_t n) = 0;
  // buf (n) <- buf of `root`.
  virtual Handle broadcast(float* buf, size_t n, int root) = 0;
  // After wait(h), what the consumer does next sees the collective's result: host communicators
  // block the host until it is done; device communicators make the backend's compute stream wait
  // for it and return (the host reads the result through the backend, which follows that stream).
  virtual void wait(Handle h) = 0;
  // The collectives issued between group_begin() and group_end() may start as one launch (NCCL's
  // ncclGroupStart/End: one kernel for a bucket of several units instead of one each); none of
  // them may be waited for inside the group. Other communicators issue them one by one.
  virtual void group_begin() {}
  virtual void group_end() {}

  // Blocking sum of doubles (loss sums, squared norms): small and exact enough in double.
  virtual void all_reduce_doubles(double* buf, size_t n) = 0;
  virtual void barrier() = 0;

  void all_reduce_sync(float* buf, size_t n, ReduceOp op = ReduceOp::Sum) { wait(all_reduce(buf, n, op)); }

  // Exposed communication (the step breakdown's): a point after the waits issued so far, and the
  // milliseconds the consumer stood still for the collectives of the waits between two points.
  // Host communicators: the host's blocked time in wait(). NCCL: the compute stream's stall, from
  // device events, so read it once the device has passed the second point (after a synchronize).
  // Wrappers report their inner communicator's.
  virtual int64_t wait_point() { return first_wait_ + int64_t(wait_ms_.size()); }
  virtual double exposed_ms(int64_t from, int64_t to);
  // Called for each wait, once its exposed time is known, with the collective's name, when the
  // consumer began waiting and how long (the timeline trace). Wrappers pass it to their inner
  // communicator.
  using WaitObserver = std::function<void(const char* what, std::chrono::steady_clock::time_point start, double ms)>;
  virtual void set_wait_observer(WaitObserver f) { observer_ = std::move(f); }

 protected:
  // A host-blocking wait that began at `start` has ended.
  void waited(const char* what, std::chrono::steady_clock::time_point start) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    set_wait_ms(begin_wait(), ms);
    if (observer_) observer_(what, start, ms);
  }
  // A wait whose exposed time comes later (device events): its index, then its milliseconds.
  int64_t begin_wait();
  void set_wait_ms(int64_t index, double ms);
  WaitObserver observer_;

 private:
  std::deque<double> wait_ms_;  // each wait's exposed ms, from wait number first_wait_ on
  int64_t first_wait_ = 0;
};

// A communicator that passes every call to `inner`: the job's wrappers (the order check, the
// flight recorder, host access, host staging) derive from it and override what they watch or
// change. The breakdown's books and the trace's observer stay the inner communicator's.
class WrappedComm : public Comm {
 public:
  explicit WrappedComm(std::unique_ptr<Comm> inner) : inner_(std::move(inner)) {}
  int size() const override { return inner_->size(); }
  int rank() const override { return inner_->rank(); }
  std::string name() const override { return inner_->name(); }
  Handle all_reduce(float* buf, size_t n, ReduceOp op) override { return inner_->all_reduce(buf, n, op); }
  Handle reduce_scatter(const float* send, float* recv, size_t n) override {
    return inner_->reduce_scatter(send, recv, n);
  }
  Handle all_gather(const float* send, float* recv, size_t n) override { return inner_->all_gather(send, recv, n); }
  Handle broadcast(float* buf, size_t n, int root) override { return inner_->broadcast(buf, n, root); }
  void wait(Handle h) override { inner_->wait(h); }
  void group_begin() override { inner_->group_begin(); }
  void group_end() override { inner_->group_end(); }
  void all_reduce_doubles(double* buf, size_t n) override { inner_->all_reduce_doubles(buf, n); }
  void barrier() override { inner_->barrier(); }
  int64_t wait_point() override { return inner_->wait_point(); }
  double exposed_ms(int64_t from, int64_t to) override { return inner_->exposed_ms(from, to); }
  void set_wait_observer(WaitObserver f) override { inner_->set_wait_observer(std::move(f)); }

 protected:
  std::unique_ptr<Comm> inner_;
};

// The message every communicator prints when a collective times out (then it aborts the job),
// followed by the flight recorder's diagnosis when one is installed.
void print_collective_timeout(int world_rank, const char* what, size_t n, const std::string& group,
                              double timeout_s);
// The flight recorder's hooks (engine/comm/flight_recorder.h), here so that every communicator
// reaches them: `poll` is called now and then by a rank that waits in a collective (it answers
// the other ranks' questions), `diagnose` by print_collective_timeout with the group's name.
struct CommHooks {
  void (*poll)() = nullptr;
  std::string (*diagnose)(const std::string& group) = nullptr;
};
void set_comm_hooks(CommHooks hooks);
void comm_idle_poll();

// A group of one rank: every collective is the identity (or a copy).
std::unique_ptr<Comm> make_self_comm(const std::string& name);
// A group of one whose copies (reduce-scatter and all-gather into another buffer) run with the
// backend's copy: the backend's memory may be on a device.
std::unique_ptr<Comm> make_device_self_comm(const std::string& name, Backend& device);
// `inner` with Backend::begin_host_access held during each call (the MPI communicator on the CPU
// backend: the one sanctioned host access to its memory; comm_host_access.cpp).
std::unique_ptr<Comm> make_host_access_comm(std::unique_ptr<Comm> inner, Backend& device);

}  // namespace zt
