// The CPU backend: the Backend interface over the float instantiations of the reference ops.
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <mutex>
#include <vector>
#include <unordered_map>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/ops.h"
#include "engine/backend/fp8_recipe.h"
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

// An fp32 view of a compute-precision tensor for the reference ops: the tensor itself when the
// compute type is fp32 (no copy, the fp32 path is unchanged), else a converted copy. Out writes
// its copy back, rounded, when it goes out of scope; `load` for outputs that are also read
// (accumulated into, or transformed in place).
class In {
 public:
  In(const void* p, int64_t n, DType t) {
    if (!p || t == DType::F32) {
      p_ = static_cast<const float*>(p);
      return;
    }
    buf_.resize(size_t(n));
    convert_host(buf_.data(), DType::F32, p, t, n);
    p_ = buf_.data();
  }
  const float* get() const { return p_; }

 private:
  std::vector<float> buf_;
  const float* p_ = nullptr;
};

class Out {
 public:
  Out(void* p, int64_t n, DType t, bool load) : dst_(p), n_(n), t_(t) {
    if (!p || t == DType::F32) {
      p_ = static_cast<float*>(p);
      return;
    }
    buf_.assign(size_t(n), 0.0f);
    if (load) convert_host(buf_.data(), DType::F32, p, t, n);
    p_ = buf_.data();
  }
  ~Out() {
    if (!buf_.empty()) convert_host(dst_, t_, buf_.data(), DType::F32, n_);
  }
  Out(const Out&) = delete;
  Out& operator=(const Out&) = delete;
  float* get() { return p_; }
  void zero() {  // a converted buffer starts zeroed; the fp32 one is the destination itself
    if (p_ && buf_.empty()) std::fill(p_, p_ + n_, 0.0f);
  }
  void discard() { buf_.clear(); }

 private:
  void* dst_;
  int64_t n_;
  DType t_;
  std::vector<float> buf_;
  float* p_ = nullptr;
};

