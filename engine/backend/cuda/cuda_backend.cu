// The CUDA backend: the Backend interface over the kernels in this folder and cuBLASLt, on one
// compute stream, with the caching allocator. fp32 at this interface; the mixed-precision path
// (bf16/fp16 compute with fp32 masters) is the next layer.
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/allocator.cuh"
#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/device.h"
#include "engine/backend/cuda/matmul.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    ZT_CUDA_CHECK(cudaSetDevice(device));
    ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    gemm_ = std::make_unique<Gemm>();
    scratch_ = static_cast<double*>(alloc_.alloc(sizeof(double), MemTag::Other));
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device);
    name_ = std::string("cuda:") + std::to_string(device) + " (" + prop.name + ")";
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    alloc_.free(scratch_);
    gemm_.reset();
    cudaStreamDestroy(stream_);
  }
  DeviceKind kind() const override { return DeviceKind::CUDA; }
  void* native_stream() const override { return stream_; }
  std::string name() const override { return name_; }

  void* alloc(size_t bytes, MemTag tag) override {
    void* p = alloc_.alloc(bytes, tag);
    ZT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    return p;
  }
  void free(void* p) override { alloc_.free(p); }
  void copy_to_device(void* dst, const void* src, size_t n) override {
    ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream_));
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host buffer may be reused at once
  }
  void copy_to_host(void* dst, const void* src, size_t n) override {
    ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream_));
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void fill_zero(void* p, size_t n) override { ZT_CUDA_CHECK(cudaMemsetAsync(p, 0, n, stream_)); }
  void synchronize() override { ZT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  MemoryStats memory_stats() const override { return alloc_.stats(); }

  void embedding_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T,
                         int C) override {
    cuda::embedding_forward(out, inp, wte, wpe, B, T, C, stream_);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T,
                          int C) override {
    cuda::embedding_backward(dwte, dwpe, dout, inp, B, T, C, stream_);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int N, int C, float eps) override {
    cuda::layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps, stream_);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int N, int C) override {
    cuda::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, stream_);
  }
  void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int C,
                      int OC) override {
    gemm_->linear_forward(out, inp, w, bias, N, C, OC, stream_);
  }
  void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                       int N, int C, int OC) override {
    gemm_->linear_backward(dinp, dw, dbias, dout, inp, w, N, C, OC, stream_);
  }
  void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) override {
    cuda::attention_forward(out, lse, qkv, B, T, C, NH, stream_);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* lse, int B, int T, int C,
                          int NH) override {
    cuda::attention_backward(dqkv, dout, qkv, lse, B, T, C, NH, stream_);
  }
  void gelu_forward(float* out, const float* inp, int64_t n) override { cuda::gelu_forward(out, inp, n, stream_); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    cuda::gelu_backward(dinp, inp, dout, n, stream_);
  }
  void softmax_crossentropy(float* losses, float* logits, const int32_t* targets, int N, int V,
                            float grad_scale) override {
    cuda::softmax_crossentropy(losses, logits, targets, N, V, grad_scale, stream_);
  }
  void logits_row_max(float* out, const float* logits, int N, int V) override {
    cuda::logits_row_max(out, logits, N, V, stream_);
  }
  void logits_row_sumexp(float* out, const float* logits, const float* row_max, int N, int V) override {
    cuda::logits_row_sumexp(out, logits, row_max, N, V, stream_);
  }
  void logits_pick_target(float* out, const float* logits, const int32_t* targets, int N, int V, int v0) override {
    cuda::logits_pick_target(out, logits, targets, N, V, v0, stream_);
  }
  void crossentropy_grad_from_lse(float* logits, const float* lse, const int32_t* targets, int N, int V, int v0,
                                  float grad_scale) override {
    cuda::crossentropy_grad_from_lse(logits, lse, targets, N, V, v0, grad_scale, stream_);
  }
  void add(float* out, const float* a, const float* b, int64_t n) override { cuda::add(out, a, b, n, stream_); }
  void scale(float* x, float s, int64_t n) override { cuda::scale(x, s, n, stream_); }
  double sum_squares(const float* x, int64_t n) override {
    cuda::sum_squares(scratch_, x, n, stream_);
    double out = 0;
    copy_to_host(&out, scratch_, sizeof out);
    return out;
  }
  void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                    float eps, float wd, int t) override {
    cuda::adamw_update(p, g, m, v, n, lr, beta1, beta2, eps, wd, t, stream_);
  }

 private:
  int device_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  CachingAllocator alloc_;
  std::unique_ptr<Gemm> gemm_;
  double* scratch_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

}  // namespace zt::cuda
