// SelfComm (the single-rank group: collectives reduce to copies, with the backend's copy when the
// buffers are the backend's) and the shared timeout message.
#include <cstdio>
#include <cstring>

#include "engine/backend/backend.h"
#include "engine/comm/comm.h"

namespace zt {

namespace {
class SelfComm final : public Comm {
 public:
  SelfComm(std::string name, Backend* be) : name_(std::move(name)), be_(be) {}
  int size() const override { return 1; }
  int rank() const override { return 0; }
  std::string name() const override { return name_ + (be_ ? "(self, device)" : "(self)"); }
  Handle all_reduce(float*, size_t, ReduceOp) override { return 0; }
  Handle reduce_scatter(const float* send, float* recv, size_t n) override { return copy(recv, send, n); }
  Handle all_gather(const float* send, float* recv, size_t n) override { return copy(recv, send, n); }
  Handle broadcast(float*, size_t, int) override { return 0; }
  void wait(Handle) override {}
  void all_reduce_doubles(double*, size_t) override {}
  void barrier() override {}

 private:
  Handle copy(float* dst, const float* src, size_t n) {
    if (src == dst) return 0;
    if (be_) be_->copy_device(dst, src, n * sizeof(float));  // device pointers: never a host memmove
    else std::memmove(dst, src, n * sizeof(float));
    return 0;
  }
  std::string name_;
  Backend* be_;
};
}  // namespace

void print_collective_timeout(int world_rank, const char* what, size_t n, const std::string& group,
                              double timeout_s) {
  std::fprintf(stderr,
               "ztrain: failure: rank %d: collective %s of %zu elements on group %s did not complete "
               "within %.0f s ([comm] timeout_s); another rank has probably failed. Aborting the job.\n",
               world_rank, what, n, group.c_str(), timeout_s);
  std::fflush(stderr);
}

std::unique_ptr<Comm> make_self_comm(const std::string& name) { return std::make_unique<SelfComm>(name, nullptr); }

std::unique_ptr<Comm> make_device_self_comm(const std::string& name, Backend& device) {
  return std::make_unique<SelfComm>(name, &device);
}

}  // namespace zt