// Rows of the token embedding that `inp` can reach (its largest id + 1): the embedding ops do not
// know V, and only those rows need converting.
int64_t embedding_rows_hint(const int32_t* inp, int64_t n) {
  int32_t mx = -1;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, inp[i]);
  return int64_t(mx) + 1;
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
    const char* g = std::getenv("ZTRAIN_CPU_GUARD_MEMORY");
    guard_ = g && std::string(g) == "1";
  }
  DeviceKind kind() const override { return DeviceKind::CPU; }
  bool host_accessible() const override { return !guard_; }
  void begin_host_access() override {
    if (!guard_) return;
    std::lock_guard lock(mu_);
    if (access_depth_++ == 0) protect_all(PROT_READ | PROT_WRITE);
  }
  void end_host_access() override {
    if (!guard_) return;
    std::lock_guard lock(mu_);
    if (--access_depth_ == 0) protect_all(PROT_NONE);
  }
  DType dt() const { return compute_dtype(); }
  std::string name() const override { return fmt::format("cpu ({} threads)", threads_); }
  std::string supports(const OpRequest& r) const override { return supports_every_op(r); }  // the reference: all

  // Both memory kinds are host memory here; pinned host bytes are counted apart (as on a GPU).
  void set_memory_limit(size_t bytes) override { limit_ = bytes; }
  void set_pinned_limit(size_t bytes) override { pinned_limit_ = bytes; }
  void* alloc(size_t bytes, MemTag tag, MemKind kind) override {
    {  // each kind of memory within its limit (0: none)
      std::lock_guard lock(mu_);
      const bool pinned = kind == MemKind::PinnedHost;
      const size_t held = pinned ? stats_.pinned_host : stats_.allocated, limit = pinned ? pinned_limit_ : limit_;
      if (limit && held + bytes > limit)
        throw RuntimeFailure(fmt::format(
            "out of {} memory: allocating {:.3f} MiB with {:.3f} MiB {} would pass the limit of {:.3f} MiB ({})",
            pinned ? "pinned host" : "device", bytes / 1048576.0, held / 1048576.0, pinned ? "pinned" : "allocated",
            limit / 1048576.0, pinned ? "[offload] pinned_limit" : "[run] device_memory_limit"));
    }
    if (guard_) return guarded_alloc(bytes, tag, kind);
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
    return record(p, rounded, tag, kind);
  }
  void free(void* p) override {
    if (!p) return;
    std::lock_guard lock(mu_);
    auto it = sizes_.find(p);
    ZT_CHECK(it != sizes_.end(), "free of a pointer this backend did not allocate");
    const auto [size, tag, kind] = it->second;
    if (kind == MemKind::PinnedHost) {
      stats_.pinned_host -= size;
    } else {
      stats_.allocated -= size;
      stats_.by_tag[size_t(tag)] -= size;
      stats_.n_allocs--;
    }
    sizes_.erase(it);
    if (guard_) ::munmap(p, size);
    else std::free(p);
  }
  void copy_to_device(void* dst, const void* src, size_t n) override {
    const Access access(*this);
    std::memcpy(dst, src, n);
  }
  void copy_to_host(void* dst, const void* src, size_t n) override {
    const Access access(*this);
    std::memcpy(dst, src, n);
  }
  void copy_device(void* dst, const void* src, size_t n) override {
    const Access access(*this);
    std::memmove(dst, src, n);
  }
  void fill_zero(void* p, size_t n) override {
    const Access access(*this);
    std::memset(p, 0, n);
  }
  size_t memory_available() const override {
    FILE* f = std::fopen("/proc/meminfo", "r");
    if (!f) return SIZE_MAX;
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f)) found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    std::fclose(f);
    const size_t host = found ? size_t(kib) * 1024 : SIZE_MAX;
    if (!limit_) return host;
    std::lock_guard lock(mu_);
    return std::min(host, limit_ > stats_.allocated ? limit_ - stats_.allocated : 0);
  }
  MemoryStats memory_stats() const override {
    std::lock_guard lock(mu_);
    MemoryStats s = stats_;
    s.reserved = s.allocated;  // malloc'ed per allocation, nothing cached
    return s;
  }

  void convert(void* dst, DType dt, const void* src, DType st, int64_t n) override {
    const Access access(*this);
    convert_host(dst, dt, src, st, n);
  }

  void embedding_forward(void* out, const int32_t* inp, const void* wte, const void* wpe, int B,
                         int T, int C, const int32_t* pos) override {
    const Access access(*this);
    const int64_t V = dt() == DType::F32 ? 0 : embedding_rows_hint(inp, int64_t(B) * T);  // fp32: no copy
    Out o(out, int64_t(B) * T * C, dt(), false);
    cpu::embedding_forward(o.get(), inp, In(wte, V * C, dt()).get(), In(wpe, int64_t(T) * C, dt()).get(),
                           B, T, C, pos);
  }
  void embedding_backward(float* dwte, float* dwpe, const void* dout, const int32_t* inp, int B,
                          int T, int C, const int32_t* pos) override {
    const Access access(*this);
    cpu::embedding_backward(dwte, dwpe, In(dout, int64_t(B) * T * C, dt()).get(), inp, B, T, C, pos);
  }
  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                         const void* bias, int N, int C, float eps) override {
    const Access access(*this);
    Out o(out, int64_t(N) * C, dt(), false);
    cpu::layernorm_forward(o.get(), mean, rstd, In(inp, int64_t(N) * C, dt()).get(), In(weight, C, dt()).get(),
                           In(bias, C, dt()).get(), N, C, eps);
  }
  void residual_layernorm_forward(void* res, void* out, float* mean, float* rstd, const void* a,
                                  const void* b, const void* weight, const void* bias, int N, int C,
                                  float eps) override {
    const Access access(*this);
    const int64_t n = int64_t(N) * C;
    {
      Out r(res, n, dt(), false);
      cpu::add(r.get(), In(a, n, dt()).get(), In(b, n, dt()).get(), n);
    }  // res is rounded to the compute type before the norm reads it, as on the GPU
    layernorm_forward(out, mean, rstd, res, weight, bias, N, C, eps);
  }
  void layernorm_backward(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                          const void* weight, const float* mean, const float* rstd, int N,
                          int C) override {
    const Access access(*this);
    const int64_t n = int64_t(N) * C;
    Out d(dinp, n, dt(), true);
    cpu::layernorm_backward(d.get(), dweight, dbias, In(dout, n, dt()).get(), In(inp, n, dt()).get(),
                            In(weight, C, dt()).get(), mean, rstd, N, C);
  }
  void matmul_forward(void* out, const void* inp, const void* weight, const void* bias, int N, int C,
                      int OC) override {
    const Access access(*this);
    Out o(out, int64_t(N) * OC, dt(), false);
    cpu::matmul_forward(o.get(), In(inp, int64_t(N) * C, dt()).get(), In(weight, int64_t(OC) * C, dt()).get(),
                        In(bias, OC, dt()).get(), N, C, OC);
  }
  void matmul_gelu_forward(void* out, void* pre, const void* inp, const void* weight, const void* bias,
                           int N, int C, int OC) override {
    const Access access(*this);
    matmul_forward(pre, inp, weight, bias, N, C, OC);
    const int64_t n = int64_t(N) * OC;
    Out o(out, n, dt(), false);
    cpu::gelu_forward(o.get(), In(pre, n, dt()).get(), n);
  }
  void matmul_backward(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                       const void* weight, int N, int C, int OC) override {
    const Access access(*this);
    Out d(dinp, int64_t(N) * C, dt(), false);
    d.zero();  // written: the reference op accumulates into zeros
    cpu::matmul_backward(d.get(), dweight, dbias, In(dout, int64_t(N) * OC, dt()).get(),
                         In(dweight ? inp : nullptr, int64_t(N) * C, dt()).get(),
                         In(weight, int64_t(OC) * C, dt()).get(), N, C, OC);
  }
  void fp8_weight_copy(void* copy, const void* weight, int OC, int C) override {
    const Access access(*this);
    cpu::fp8_weight_copy(static_cast<uint8_t*>(copy), In(weight, int64_t(OC) * C, dt()).get(), OC, C);
  }
  void fp8_amax(float* amax, const void* x, int64_t n) override {
    const Access access(*this);
    cpu::fp8_amax(amax, In(x, n, dt()).get(), n);
  }
  void fp8_cast_with_amax(void* q, float* scales, const void* x, int64_t n, const float* amax) override {
    const Access access(*this);
    cpu::fp8_cast_with_amax(static_cast<uint8_t*>(q), scales, In(x, n, dt()).get(), n, amax);
  }
  void matmul_forward_fp8(void* out, const void* inp, const void* weight, const void* bias, int N, int C, int OC,
                          const void* w_copy) override {
    if (!fp8_recipe::applies(N, C, OC)) {
      if (!weight) throw fp8_recipe::weight_only_in_fp8("forward", N, C, OC);
      return matmul_forward(out, inp, weight, bias, N, C, OC);
    }
    const Access access(*this);
    Out o(out, int64_t(N) * OC, dt(), false);
    cpu::matmul_forward_fp8(o.get(), In(inp, int64_t(N) * C, dt()).get(),
                            In(w_copy ? nullptr : weight, int64_t(OC) * C, dt()).get(), In(bias, OC, dt()).get(), N, C,
                            OC, static_cast<const uint8_t*>(w_copy));
  }
  void matmul_backward_fp8(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                           const void* weight, int N, int C, int OC, const void* w_copy) override {
    if (!fp8_recipe::applies(N, C, OC)) {
      if (!weight && dinp) throw fp8_recipe::weight_only_in_fp8("backward", N, C, OC);
      return matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
    }
    const Access access(*this);
    Out d(dinp, int64_t(N) * C, dt(), false);
    cpu::matmul_backward_fp8(d.get(), dweight, dbias, In(dout, int64_t(N) * OC, dt()).get(),
                             In(dweight ? inp : nullptr, int64_t(N) * C, dt()).get(),
                             In(dinp && !w_copy ? weight : nullptr, int64_t(OC) * C, dt()).get(), N, C, OC,
                             static_cast<const uint8_t*>(w_copy));
  }
  void attention_forward(void* out, float* lse, const void* qkv, int B, int T, int C, int NH, int NKV,
                         const int32_t* pos) override {
    const Access access(*this);
    const int64_t BT = int64_t(B) * T, C3 = int64_t(NH + 2 * NKV) * (C / NH);
    Out o(out, BT * C, dt(), false);
    cpu::attention_forward(o.get(), lse, In(qkv, BT * C3, dt()).get(), B, T, C, NH, NKV, pos);
  }
  void attention_backward(void* dqkv, const void* dout, const void* /*out*/, const void* qkv, const float* lse,
                          int B, int T, int C, int NH, int NKV, const int32_t* pos) override {
    const Access access(*this);
    const int64_t BT = int64_t(B) * T, C3 = int64_t(NH + 2 * NKV) * (C / NH);
    Out d(dqkv, BT * C3, dt(), false);
    d.zero();  // written: the reference op accumulates into zeros
    cpu::attention_backward(d.get(), In(dout, BT * C, dt()).get(), In(qkv, BT * C3, dt()).get(), lse, B, T, C,
                            NH, NKV, pos);
  }
  void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                       float eps) override {
    const Access access(*this);
    Out o(out, int64_t(N) * C, dt(), false);
    cpu::rmsnorm_forward(o.get(), rstd, In(inp, int64_t(N) * C, dt()).get(), In(weight, C, dt()).get(), N, C, eps);
  }
  void residual_rmsnorm_forward(void* res, void* out, float* rstd, const void* a, const void* b, const void* weight,
                                int N, int C, float eps) override {
    const Access access(*this);
    const int64_t n = int64_t(N) * C;
    {
      Out r(res, n, dt(), false);
      cpu::add(r.get(), In(a, n, dt()).get(), In(b, n, dt()).get(), n);
    }  // res is rounded to the compute type before the norm reads it, as on the GPU
    rmsnorm_forward(out, rstd, res, weight, N, C, eps);
  }
  void rmsnorm_backward(void* dinp, float* dweight, const void* dout, const void* inp, const void* weight,
                        const float* rstd, int N, int C) override {
    const Access access(*this);
    const int64_t n = int64_t(N) * C;
    Out d(dinp, n, dt(), true);
    cpu::rmsnorm_backward(d.get(), dweight, In(dout, n, dt()).get(), In(inp, n, dt()).get(),
                          In(weight, C, dt()).get(), rstd, N, C);
  }
  void head_rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int64_t N, int heads, int hs,
                            int64_t stride, float eps) override {
    const Access access(*this);
    const int64_t n = N > 0 ? (N - 1) * stride + int64_t(heads) * hs : 0;  // the span the heads cover
    Out o(out, n, dt(), true);  // what lies between the heads is kept
    cpu::head_rmsnorm_forward(o.get(), rstd, In(inp, n, dt()).get(), In(weight, hs, dt()).get(), N, heads, hs,
                              stride, eps);
  }
  void head_rmsnorm_backward(void* dinp, float* dweight, const void* dout, const void* inp, const void* weight,
                             const float* rstd, int64_t N, int heads, int hs, int64_t stride) override {
    const Access access(*this);
    const int64_t n = N > 0 ? (N - 1) * stride + int64_t(heads) * hs : 0;
    const In d(dout, n, dt());  // converted before dinp (which may be dout) is
    Out o(dinp, n, dt(), true);
    cpu::head_rmsnorm_backward(o.get(), dweight, d.get(), In(inp, n, dt()).get(), In(weight, hs, dt()).get(), rstd,
                               N, heads, hs, stride);
  }
  void dropout(void* out, const void* in, int64_t N, int C, int64_t ld, float p, uint64_t key, uint64_t row0,
               int64_t cols, int64_t col0) override {
    const Access access(*this);
    const int64_t n = N > 0 ? (N - 1) * ld + C : 0;
    const In src(in, n, dt());  // converted before out (which may be in) is
    Out o(out, n, dt(), true);
    cpu::dropout(o.get(), src.get(), N, C, ld, p, key, row0, cols, col0);
  }
  void add_rows_scaled(void* y, int64_t ldy, const void* x, int64_t ldx, int64_t N, int C, float alpha) override {
    const Access access(*this);
    const In src(x, N > 0 ? (N - 1) * ldx + C : 0, dt());
    Out o(y, N > 0 ? (N - 1) * ldy + C : 0, dt(), true);  // what lies between the rows is kept
    cpu::add_rows_scaled(o.get(), ldy, src.get(), ldx, N, C, alpha);
  }
  void rope(void* x, int B, int T, int n_heads, int hs, int64_t stride, float theta, bool inverse,
            const int32_t* pos, const RopeScaling& scaling) override {
    const Access access(*this);
    Out o(x, int64_t(B) * T * stride, dt(), true);
    cpu::rope(o.get(), B, T, n_heads, hs, stride, theta, inverse, pos, scaling);
  }
  void swiglu_forward(void* out, const void* inp, int64_t N, int F) override {
    const Access access(*this);
    Out o(out, N * F, dt(), false);
    cpu::swiglu_forward(o.get(), In(inp, N * 2 * F, dt()).get(), N, F);
  }
  void swiglu_backward(void* dinp, const void* inp, const void* dout, int64_t N, int F) override {
    const Access access(*this);
    Out d(dinp, N * 2 * F, dt(), false);
    cpu::swiglu_backward(d.get(), In(inp, N * 2 * F, dt()).get(), In(dout, N * F, dt()).get(), N, F);
  }
  void gelu_forward(void* out, const void* inp, int64_t n) override {
    const Access access(*this);
    Out o(out, n, dt(), false);
    cpu::gelu_forward(o.get(), In(inp, n, dt()).get(), n);
  }
  void gelu_backward(void* dinp, const void* inp, const void* dout, int64_t n) override {
    const Access access(*this);
    Out d(dinp, n, dt(), false);  // dinp may be dout: elementwise, each read before its write
    cpu::gelu_backward(d.get(), In(inp, n, dt()).get(), In(dout, n, dt()).get(), n);
  }
  void softmax_crossentropy(float* losses, void* logits, const int32_t* targets, int N, int V, int Vr,
                            float grad_scale) override {
    const Access access(*this);
    Out l(logits, int64_t(N) * V, dt(), true);
    cpu::softmax_crossentropy(losses, l.get(), targets, N, V, Vr, grad_scale);
    if (grad_scale == 0.0f) l.discard();  // logits unchanged: no write-back rounding pass
  }
  void logits_row_max(float* out_max, const void* logits, int N, int V, int Vr) override {
    const Access access(*this);
    cpu::logits_row_max(out_max, In(logits, int64_t(N) * V, dt()).get(), N, V, Vr);
  }
  void logits_row_sumexp(float* out_sum, const void* logits, const float* row_max, int N, int V, int Vr) override {
    const Access access(*this);
    cpu::logits_row_sumexp(out_sum, In(logits, int64_t(N) * V, dt()).get(), row_max, N, V, Vr);
  }
  void logits_pick_target(float* out, const void* logits, const int32_t* targets, int N, int V,
                          int v0) override {
    const Access access(*this);
    cpu::logits_pick_target(out, In(logits, int64_t(N) * V, dt()).get(), targets, N, V, v0);
  }
  void crossentropy_grad_from_lse(void* logits, const float* lse, const int32_t* targets, int N, int V, int Vr,
                                  int v0, float grad_scale) override {
    const Access access(*this);
    Out l(logits, int64_t(N) * V, dt(), true);
    cpu::crossentropy_grad_from_lse(l.get(), lse, targets, N, V, Vr, v0, grad_scale);
  }
  void add(float* out, const float* a, const float* b, int64_t n) override {
    const Access access(*this);
    cpu::add(out, a, b, n);
  }
  void scale(float* x, float s, int64_t n) override {
    const Access access(*this);
    cpu::scale(x, s, n);
  }
  void sum_squares_accumulate(double* acc, const float* x, int64_t n) override {
    const Access access(*this);
    *acc += cpu::sum_squares(x, n);
  }
  void sum_accumulate(double* acc, const float* x, int64_t n, double scale) override {
    const Access access(*this);
    double total = 0;
    for (int64_t i = 0; i < n; ++i) total += x[i];
    *acc += scale * total;
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, void* params_compute,
                    int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                    int t) override {
    const Access access(*this);
    omp_set_num_threads(threads_);  // also from a thread of its own (the early host AdamW)
    cpu::adamw_update_with_copy(params, grads, m, v, params_compute, dt(), n, lr, beta1, beta2, eps, weight_decay, t);
  }

 private:
  // Guard mode (ZTRAIN_CPU_GUARD_MEMORY=1): page-aligned mappings, inaccessible outside ops.
  void* guarded_alloc(size_t bytes, MemTag tag, MemKind kind) {
    const size_t page = size_t(::sysconf(_SC_PAGESIZE)), rounded = std::max(page, (bytes + page - 1) / page * page);
    void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw RuntimeFailure(fmt::format("out of host memory: mapping {} bytes", rounded));
    std::lock_guard lock(mu_);
    // pinned host memory is host memory on a GPU too: only device memory is guarded
    if (access_depth_ == 0 && kind == MemKind::Device) ::mprotect(p, rounded, PROT_NONE);
    return record(p, rounded, tag, kind);
  }
  void* record(void* p, size_t rounded, MemTag tag, MemKind kind) {  // mu_ held
    sizes_[p] = {rounded, tag, kind};
    if (kind == MemKind::PinnedHost) {
      stats_.pinned_host += rounded;
      return p;
    }
    stats_.allocated += rounded;
    stats_.peak = std::max(stats_.peak, stats_.allocated);
    stats_.n_allocs++;
    const size_t t = size_t(tag);
    stats_.by_tag[t] += rounded;
    stats_.peak_by_tag[t] = std::max(stats_.peak_by_tag[t], stats_.by_tag[t]);
    return p;
  }
  void protect_all(int prot) {  // mu_ held
    for (const auto& [p, a] : sizes_)
      if (a.kind == MemKind::Device && ::mprotect(p, a.size, prot) != 0) throw RuntimeFailure("mprotect failed in ZTRAIN_CPU_GUARD_MEMORY mode");
  }
  // Held by every op: the backend's memory is accessible while any op (or sanctioned host access)
  // runs.
  using Access = HostAccess;

  bool guard_ = false;
  int access_depth_ = 0;  // ops and host accesses in progress (guard mode)
  int threads_ = 1;
  mutable std::mutex mu_;
  size_t limit_ = 0;  // [run] device_memory_limit (0: none)
  size_t pinned_limit_ = 0;  // [offload] pinned_limit (0: none)
  struct Allocation {
    size_t size;
    MemTag tag;
    MemKind kind;
  };
  std::unordered_map<void*, Allocation> sizes_;
  MemoryStats stats_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace zt
