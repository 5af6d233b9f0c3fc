// HostStagedComm (see comm_staged.h).
#include "engine/comm/comm_staged.h"

#include <vector>

namespace zt {

namespace {

class HostStagedComm final : public WrappedComm {
 public:
  HostStagedComm(std::unique_ptr<Comm> inner, Backend& be) : WrappedComm(std::move(inner)), be_(be) {}
  std::string name() const override { return inner_->name() + "+host-staged"; }

  Handle all_reduce(float* buf, size_t n, ReduceOp op) override {
    std::vector<float> h(n);
    be_.copy_to_host(h.data(), buf, n * sizeof(float));
    inner_->wait(inner_->all_reduce(h.data(), n, op));
    be_.copy_to_device(buf, h.data(), n * sizeof(float));
    return 0;
  }
  Handle reduce_scatter(const float* send, float* recv, size_t n) override {
    std::vector<float> hs(n * size_t(size())), hr(n);
    be_.copy_to_host(hs.data(), send, hs.size() * sizeof(float));
    inner_->wait(inner_->reduce_scatter(hs.data(), hr.data(), n));
    be_.copy_to_device(recv, hr.data(), n * sizeof(float));
    return 0;
  }
  Handle all_gather(const float* send, float* recv, size_t n) override {
    std::vector<float> hs(n), hr(n * size_t(size()));
    be_.copy_to_host(hs.data(), send, n * sizeof(float));
    inner_->wait(inner_->all_gather(hs.data(), hr.data(), n));
    be_.copy_to_device(recv, hr.data(), hr.size() * sizeof(float));
    return 0;
  }
  Handle broadcast(float* buf, size_t n, int root) override {
    std::vector<float> h(n);
    be_.copy_to_host(h.data(), buf, n * sizeof(float));
    inner_->wait(inner_->broadcast(h.data(), n, root));
    be_.copy_to_device(buf, h.data(), n * sizeof(float));
    return 0;
  }
  void wait(Handle) override {}  // every collective above completed before returning

 private:
  Backend& be_;
};

}  // namespace

std::unique_ptr<Comm> make_host_staged_comm(std::unique_ptr<Comm> host_comm, Backend& device) {
  return std::make_unique<HostStagedComm>(std::move(host_comm), device);
}

}  // namespace zt
