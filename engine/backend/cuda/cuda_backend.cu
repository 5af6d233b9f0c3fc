// The CUDA backend: the Backend interface over the kernels in this folder and cuBLASLt, on one
// compute stream plus a copy stream for uploads, with the caching allocator. Compute-precision
// tensors (void*) are dispatched on compute_dtype() to the float / bf16 / fp16 instantiations.
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <string>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/allocator.cuh"
#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/device.h"
#include "engine/backend/cuda_scratch.h"
#include "engine/backend/fp8_recipe.h"
#include "engine/backend/cuda/matmul.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {

// Runs `body` with T bound to the storage type of `dt`.
#define ZT_DISPATCH(dt, T, ...)          \
  switch (dt) {                          \
    case DType::F32: {                   \
      using T = float;                   \
      __VA_ARGS__;                       \
      break;                             \
    }                                    \
    case DType::BF16: {                  \
      using T = __nv_bfloat16;           \
      __VA_ARGS__;                       \
      break;                             \
    }                                    \
    case DType::F16: {                   \
      using T = __half;                  \
      __VA_ARGS__;                       \
      break;                             \
    }                                    \
  }

template <typename T>
T* tp(void* p) { return static_cast<T*>(p); }
template <typename T>
const T* tp(const void* p) { return static_cast<const T*>(p); }

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    ZT_CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop{};
    ZT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    if (prop.major < 8)  // bf16 tensor-core tiles and the build's sm_80/sm_90 code need Ampere or newer
      throw std::runtime_error(std::string("GPU ") + prop.name + " has compute capability " +
                               std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                               "; ztrain's CUDA backend needs 8.0 or newer (A100, H100, H200, L4, RTX 30xx/40xx)");
    ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    for (auto& st : staging_) ZT_CUDA_CHECK(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming));
    for (auto& e : mark_events_) ZT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (auto& e : upload_events_) ZT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (auto& e : timing_events_) ZT_CUDA_CHECK(cudaEventCreate(&e));
    gemm_ = std::make_unique<Gemm>();
    gemm_->set_scratch([this](size_t bytes) { return alloc_.alloc(bytes, MemTag::Other); },
                       [this](void* p) { alloc_.free(p); });
    sum_partials_ = static_cast<double*>(alloc_.alloc(cuda_scratch::sum_partials_bytes(), MemTag::Other));
    name_ = std::string("cuda:") + std::to_string(device) + " (" + prop.name + ")";
    fp8_tensor_cores_ = prop.major * 10 + prop.minor >= 89;  // Ada and Hopper onwards
    compute_capability_ = std::to_string(prop.major) + "." + std::to_string(prop.minor);
  }
  ~CudaBackend() override {
    cudaDeviceSynchronize();  // every stream, the communicators' included, before the frees
    alloc_.free(sum_partials_);
    if (scratch_) alloc_.free(scratch_);
    for (auto& st : staging_) {
      if (st.host) cudaFreeHost(st.host);
      cudaEventDestroy(st.done);
    }
    for (auto& e : mark_events_) cudaEventDestroy(e);
    for (auto& e : upload_events_) cudaEventDestroy(e);
    for (auto& e : timing_events_) cudaEventDestroy(e);
    gemm_.reset();
    cudaStreamDestroy(copy_stream_);
    cudaStreamDestroy(stream_);
  }
  DeviceKind kind() const override { return DeviceKind::CUDA; }
  std::string pci_bus_id() const override {
    char id[32] = {};
    return cudaDeviceGetPCIBusId(id, sizeof id, device_) == cudaSuccess ? std::string(id) : std::string();
  }
  void* native_stream() const override { return stream_; }
  std::string name() const override { return name_; }
  std::string supports(const OpRequest& r) const override {
    if (!fp8_tensor_cores_ && (r.op == "fp8_weight_copy" || r.op == "matmul_forward_fp8" || r.op == "matmul_backward_fp8"))
      return name_ + " has compute capability " + compute_capability_ +
             "; FP8 tensor cores need 8.9 or newer (L4, L40S, H100, H200)";
    return cuda_kernels_support(r);
  }

  void* alloc(size_t bytes, MemTag tag, MemKind kind) override {
    if (kind == MemKind::PinnedHost) return alloc_pinned(bytes);
    void* p = alloc_.alloc(bytes, tag);
    ZT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    return p;
  }
  void free(void* p) override {
    if (!p) return;
    {
      std::lock_guard lock(pinned_mu_);
      auto it = pinned_.find(p);
      if (it != pinned_.end()) {
        pinned_bytes_ -= it->second;
        pinned_.erase(it);
        ZT_CUDA_CHECK(cudaDeviceSynchronize());  // no collective in flight (see CachingAllocator::release_cache)
        ZT_CUDA_CHECK(cudaFreeHost(p));
        return;
      }
    }
    alloc_.free(p);
  }
  void copy_to_device(void* dst, const void* src, size_t n) override {
    ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream_));
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host buffer may be reused at once
  }
  // NVTX v3 is header-only: it finds a profiler's injection library at run time, so nothing is
  // linked and the calls cost nothing when no profiler is attached.
  void push_range(const char* name) override { nvtxRangePushA(name); }
  void pop_range() override { nvtxRangePop(); }
  int timing_point() override {
    const int id = timing_next_;
    timing_next_ = (timing_next_ + 1) % kTimingPoints;
    ZT_CUDA_CHECK(cudaEventRecord(timing_events_[id], stream_));
    return id;
  }
  double timing_ms(int from, int to) override {
    float ms = 0;
    ZT_CUDA_CHECK(cudaEventSynchronize(timing_events_[to]));  // passed already after the step's sync
    ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, timing_events_[from], timing_events_[to]));
    return double(ms);
  }
  uint64_t mark() override {
    const uint64_t id = ++marks_;
    ZT_CUDA_CHECK(cudaEventRecord(mark_events_[id % kMarks], stream_));
    return id;
  }
  void upload_async(void* dst, const void* src, size_t n, uint64_t after) override {
    // No mark: wait for everything enqueued so far (e.g. the zero-fill of a fresh buffer, which
    // the compute stream may not have run yet). A mark's event is re-recorded kMarks marks
    // later; an older mark has long completed.
    if (after == 0) after = mark();
    if (marks_ - after < kMarks)
      ZT_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, mark_events_[after % kMarks], 0));
    // Two pinned staging buffers used in turn; a buffer is refilled only after its last copy
    // finished. The compute stream waits for the copy before anything enqueued after this.
    Staging& st = staging_[next_staging_];
    next_staging_ = (next_staging_ + 1) % 2;
    ZT_CUDA_CHECK(cudaEventSynchronize(st.done));
    if (st.bytes < n) {  // grown rarely (the largest upload so far), after every stream is drained
      ZT_CUDA_CHECK(cudaDeviceSynchronize());
      if (st.host) ZT_CUDA_CHECK(cudaFreeHost(st.host));
      st.bytes = std::max<size_t>(n, 1 << 20);
      ZT_CUDA_CHECK(cudaHostAlloc(&st.host, st.bytes, cudaHostAllocDefault));
    }
    std::memcpy(st.host, src, n);
    ZT_CUDA_CHECK(cudaMemcpyAsync(dst, st.host, n, cudaMemcpyHostToDevice, copy_stream_));
    ZT_CUDA_CHECK(cudaEventRecord(st.done, copy_stream_));
    ZT_CUDA_CHECK(cudaStreamWaitEvent(stream_, st.done, 0));
  }
  uint64_t upload_pinned_async(void* dst, const void* src, size_t n, uint64_t after) override {
    // as upload_async, without the staging buffer: the copy engine reads the pinned source
    if (after == 0) after = mark();
    if (marks_ - after < kMarks)
      ZT_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, mark_events_[after % kMarks], 0));
    ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, copy_stream_));
    const uint64_t ticket = ++uploads_;
    cudaEvent_t done = upload_events_[ticket % kUploads];
    ZT_CUDA_CHECK(cudaEventRecord(done, copy_stream_));
    ZT_CUDA_CHECK(cudaStreamWaitEvent(stream_, done, 0));
    return ticket;
  }
  void wait_upload(uint64_t ticket) override {
    // An event is re-recorded kUploads uploads later, by a later copy on the same stream: waiting
    // for it covers this one too.
    if (ticket) ZT_CUDA_CHECK(cudaEventSynchronize(upload_events_[ticket % kUploads]));
  }
  void copy_to_host(void* dst, const void* src, size_t n) override {
    // callable from any thread (checkpoint writers): a new thread's current device is device 0
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device_) ZT_CUDA_CHECK(cudaSetDevice(device_));
    ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream_));
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void copy_device(void* dst, const void* src, size_t n) override {
    ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream_));
  }
  void fill_zero(void* p, size_t n) override { ZT_CUDA_CHECK(cudaMemsetAsync(p, 0, n, stream_)); }
  void synchronize() override { ZT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  size_t memory_available() const override {
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return SIZE_MAX;
    if (alloc_.limit())
      free_bytes = std::min(free_bytes, alloc_.limit() > alloc_.reserved() ? alloc_.limit() - alloc_.reserved() : 0);
    return free_bytes;
  }
  void set_memory_limit(size_t bytes) override { alloc_.set_limit(bytes); }
  void set_pinned_limit(size_t bytes) override { pinned_limit_ = bytes; }
  MemoryStats memory_stats() const override {
    MemoryStats s = alloc_.stats();
    std::lock_guard lock(pinned_mu_);
    s.pinned_host = pinned_bytes_;
    return s;
  }

  void convert(void* dst, DType dt, const void* src, DType st, int64_t n) override {
    ZT_DISPATCH(dt, D, ZT_DISPATCH(st, S, cuda::convert(tp<D>(dst), tp<S>(src), n, stream_)));
  }

  void embedding_forward(void* out, const int32_t* inp, const void* wte, const void* wpe, int B, int T_,
                         int C, const int32_t* pos) override {
    ZT_DISPATCH(dt(), T, cuda::embedding_forward(tp<T>(out), inp, tp<T>(wte), tp<T>(wpe), B, T_, C, pos, stream_));
  }
  void embedding_backward(float* dwte, float* dwpe, const void* dout, const int32_t* inp, int B, int T_,
                          int C, const int32_t* pos) override {
    if (deterministic()) {
      float* sc = scratch(cuda_scratch::embedding_backward(int64_t(B) * T_, true));
      ZT_DISPATCH(dt(), T,
                  cuda::embedding_backward_deterministic(dwte, dwpe, tp<T>(dout), inp, B, T_, C, pos, sc, stream_));
    } else {
      ZT_DISPATCH(dt(), T, cuda::embedding_backward(dwte, dwpe, tp<T>(dout), inp, B, T_, C, pos, stream_));
    }
  }
  void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* w, const void* b, int N,
                         int C, float eps) override {
    ZT_DISPATCH(dt(), T,
                cuda::layernorm_forward(tp<T>(out), mean, rstd, tp<T>(inp), tp<T>(w), tp<T>(b), N, C, eps, stream_));
  }
  void residual_layernorm_forward(void* res, void* out, float* mean, float* rstd, const void* a, const void* b_,
                                  const void* w, const void* b, int N, int C, float eps) override {
    ZT_DISPATCH(dt(), T,
                cuda::residual_layernorm_forward(tp<T>(res), tp<T>(out), mean, rstd, tp<T>(a), tp<T>(b_), tp<T>(w),
                                                 tp<T>(b), N, C, eps, stream_));
  }
  void layernorm_backward(void* dinp, float* dw, float* db, const void* dout, const void* inp, const void* w,
                          const float* mean, const float* rstd, int N, int C) override {
    float* sc = scratch(cuda_scratch::layernorm_backward(C));
    ZT_DISPATCH(dt(), T,
                cuda::layernorm_backward(tp<T>(dinp), dw, db, tp<T>(dout), tp<T>(inp), tp<T>(w), mean, rstd, N, C,
                                         sc, stream_));
  }
  // the GEMMs: algorithms and fusions chosen by measurement, unless [run] deterministic
  Gemm& gemm() {
    gemm_->set_autotune(!deterministic());
    return *gemm_;
  }
  void matmul_forward(void* out, const void* inp, const void* w, const void* bias, int N, int C, int OC) override {
    gemm().linear_forward(out, inp, w, bias, N, C, OC, dt(), stream_);
  }
  // FP8 where the recipe takes the shape and the GPU has FP8 tensor cores (compute capability 8.9
  // or newer); elsewhere the compute type's product, said once
  bool fp8_here(int N, int C, int OC) const {
    if (!fp8_tensor_cores_ && !said_no_fp8_) {
      std::fprintf(stderr, "FP8: %s has no FP8 tensor cores (compute capability 8.9 or newer): its linear layers run "
                   "in the compute type\n", name_.c_str());
      said_no_fp8_ = true;
    }
    return fp8_tensor_cores_ && fp8_recipe::applies(N, C, OC);
  }
  void fp8_weight_copy(void* copy, const void* w, int OC, int C) override {
    float* sc = scratch(cuda_scratch::fp8_weight_copy());
    ZT_DISPATCH(dt(), T, cuda::fp8_weight_copy(static_cast<uint8_t*>(copy), tp<T>(w), OC, C, sc, stream_));
  }
  void fp8_amax(float* amax, const void* x, int64_t n) override {
    float* sc = scratch(cuda_scratch::fp8_amax());
    ZT_DISPATCH(dt(), T, cuda::fp8_amax(amax, tp<T>(x), n, sc, stream_));
  }
  void fp8_cast_with_amax(void* q, float* scales, const void* x, int64_t n, const float* amax) override {
    ZT_DISPATCH(dt(), T, cuda::fp8_cast_with_amax(static_cast<uint8_t*>(q), scales, tp<T>(x), n, amax, stream_));
  }
  void matmul_forward_fp8(void* out, const void* inp, const void* w, const void* bias, int N, int C, int OC,
                          const void* w_copy) override {
    if (!fp8_here(N, C, OC)) {
      if (!w) throw fp8_recipe::weight_only_in_fp8("forward", N, C, OC);
      return matmul_forward(out, inp, w, bias, N, C, OC);
    }
    float* sc = scratch(cuda_scratch::matmul_forward_fp8(N, C, OC));
    ZT_DISPATCH(dt(), T,
                cuda::matmul_forward_fp8(gemm(), tp<T>(out), tp<T>(inp), tp<T>(w), tp<T>(bias), N, C, OC,
                                         static_cast<const uint8_t*>(w_copy), sc, stream_));
  }
  void matmul_backward_fp8(void* dinp, float* dw, float* dbias, const void* dout, const void* inp, const void* w,
                           int N, int C, int OC, const void* w_copy) override {
    if (!fp8_here(N, C, OC)) {
      if (!w && dinp) throw fp8_recipe::weight_only_in_fp8("backward", N, C, OC);
      return matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
    }
    float* sc = scratch(cuda_scratch::matmul_backward_fp8(N, C, OC, dbias != nullptr));
    float* bias_sc = sc + fp8_recipe::backward_scratch_bytes(N, C, OC) / 4;  // after the FP8 copies
    ZT_DISPATCH(dt(), T,
                cuda::matmul_backward_fp8(gemm(), tp<T>(dinp), dw, dbias, tp<T>(dout), tp<T>(inp), tp<T>(w), N, C, OC,
                                          static_cast<const uint8_t*>(w_copy), sc, bias_sc, stream_));
  }
  void matmul_gelu_forward(void* out, void* pre, const void* inp, const void* w, const void* bias, int N, int C,
                           int OC) override {
    gemm().linear_gelu_forward(out, pre, inp, w, bias, N, C, OC, dt(), stream_);
  }
  void matmul_backward(void* dinp, float* dw, float* dbias, const void* dout, const void* inp, const void* w, int N,
                       int C, int OC) override {
    gemm().linear_backward(dinp, dw, dbias, dout, inp, w, nullptr, N, C, OC, dt(), bias_scratch(dbias, OC), stream_);
  }
  void matmul_gelu_backward(void* dpre, float* dw, float* dbias, const void* dout, const void* inp, const void* w,
                            const void* pre, int N, int C, int OC) override {
    gemm().linear_backward(dpre, dw, dbias, dout, inp, w, pre, N, C, OC, dt(), bias_scratch(dbias, OC), stream_);
  }
  void attention_forward(void* out, float* lse, const void* qkv, int B, int T_, int C, int NH, int NKV,
                         const int32_t* pos) override {
    const int64_t n = cuda_scratch::attention_forward();  // cuDNN's engine workspace, where it runs
    float* sc = scratch(n);
    ZT_DISPATCH(dt(), T,
                cuda::attention_forward(tp<T>(out), lse, tp<T>(qkv), B, T_, C, NH, NKV, pos, sc, n, deterministic(),
                                        stream_));
  }
  void attention_backward(void* dqkv, const void* dout, const void* out, const void* qkv, const float* lse, int B,
                          int T_, int C, int NH, int NKV, const int32_t* pos) override {
    const int64_t n = cuda_scratch::attention_backward(B, T_, C, NH, dtype_size(dt()), deterministic());
    float* sc = scratch(n);
    ZT_DISPATCH(dt(), T,
                cuda::attention_backward(tp<T>(dqkv), tp<T>(dout), tp<T>(out), tp<T>(qkv), lse, B, T_, C, NH, NKV, pos,
                                         sc, n, deterministic(), stream_));
  }
  void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* w, int N, int C, float eps) override {
    ZT_DISPATCH(dt(), T, cuda::rmsnorm_forward(tp<T>(out), rstd, tp<T>(inp), tp<T>(w), N, C, eps, stream_));
  }
  void residual_rmsnorm_forward(void* res, void* out, float* rstd, const void* a, const void* b, const void* w, int N,
                                int C, float eps) override {
    ZT_DISPATCH(dt(), T,
                cuda::residual_rmsnorm_forward(tp<T>(res), tp<T>(out), rstd, tp<T>(a), tp<T>(b), tp<T>(w), N, C, eps,
                                               stream_));
  }
  void rmsnorm_backward(void* dinp, float* dw, const void* dout, const void* inp, const void* w, const float* rstd,
                        int N, int C) override {
    float* sc = scratch(cuda_scratch::rmsnorm_backward(C));
    ZT_DISPATCH(dt(), T,
                cuda::rmsnorm_backward(tp<T>(dinp), dw, tp<T>(dout), tp<T>(inp), tp<T>(w), rstd, N, C, sc, stream_));
  }
  void head_rmsnorm_forward(void* out, float* rstd, const void* inp, const void* w, int64_t N, int heads, int hs,
                            int64_t stride, float eps) override {
    ZT_DISPATCH(dt(), T,
                cuda::head_rmsnorm_forward(tp<T>(out), rstd, tp<T>(inp), tp<T>(w), N, heads, hs, stride, eps, stream_));
  }
  void head_rmsnorm_backward(void* dinp, float* dw, const void* dout, const void* inp, const void* w, const float* rstd,
                             int64_t N, int heads, int hs, int64_t stride) override {
    float* sc = scratch(cuda_scratch::rmsnorm_backward(hs));
    ZT_DISPATCH(dt(), T,
                cuda::head_rmsnorm_backward(tp<T>(dinp), dw, tp<T>(dout), tp<T>(inp), tp<T>(w), rstd, N, heads, hs,
                                            stride, sc, stream_));
  }
  void rope(void* x, int B, int T_, int n_heads, int hs, int64_t stride, float theta, bool inverse,
            const int32_t* pos, const RopeScaling& scaling) override {
    ZT_DISPATCH(dt(), T, cuda::rope(tp<T>(x), B, T_, n_heads, hs, stride, theta, inverse, pos, scaling, stream_));
  }
  void swiglu_forward(void* out, const void* inp, int64_t N, int F) override {
    ZT_DISPATCH(dt(), T, cuda::swiglu_forward(tp<T>(out), tp<T>(inp), N, F, stream_));
  }
  void swiglu_backward(void* dinp, const void* inp, const void* dout, int64_t N, int F) override {
    ZT_DISPATCH(dt(), T, cuda::swiglu_backward(tp<T>(dinp), tp<T>(inp), tp<T>(dout), N, F, stream_));
  }
  void dropout(void* out, const void* in, int64_t N, int C, int64_t ld, float p, uint64_t key, uint64_t row0,
               int64_t cols, int64_t col0) override {
    ZT_DISPATCH(dt(), T, cuda::dropout(tp<T>(out), tp<T>(in), N, C, ld, p, key, row0, cols, col0, stream_));
  }
  void add_rows_scaled(void* y, int64_t ldy, const void* x, int64_t ldx, int64_t N, int C, float alpha) override {
    ZT_DISPATCH(dt(), T, cuda::add_rows_scaled(tp<T>(y), ldy, tp<T>(x), ldx, N, C, alpha, stream_));
  }
  void gelu_forward(void* out, const void* inp, int64_t n) override {
    ZT_DISPATCH(dt(), T, cuda::gelu_forward(tp<T>(out), tp<T>(inp), n, stream_));
  }
  void gelu_backward(void* dinp, const void* inp, const void* dout, int64_t n) override {
    ZT_DISPATCH(dt(), T, cuda::gelu_backward(tp<T>(dinp), tp<T>(inp), tp<T>(dout), n, stream_));
  }
  void softmax_crossentropy(float* losses, void* logits, const int32_t* targets, int N, int V, int Vr,
                            float grad_scale) override {
    ZT_DISPATCH(dt(), T, cuda::softmax_crossentropy(losses, tp<T>(logits), targets, N, V, Vr, grad_scale, stream_));
  }
  void logits_row_max(float* out, const void* logits, int N, int V, int Vr) override {
    ZT_DISPATCH(dt(), T, cuda::logits_row_max(out, tp<T>(logits), N, V, Vr, stream_));
  }
  void logits_row_sumexp(float* out, const void* logits, const float* row_max, int N, int V, int Vr) override {
    ZT_DISPATCH(dt(), T, cuda::logits_row_sumexp(out, tp<T>(logits), row_max, N, V, Vr, stream_));
  }
  void logits_pick_target(float* out, const void* logits, const int32_t* targets, int N, int V, int v0) override {
    ZT_DISPATCH(dt(), T, cuda::logits_pick_target(out, tp<T>(logits), targets, N, V, v0, stream_));
  }
  void crossentropy_grad_from_lse(void* logits, const float* lse, const int32_t* targets, int N, int V, int Vr,
                                  int v0, float grad_scale) override {
    ZT_DISPATCH(dt(), T,
                cuda::crossentropy_grad_from_lse(tp<T>(logits), lse, targets, N, V, Vr, v0, grad_scale, stream_));
  }
  void add(float* out, const float* a, const float* b, int64_t n) override { cuda::add(out, a, b, n, stream_); }
  void scale(float* x, float s, int64_t n) override { cuda::scale(x, s, n, stream_); }
  void sum_squares_accumulate(double* acc, const float* x, int64_t n) override {
    cuda::sum_accumulate(acc, sum_partials_, x, n, true, 1.0, stream_);
  }
  void sum_accumulate(double* acc, const float* x, int64_t n, double scale) override {
    cuda::sum_accumulate(acc, sum_partials_, x, n, false, scale, stream_);
  }
  void adamw_update(float* p, const float* g, float* m, float* v, void* pc, int64_t n, float lr, float beta1,
                    float beta2, float eps, float wd, int t) override {
    ZT_DISPATCH(dt(), T, cuda::adamw_update(p, g, m, v, tp<T>(pc), n, lr, beta1, beta2, eps, wd, t, stream_));
  }

 private:
  DType dt() const { return compute_dtype(); }
  // A device buffer of at least n floats for ops' intermediate sums. It grows during the first
  // step only (every later step asks for the same sizes), so steady state allocates nothing.
  // Ops on the one compute stream use it in turn.
  // the bias gradient's scratch: none without a bias (the LM head's OC is the vocabulary)
  float* bias_scratch(const float* dbias, int OC) {
    return dbias ? scratch(cuda_scratch::matmul_backward(OC, true)) : nullptr;
  }
  float* scratch(int64_t n) {
    const size_t bytes = size_t(n) * sizeof(float);
    if (bytes > scratch_bytes_) {
      if (scratch_) alloc_.free(scratch_);
      scratch_bytes_ = bytes;
      scratch_ = static_cast<float*>(alloc_.alloc(bytes, MemTag::Other));
    }
    return scratch_;
  }

  struct Staging {
    void* host = nullptr;  // pinned
    size_t bytes = 0;
    cudaEvent_t done = nullptr;
  };
  int device_;
  std::string name_;
  bool fp8_tensor_cores_ = false;
  std::string compute_capability_;  // "9.0"
  mutable bool said_no_fp8_ = false;
  cudaStream_t stream_ = nullptr, copy_stream_ = nullptr;
  Staging staging_[2];
  int next_staging_ = 0;
  static constexpr uint64_t kMarks = 64;
  cudaEvent_t mark_events_[kMarks] = {};
  cudaEvent_t timing_events_[kTimingPoints] = {};
  int timing_next_ = 0;
  uint64_t marks_ = 0;
  static constexpr uint64_t kUploads = 64;  // upload_pinned_async's completion events, in turn
  cudaEvent_t upload_events_[kUploads] = {};
  uint64_t uploads_ = 0;
  // Page-locked host memory (cudaHostAlloc: the GPU reads and writes it directly), not cached.
  size_t pinned_limit_ = 0;  // [offload] pinned_limit (0: none)
  void* alloc_pinned(size_t bytes) {
    void* p = nullptr;
    const size_t n = std::max<size_t>(bytes, 1);
    {
      std::lock_guard lock(pinned_mu_);
      if (pinned_limit_ && pinned_bytes_ + n > pinned_limit_) {
        char msg[256];
        std::snprintf(msg, sizeof msg, "out of pinned host memory: allocating %.1f MiB with %.1f MiB pinned would pass "
                      "the limit of %.1f MiB ([offload] pinned_limit)", n / 1048576.0, pinned_bytes_ / 1048576.0,
                      pinned_limit_ / 1048576.0);
        throw std::runtime_error(msg);
      }
    }
    ZT_CUDA_CHECK(cudaDeviceSynchronize());  // no collective in flight (see CachingAllocator::release_cache)
    if (cudaHostAlloc(&p, n, cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();
      char msg[256];
      std::snprintf(msg, sizeof msg, "out of pinned host memory allocating %.1f MiB (%.1f MiB already pinned)",
                    n / 1048576.0, pinned_bytes_ / 1048576.0);
      throw std::runtime_error(msg);
    }
    std::memset(p, 0, n);
    std::lock_guard lock(pinned_mu_);
    pinned_[p] = n;
    pinned_bytes_ += n;
    return p;
  }

  CachingAllocator alloc_;
  mutable std::mutex pinned_mu_;
  std::unordered_map<void*, size_t> pinned_;
  size_t pinned_bytes_ = 0;
  std::unique_ptr<Gemm> gemm_;
  double* sum_partials_ = nullptr;  // (kSumBlocks) per-block partial sums of the sum ops
  float* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

}  // namespace zt::cuda
