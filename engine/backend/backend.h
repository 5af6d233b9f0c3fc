// The op interface: every op the models need, forward and backward, behind one virtual table per
// device. CPU (cpu/) is the reference; CUDA (cuda/) implements the same entries with the same
// semantics. Pointers are device pointers of the backend's device. All ops are fp32 at this level;
// "(accumulates)" marks outputs that are added to rather than overwritten.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace zt {

enum class DeviceKind { CPU, CUDA };

// What an allocation holds, so the memory breakdown (and the ZeRO memory test) can tell model
// states from working buffers.
enum class MemTag { Params, Grads, OptimStates, Activations, CommBuffers, Other, kCount };
const char* mem_tag_name(MemTag tag);

struct MemoryStats {
  size_t allocated = 0;  // bytes currently handed out
  size_t peak = 0;       // high-water mark of `allocated`
  size_t n_allocs = 0;   // live allocations
  size_t by_tag[size_t(MemTag::kCount)] = {};       // bytes currently held per tag
  size_t peak_by_tag[size_t(MemTag::kCount)] = {};  // high-water mark per tag
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;

  // ---- memory: every buffer the engine uses comes from here, so budgets and peaks are known
  // Zero-filled; throws RuntimeFailure (with the breakdown) on exhaustion.
  virtual void* alloc(size_t bytes, MemTag tag = MemTag::Other) = 0;
  virtual void free(void* ptr) = 0;
  virtual void copy_to_device(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void fill_zero(void* ptr, size_t bytes) = 0;
  virtual void synchronize() {}
  // The backend's compute stream (cudaStream_t) for device communicators; null on the CPU.
  virtual void* native_stream() const { return nullptr; }
  virtual MemoryStats memory_stats() const = 0;

  // ---- ops (shapes as in engine/backend/cpu/ops.h, which documents each one)
  virtual void embedding_forward(float* out, const int32_t* inp, const float* wte, const float* wpe,
                                 int B, int T, int C) = 0;
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                                  int B, int T, int C) = 0;  // (accumulates)
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int N, int C,
                                 float eps) = 0;
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const float* weight, const float* mean,
                                  const float* rstd, int N, int C) = 0;  // (accumulates)
  virtual void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                              int N, int C, int OC) = 0;
  virtual void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, int N, int C,
                               int OC) = 0;  // (accumulates)
  virtual void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                                 int NH) = 0;
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv,
                                  const float* lse, int B, int T, int C,
                                  int NH) = 0;  // (accumulates)
  virtual void gelu_forward(float* out, const float* inp, int64_t n) = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout,
                             int64_t n) = 0;  // (accumulates)
  virtual void softmax_crossentropy(float* losses, float* logits, const int32_t* targets, int N,
                                    int V, float grad_scale) = 0;
  virtual void logits_row_max(float* out_max, const float* logits, int N, int V) = 0;
  virtual void logits_row_sumexp(float* out_sum, const float* logits, const float* row_max, int N,
                                 int V) = 0;
  virtual void logits_pick_target(float* out, const float* logits, const int32_t* targets, int N,
                                  int V, int v0) = 0;
  virtual void crossentropy_grad_from_lse(float* logits, const float* lse, const int32_t* targets,
                                          int N, int V, int v0, float grad_scale) = 0;
  virtual void add(float* out, const float* a, const float* b, int64_t n) = 0;
  virtual void scale(float* x, float s, int64_t n) = 0;
  virtual double sum_squares(const float* x, int64_t n) = 0;
  virtual void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n,
                            float lr, float beta1, float beta2, float eps, float weight_decay,
                            int t) = 0;
};

// The CPU backend; `threads` <= 0 means all cores. Sets OpenMP and OpenBLAS thread counts.
std::unique_ptr<Backend> make_cpu_backend(int threads);

// Number of visible CUDA devices (0 when built without CUDA or when no driver/GPU is present).
int cuda_device_count();

// Resolves run.device ("auto", "cpu", "cuda") to a backend; logs the choice. CUDA uses GPU
// local_rank % visible GPUs.
std::unique_ptr<Backend> make_backend(const std::string& device, int threads, int local_rank = 0);

}  // namespace zt
