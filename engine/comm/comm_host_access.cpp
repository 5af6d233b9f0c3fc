// The sanctioned host access of the MPI communicator to the CPU backend's memory, which is
// guarded (inaccessible outside its ops) when ZTRAIN_CPU_GUARD_MEMORY=1 (see comm.h).
#include <memory>

#include "engine/backend/backend.h"
#include "engine/comm/comm.h"

namespace zt {

namespace {

// Every call of the wrapped communicator may touch the backend's memory (MPI progresses pending
// requests inside any call), so each one holds host access.
class HostAccessComm final : public WrappedComm {
 public:
  HostAccessComm(std::unique_ptr<Comm> inner, Backend& be) : WrappedComm(std::move(inner)), be_(be) {}
  Handle all_reduce(float* buf, size_t n, ReduceOp op) override {
    Backend::HostAccess a(be_);
    return inner_->all_reduce(buf, n, op);
  }
  Handle reduce_scatter(const float* send, float* recv, size_t n) override {
    Backend::HostAccess a(be_);
    return inner_->reduce_scatter(send, recv, n);
  }
  Handle all_gather(const float* send, float* recv, size_t n) override {
    Backend::HostAccess a(be_);
    return inner_->all_gather(send, recv, n);
  }
  Handle broadcast(float* buf, size_t n, int root) override {
    Backend::HostAccess a(be_);
    return inner_->broadcast(buf, n, root);
  }
  void wait(Handle h) override {
    Backend::HostAccess a(be_);
    inner_->wait(h);
  }
  void all_reduce_doubles(double* buf, size_t n) override {
    Backend::HostAccess a(be_);
    inner_->all_reduce_doubles(buf, n);
  }
  void barrier() override {
    Backend::HostAccess a(be_);
    inner_->barrier();
  }

 private:
  Backend& be_;
};

}  // namespace

std::unique_ptr<Comm> make_host_access_comm(std::unique_ptr<Comm> inner, Backend& device) {
  return std::make_unique<HostAccessComm>(std::move(inner), device);
}

}  // namespace zt
