// SelfComm (the single-rank group: collectives reduce to copies) and the shared timeout message.
#include <cstdio>
#include <cstring>

#include "engine/comm/comm.h"

namespace zt {

namespace {
class SelfComm final : public Comm {
 public:
  explicit SelfComm(std::string name) : name_(std::move(name)) {}
  int size() const override { return 1; }
  int rank() const override { return 0; }
  std::string name() const override { return name_ + "(self)"; }
  Handle all_reduce(float*, size_t, ReduceOp) override { return 0; }
  Handle reduce_scatter(const float* send, float* recv, size_t n) override {
    if (send != recv) std::memmove(recv, send, n * sizeof(float));
    return 0;
  }
  Handle all_gather(const float* send, float* recv, size_t n) override {
    if (send != recv) std::memmove(recv, send, n * sizeof(float));
    return 0;
  }
  Handle broadcast(float*, size_t, int) override { return 0; }
  void wait(Handle) override {}
  void all_reduce_doubles(double*, size_t) override {}
  void barrier() override {}

 private:
  std::string name_;
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

std::unique_ptr<Comm> make_self_comm(const std::string& name) { return std::make_unique<SelfComm>(name); }

}  // namespace zt
