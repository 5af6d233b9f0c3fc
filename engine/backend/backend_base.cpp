// What every backend shares: memory tag names and the answer for an op a backend lacks (in
// ztrain_base: the CUDA plugin uses them too).
#include "engine/backend/backend.h"

#include <chrono>

#include "engine/core/status.h"

namespace zt {

const char* mem_tag_name(MemTag tag) {
  switch (tag) {
    case MemTag::Params: return "params";
    case MemTag::Grads: return "grads";
    case MemTag::OptimStates: return "optimizer";
    case MemTag::Activations: return "activations";
    case MemTag::CommBuffers: return "buffers";
    default: return "other";
  }
}

std::unique_ptr<Backend> Backend::make_host_backend(int threads) const { return make_cpu_backend(threads); }

int Backend::timing_point() {
  const int id = timing_next_;
  timing_next_ = (timing_next_ + 1) % kTimingPoints;
  timing_host_ns_[id] = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch()).count();
  return id;
}

double Backend::timing_ms(int from, int to) { return double(timing_host_ns_[to] - timing_host_ns_[from]) / 1e6; }

void Backend::matmul_gelu_backward(void* dpre, float* dweight, float* dbias, const void* dout, const void* inp,
                                   const void* weight, const void* pre, int N, int C, int OC) {
  matmul_backward(dpre, dweight, dbias, dout, inp, weight, N, C, OC);
  gelu_backward(dpre, pre, dpre, int64_t(N) * C);
}

void Backend::unsupported(const char* op) const {
  throw RuntimeFailure(fmt::format("op {} is not supported on backend {}", op, name()));
}

}  // namespace zt
