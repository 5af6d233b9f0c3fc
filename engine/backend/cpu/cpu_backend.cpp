// The CPU backend: the Backend interface over the float instantiations of the reference ops.
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/ops.h"
#include "engine/core/status.h"

#ifndef ZTRAIN_NO_BLAS
extern "C" void openblas_set_num_threads(int);
#endif

namespace zt {

namespace {

// MemAvailable from /proc/meminfo (bytes); "unlimited" where it cannot be read.
size_t available_host_bytes() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return SIZE_MAX;
  char line[256];
  size_t kib = 0;
  bool found = false;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %zu kB", &kib) == 1) {
      found = true;
      break;
    }
  std::fclose(f);
  return found ? kib * 1024 : SIZE_MAX;
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) {
    if (threads <= 0) threads = omp_get_num_procs();
    omp_set_num_threads(threads);
#ifndef ZTRAIN_NO_BLAS  // tools/gpu_check.sh builds the CPU reference without BLAS
    openblas_set_num_threads(threads);
#endif
    threads_ = threads;
  }
  DeviceKind kind() const override { return DeviceKind::CPU; }
  std::string name() const override { return fmt::format("cpu ({} threads)", threads_); }

  void* alloc(size_t bytes, MemTag tag) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    // Linux overcommits: a too-large malloc succeeds and the OOM killer ends the job later, with
    // no message. Compare with what the machine can still give first.
    const size_t avail = available_host_bytes();
    void* p = rounded && rounded <= avail ? std::aligned_alloc(64, rounded) : nullptr;
    if (rounded && !p)
      throw RuntimeFailure(fmt::format(
          "out of host memory: allocating {:.1f} MiB with {:.1f} MiB already allocated by ztrain and "
          "{:.1f} MiB available; use a smaller model or micro_batch",
          bytes / 1048576.0, stats_.allocated / 1048576.0, avail / 1048576.0));
    if (p) std::memset(p, 0, rounded);
    std::lock_guard lock(mu_);
    sizes_[p] = {rounded, tag};
    stats_.allocated += rounded;
    stats_.peak = std::max(stats_.peak, stats_.allocated);
    stats_.n_allocs++;
    const size_t t = size_t(tag);
    stats_.by_tag[t] += rounded;
    stats_.peak_by_tag[t] = std::max(stats_.peak_by_tag[t], stats_.by_tag[t]);
    return p;
  }
  void free(void* p) override {
    if (!p) return;
    std::lock_guard lock(mu_);
    auto it = sizes_.find(p);
    ZT_CHECK(it != sizes_.end(), "free of a pointer this backend did not allocate");
    stats_.allocated -= it->second.first;
    stats_.by_tag[size_t(it->second.second)] -= it->second.first;
    stats_.n_allocs--;
    sizes_.erase(it);
    std::free(p);
  }
  void copy_to_device(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void copy_to_host(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void fill_zero(void* p, size_t n) override { std::memset(p, 0, n); }
  MemoryStats memory_stats() const override {
    std::lock_guard lock(mu_);
    return stats_;
  }

  void embedding_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B,
                         int T, int C) override {
    cpu::embedding_forward(out, inp, wte, wpe, B, T, C);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B,
                          int T, int C) override {
    cpu::embedding_backward(dwte, dwpe, dout, inp, B, T, C);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C,
                         float eps) override {
    cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C) override {
    cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                      int C, int OC) override {
    cpu::matmul_forward(out, inp, weight, bias, N, C, OC);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int C, int OC) override {
    cpu::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }
  void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                         int NH) override {
    cpu::attention_forward(out, lse, qkv, B, T, C, NH);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* lse,
                          int B, int T, int C, int NH) override {
    cpu::attention_backward(dqkv, dout, qkv, lse, B, T, C, NH);
  }
  void gelu_forward(float* out, const float* inp, int64_t n) override {
    cpu::gelu_forward(out, inp, n);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    cpu::gelu_backward(dinp, inp, dout, n);
  }
  void softmax_crossentropy(float* losses, float* logits, const int32_t* targets, int N, int V,
                            float grad_scale) override {
    cpu::softmax_crossentropy(losses, logits, targets, N, V, grad_scale);
  }
  void logits_row_max(float* out_max, const float* logits, int N, int V) override {
    cpu::logits_row_max(out_max, logits, N, V);
  }
  void logits_row_sumexp(float* out_sum, const float* logits, const float* row_max, int N,
                         int V) override {
    cpu::logits_row_sumexp(out_sum, logits, row_max, N, V);
  }
  void logits_pick_target(float* out, const float* logits, const int32_t* targets, int N, int V,
                          int v0) override {
    cpu::logits_pick_target(out, logits, targets, N, V, v0);
  }
  void crossentropy_grad_from_lse(float* logits, const float* lse, const int32_t* targets, int N,
                                  int V, int v0, float grad_scale) override {
    cpu::crossentropy_grad_from_lse(logits, lse, targets, N, V, v0, grad_scale);
  }
  void add(float* out, const float* a, const float* b, int64_t n) override {
    cpu::add(out, a, b, n);
  }
  void scale(float* x, float s, int64_t n) override { cpu::scale(x, s, n); }
  double sum_squares(const float* x, int64_t n) override { return cpu::sum_squares(x, n); }
  void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, int t) override {
    cpu::adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
  }

 private:
  int threads_ = 1;
  mutable std::mutex mu_;
  std::unordered_map<void*, std::pair<size_t, MemTag>> sizes_;
  MemoryStats stats_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace zt
