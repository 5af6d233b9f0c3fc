// The backend interface: a device's memory, its stream of work, and every op the models need,
// forward and backward, behind one virtual table per device. CPU (cpu/) is the reference; CUDA (cuda/) implements the same entries with the same
// semantics. Pointers are device pointers of the backend's device. "(accumulates)" marks outputs
// that are added to rather than overwritten (weight gradients, and the residual stream's gradient,
// which has two writers); an activation gradient with one writer is written, so it needs no
// zero-fill before and no read of its old contents.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/rope_scaling.h"
#include "engine/core/dtype.h"
#include "engine/core/run_choices.h"

namespace zt {

enum class DeviceKind { CPU, CUDA };
// [precision] compute on a `kind` device: auto is bf16 on a GPU and fp32 on the CPU.
DType compute_dtype_of(PrecisionChoice compute, DeviceKind kind);
// The [precision] compute that names `compute` itself (a resolved precision, never auto).
inline PrecisionChoice precision_choice_of(DType compute) {
  return compute == DType::BF16 ? PrecisionChoice::Bf16 : compute == DType::F16 ? PrecisionChoice::Fp16
                                                                                : PrecisionChoice::Fp32;
}

// What an allocation holds, so the memory breakdown (and the ZeRO memory test) can tell model
// states from working buffers.
enum class MemTag { Params, Grads, OptimStates, Activations, CommBuffers, Other, kCount };
const char* mem_tag_name(MemTag tag);

// Where an allocation lives: the backend's device memory, or page-locked host memory that the
// device reads and writes directly (offloaded model states, checkpoint staging). On the CPU
// backend both are host memory; they are counted apart so that a device budget means the same.
enum class MemKind { Device, PinnedHost };

struct MemoryStats {
  size_t allocated = 0;  // bytes currently handed out
  size_t peak = 0;       // high-water mark of `allocated`
  size_t n_allocs = 0;   // live allocations
  size_t reserved = 0;   // bytes held from the system (CUDA: cudaMalloc'ed, cached included)
  size_t pinned_host = 0;  // MemKind::PinnedHost bytes currently held (not in the figures above)
  // Share of reserved bytes not handed out (cached free blocks, size-class slack).
  double fragmentation() const { return reserved ? 1.0 - double(allocated) / double(reserved) : 0.0; }
  size_t by_tag[size_t(MemTag::kCount)] = {};       // bytes currently held per tag
  size_t peak_by_tag[size_t(MemTag::kCount)] = {};  // high-water mark per tag
};

// A backend is three interfaces (ggml's device/buffer/stream split): its memory, its stream of
// work with the timing of it, and its ops. Backend joins them for one device; code that needs one
// side only can take that side.

// ---- memory: every buffer the engine uses comes from here, so budgets and peaks are known
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Zero-filled; throws RuntimeFailure (with the breakdown) on exhaustion. free() takes either kind.
  virtual void* alloc(size_t bytes, MemTag tag = MemTag::Other, MemKind kind = MemKind::Device) = 0;
  virtual void free(void* ptr) = 0;
  virtual void copy_to_device(void* dst, const void* host_src, size_t bytes) = 0;
  // Waits for the compute work enqueued so far; callable from any thread (checkpoint writers copy
  // with several).
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  // dst <- src, both this backend's memory (CUDA: on the compute stream).
  virtual void copy_device(void* dst, const void* src, size_t bytes) = 0;
  // Host code that touches this backend's memory outside its ops is a bug on a GPU (a segfault,
  // or garbage). The CPU backend makes it one here too when ZTRAIN_CPU_GUARD_MEMORY=1: its
  // allocations are then inaccessible (PROT_NONE) except during its own ops and between
  // begin_host_access() and end_host_access(), which only the MPI communicator (the one
  // sanctioned host access on the CPU backend) calls.
  virtual void begin_host_access() {}
  virtual void end_host_access() {}
  struct HostAccess {  // begin_host_access() for a scope
    DeviceMemory& be;
    explicit HostAccess(DeviceMemory& b) : be(b) { be.begin_host_access(); }
    ~HostAccess() { be.end_host_access(); }
    HostAccess(const HostAccess&) = delete;
    HostAccess& operator=(const HostAccess&) = delete;
  };
  // Host code may read this backend's memory directly (the CPU backend, unguarded).
  virtual bool host_accessible() const { return false; }
  virtual void fill_zero(void* ptr, size_t bytes) = 0;
  // A mark after the compute work enqueued so far (CUDA: an event on the compute stream), for
  // upload_async to wait on. 0 means "nothing to wait for".
  virtual uint64_t mark() { return 0; }
  // Host -> device copy that may overlap running compute (CUDA: a separate copy stream from
  // pinned staging; the compute stream waits for it before the ops enqueued after this call).
  // The host buffer may be reused at once. The copy starts only after `after` (a mark()), so
  // the caller passes the mark after the last enqueued op that touches dst (0: after all work
  // enqueued so far).
  virtual void upload_async(void* dst, const void* host_src, size_t bytes, uint64_t after = 0) {
    (void)after;
    copy_to_device(dst, host_src, bytes);
  }
  // The same copy straight from pinned host memory (alloc(..., MemKind::PinnedHost)), with no
  // staging copy and no host wait: the source must stay unchanged until wait_upload(ticket)
  // returns. For the offloaded parameters, whose pinned home is already a staging buffer.
  virtual uint64_t upload_pinned_async(void* dst, const void* pinned_src, size_t bytes, uint64_t after = 0) {
    (void)after;
    copy_to_device(dst, pinned_src, bytes);
    return 0;
  }
  virtual void wait_upload(uint64_t ticket) { (void)ticket; }
  virtual MemoryStats memory_stats() const = 0;
  // Bytes this backend could still allocate (CPU: the host's MemAvailable, shared by the ranks on
  // it; CUDA: the device's free memory), for the start-up memory check. SIZE_MAX: unknown.
  virtual size_t memory_available() const { return SIZE_MAX; }
  // [run] device_memory_limit: device allocations beyond `bytes` fail with an out-of-memory error
  // naming the limit, and memory_available() counts it (emulates a smaller device). 0 = none.
  virtual void set_memory_limit(size_t bytes) { (void)bytes; }
  // [offload] pinned_limit: MemKind::PinnedHost allocations beyond `bytes` fail naming the key
  // (one bounded pool of page-locked memory: unbounded pinned buffers exhaust the host). 0 = none.
  virtual void set_pinned_limit(size_t bytes) { (void)bytes; }
};

// ---- the stream of work: its end (synchronize), profiler ranges, timing points
class DeviceStream {
 public:
  virtual ~DeviceStream() = default;
  virtual void synchronize() {}
  // Timing points for the step breakdown: a point after the work enqueued so far (CUDA: a timing
  // event on the compute stream; the base, for backends whose ops are synchronous: the host
  // clock), and the milliseconds between two points once the work has passed both (read after a
  // synchronize(): no synchronization of their own). Points are reused after kTimingPoints.
  static constexpr int kTimingPoints = 256;
  // Named ranges around the step's phases for profilers (CUDA: NVTX, which Nsight Systems shows;
  // nothing on the CPU). Ranges nest; each push has its pop.
  virtual void push_range(const char* name) { (void)name; }
  virtual void pop_range() {}
  virtual int timing_point();
  virtual double timing_ms(int from, int to);
  // The backend's compute stream (cudaStream_t) for device communicators; null on the CPU.
  virtual void* native_stream() const { return nullptr; }

 private:
  int64_t timing_host_ns_[kTimingPoints] = {};  // the base's timing points: host clock
  int timing_next_ = 0;
};

// ---- the ops, their precision, and whether the device runs them
class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual std::string name() const = 0;  // for "not supported" answers
  // ---- precision. Activations and the weights the ops read ("compute" tensors, void* below)
  // are in compute_dtype(); statistics (mean, rstd, lse, losses), weight gradients (which
  // accumulate) and optimizer states are always fp32 (float* below). Maths is fp32 throughout.
  void set_compute_dtype(DType t) { compute_ = t; }
  // Bitwise-reproducible results run to run ([run] deterministic): ops whose reduction order is
  // not fixed (GPU atomics) switch to a fixed order, at some speed. The CPU backend always is.
  void set_deterministic(bool on) { deterministic_ = on; }
  bool deterministic() const { return deterministic_; }
  DType compute_dtype() const { return compute_; }
  size_t compute_size() const { return dtype_size(compute_); }
  // dst (n) = src (n) converted between any two dtypes, in device memory.
  virtual void convert(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) = 0;

  // ---- can it: asked before the run. An op the models will call (its method's name below), in
  // the compute dtype, with the head size for attention. "" when this backend runs it so;
  // otherwise why not. The trainer asks for every op the run needs at start-up (model families
  // declare theirs: ModelFamily::ops), so "not supported" ends a run before its first step with
  // exit status 2. The base answers "not implemented" for every op; a backend lists what it runs.
  struct OpRequest {
    std::string op;
    DType dtype = DType::F32;
    int head_size = 0;  // attention_forward / attention_backward
  };
  virtual std::string supports(const OpRequest& r) const;
  // The ops below, by name (what OpRequest::op may be).
  static const std::vector<std::string>& op_names();
  // The answers of a backend that implements every op (the CPU reference): "" for each known op;
  // and of the CUDA kernels, which take attention head sizes up to 128 only (cuda_limits.h). The planner answers as the backend it plans for.
  static std::string supports_every_op(const OpRequest& r);
  static std::string cuda_kernels_support(const OpRequest& r);

  // ---- ops (shapes as in engine/backend/cpu/ops.h, which documents each one). Optional: an op a
  // backend does not implement answers "op X is not supported on backend Y" (RuntimeFailure);
  // supports() says so first.
  // `pos` (device (B,T) int32, or null): each token's position in its document, for rows packed
  // with several documents (cpu/ops.h): the position embedding's row, RoPE's angle, and the first
  // key a token attends to (t - pos[t]). Null: one document a row. Taken by the embedding, rope and
  // attention ops; the default argument is the base's alone (overrides declare none).
  virtual void embedding_forward(void* out, const int32_t* inp, const void* wte, const void* wpe,
                                 int B, int T, int C, const int32_t* pos = nullptr) { unsupported("embedding_forward"); }
  virtual void embedding_backward(float* dwte, float* dwpe, const void* dout, const int32_t* inp,
                                  int B, int T, int C, const int32_t* pos = nullptr) { unsupported("embedding_backward"); }  // (accumulates)
  virtual void layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                                 const void* weight, const void* bias, int N, int C,
                                 float eps) { unsupported("layernorm_forward"); }
  // Residual add fused with the LayerNorm that follows it: res = a + b; out = layernorm(res).
  virtual void residual_layernorm_forward(void* res, void* out, float* mean, float* rstd,
                                          const void* a, const void* b, const void* weight,
                                          const void* bias, int N, int C, float eps) { unsupported("residual_layernorm_forward"); }
  virtual void layernorm_backward(void* dinp, float* dweight, float* dbias, const void* dout,
                                  const void* inp, const void* weight, const float* mean,
                                  const float* rstd, int N, int C) { unsupported("layernorm_backward"); }  // (accumulates)
  virtual void matmul_forward(void* out, const void* inp, const void* weight, const void* bias,
                              int N, int C, int OC) { unsupported("matmul_forward"); }
  // out = gelu(inp @ weight^T + bias), keeping the pre-activation in `pre` for backward.
  virtual void matmul_gelu_forward(void* out, void* pre, const void* inp, const void* weight,
                                   const void* bias, int N, int C, int OC) { unsupported("matmul_gelu_forward"); }
  // dinp is written; dweight and dbias accumulate (dbias only with dweight). Each part may be left
  // out (null): the input gradient alone (dweight and dbias null; `inp` unread), or the weight
  // gradient alone (dinp null), so that the weight gradient's GEMM runs while the input gradient's
  // reduction is in flight.
  virtual void matmul_backward(void* dinp, float* dweight, float* dbias, const void* dout,
                               const void* inp, const void* weight, int N, int C,
                               int OC) { unsupported("matmul_backward"); }
  // The backward of matmul_forward(gelu(pre)): dpre (N,C) = gelu'(pre) * (dout @ weight), written;
  // dweight and dbias accumulate as in matmul_backward. One fused GEMM where the backend has one;
  // by default matmul_backward and an in-place gelu_backward.
  virtual void matmul_gelu_backward(void* dpre, float* dweight, float* dbias, const void* dout,
                                    const void* inp, const void* weight, const void* pre, int N,
                                    int C, int OC);
  // FP8 linear layers (engine/backend/fp8_recipe.h): as matmul_forward / matmul_backward, each
  // product's operands scaled per tensor and rounded to FP8 (E4M3 input and weight, E5M2 output
  // gradient), accumulated in fp32; dweight (fp32) accumulated, dinp written, dbias (may be null)
  // += column sums of the unquantized dout. `weight_copy` (may be null: the weight is cast here):
  // the weight's FP8 copy that fp8_weight_copy made from `weight` as it is now. Shapes
  // fp8_recipe::applies() refuses run as matmul_forward / matmul_backward (no copy is made for
  // them). The CPU backend computes the recipe as its reference. `weight` may be null where
  // `weight_copy` is given (ZeRO-3 gathered the copy alone): a product that cannot run in FP8 then
  // fails, naming [precision] fp8_all_gather.
  virtual void fp8_weight_copy(void* copy, const void* weight, int OC, int C) { unsupported("fp8_weight_copy"); }
  // A weight's copy cast piece by piece (ZeRO-3's FP8 shards, engine/parallel/param_store.h), with
  // the scale of the whole weight: fp8_amax: amax[0] = max(amax[0], max |x|) over x's n
  // compute-type elements; fp8_cast_with_amax: scales[0] = fp8_recipe::scale_for(amax[0]) (E4M3),
  // scales[1] = its inverse, q (n bytes) = x in E4M3 times that scale. With amax[0] the whole
  // weight's, the pieces' bytes and scales are fp8_weight_copy's (amax and scales: 1 and 2 floats
  // in device memory).
  virtual void fp8_amax(float* amax, const void* x, int64_t n) { unsupported("fp8_amax"); }
  virtual void fp8_cast_with_amax(void* q, float* scales, const void* x, int64_t n, const float* amax) {
    unsupported("fp8_cast_with_amax");
  }
  virtual void matmul_forward_fp8(void* out, const void* inp, const void* weight, const void* bias, int N, int C,
                                  int OC, const void* weight_copy) { unsupported("matmul_forward_fp8"); }
  virtual void matmul_backward_fp8(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                                   const void* weight, int N, int C, int OC, const void* weight_copy) {
    unsupported("matmul_backward_fp8");
  }
  // Grouped-query attention: qkv (B,T,(NH + 2 NKV) hs) holds NH query heads then NKV key and NKV
  // value heads (NKV = NH: multi-head, qkv (B,T,3C)); C = NH hs.
  virtual void attention_forward(void* out, float* lse, const void* qkv, int B, int T, int C, int NH,
                                 int NKV, const int32_t* pos = nullptr) { unsupported("attention_forward"); }
  // `out` is the forward's output (the GPU kernel takes rowsum(dout * out) from it; the CPU
  // reference recomputes it).
  virtual void attention_backward(void* dqkv, const void* dout, const void* out, const void* qkv,
                                  const float* lse, int B, int T, int C, int NH, int NKV,
                                  const int32_t* pos = nullptr) { unsupported("attention_backward"); }  // (dqkv written)
  virtual void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                               float eps) { unsupported("rmsnorm_forward"); }
  // Residual add fused with the RMSNorm that follows it: res = a + b; out = rmsnorm(res).
  virtual void residual_rmsnorm_forward(void* res, void* out, float* rstd, const void* a, const void* b,
                                        const void* weight, int N, int C,
                                        float eps) { unsupported("residual_rmsnorm_forward"); }
  virtual void rmsnorm_backward(void* dinp, float* dweight, const void* dout, const void* inp,
                                const void* weight, const float* rstd, int N,
                                int C) { unsupported("rmsnorm_backward"); }  // (accumulates)
  // RMSNorm of each attention head (Qwen3's q_norm and k_norm): the first `heads` heads of hs
  // channels of each of N rows `stride` elements apart (the q or k heads of the packed qkv), one
  // weight (hs) for all of them; rstd (N, heads). out has inp's layout and may be inp (in place);
  // the elements after the heads are left alone.
  virtual void head_rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int64_t N,
                                    int heads, int hs, int64_t stride,
                                    float eps) { unsupported("head_rmsnorm_forward"); }
  // Its backward over the same layout: dinp written (it may be dout: in place), dweight accumulates.
  virtual void head_rmsnorm_backward(void* dinp, float* dweight, const void* dout, const void* inp,
                                     const void* weight, const float* rstd, int64_t N, int heads, int hs,
                                     int64_t stride) { unsupported("head_rmsnorm_backward"); }
  // Rotary embedding in place (forward; inverse = true: its backward), see cpu/ops.h; `scaling`:
  // Llama 3.1's frequency rule (rope_scaling.h), plain RoPE by default.
  virtual void rope(void* x, int B, int T, int n_heads, int hs, int64_t stride, float theta,
                    bool inverse, const int32_t* pos = nullptr, const RopeScaling& scaling = {}) { unsupported("rope"); }
  virtual void swiglu_forward(void* out, const void* inp, int64_t N, int F) { unsupported("swiglu_forward"); }
  virtual void swiglu_backward(void* dinp, const void* inp, const void* dout, int64_t N,
                               int F) { unsupported("swiglu_backward"); }  // (dinp written)
  // out (n) = gelu(inp) (the tanh approximation); out may not be inp. matmul_gelu_forward's
  // second half, for a pre-activation something else adds to first (an adapter's update).
  virtual void gelu_forward(void* out, const void* inp, int64_t n) { unsupported("gelu_forward"); }
  // dinp (n) = gelu'(inp) * dout, written; dinp may be dout (in place).
  virtual void gelu_backward(void* dinp, const void* inp, const void* dout,
                             int64_t n) { unsupported("gelu_backward"); }
  // The loss over logits (N, V), see cpu/ops.h: columns [Vr, V) of each row are padding, left
  // out of the softmax, their gradient written 0; a negative target carries no loss (loss 0,
  // gradient row 0).
  virtual void softmax_crossentropy(float* losses, void* logits, const int32_t* targets, int N, int V, int Vr,
                                    float grad_scale) { unsupported("softmax_crossentropy"); }
  virtual void logits_row_max(float* out_max, const void* logits, int N, int V, int Vr) { unsupported("logits_row_max"); }
  virtual void logits_row_sumexp(float* out_sum, const void* logits, const float* row_max, int N, int V,
                                 int Vr) { unsupported("logits_row_sumexp"); }
  virtual void logits_pick_target(float* out, const void* logits, const int32_t* targets, int N,
                                  int V, int v0) { unsupported("logits_pick_target"); }
  virtual void crossentropy_grad_from_lse(void* logits, const float* lse, const int32_t* targets, int N, int V,
                                          int Vr, int v0, float grad_scale) { unsupported("crossentropy_grad_from_lse"); }
  // y (rows N, ldy apart) += alpha * x (rows N, ldx apart), the first C elements of each row, in
  // the compute dtype (fp32 maths): a low-rank adapter's output added into its base layer's (a
  // column slice of a packed [q | k | v]), its input gradient into the base's. x may not overlap y.
  virtual void add_rows_scaled(void* y, int64_t ldy, const void* x, int64_t ldx, int64_t N, int C,
                               float alpha) { unsupported("add_rows_scaled"); }
  // Dropout by a counter-based mask (LoRA's dropout on an adapter's input, and its backward): out
  // (N rows, ld apart, the first C of each) = in (same layout) x keep / (1 - p), keep drawn for
  // element (n, c) from Philox (engine/core/philox.h: dropout_keeps) with stream `key` at index
  // (row0 + n) * cols + col0 + c: the element's place in the full (global rows, cols) tensor, so
  // the mask is the same whatever the layout computes it and when it is drawn again; out may be in.
  virtual void dropout(void* out, const void* in, int64_t N, int C, int64_t ld, float p, uint64_t key, uint64_t row0,
                       int64_t cols, int64_t col0) { unsupported("dropout"); }
  // fp32 helpers for gradients and optimizer states.
  virtual void add(float* out, const float* a, const float* b, int64_t n) { unsupported("add"); }
  virtual void scale(float* x, float s, int64_t n) { unsupported("scale"); }
  // Device-side accumulation, no host synchronization (one copy_to_host reads the result):
  // acc (1 double, device memory) += sum of x^2, or += scale * sum of x. Fixed summation order;
  // inf/NaN propagate.
  virtual void sum_squares_accumulate(double* acc, const float* x, int64_t n) { unsupported("sum_squares_accumulate"); }
  virtual void sum_accumulate(double* acc, const float* x, int64_t n, double scale) { unsupported("sum_accumulate"); }
  // AdamW on fp32 masters; when params_compute is not null it receives the updated parameters
  // in compute_dtype() in the same pass (no separate cast kernel).
  virtual void adamw_update(float* params, const float* grads, float* m, float* v,
                            void* params_compute, int64_t n, float lr, float beta1, float beta2,
                            float eps, float weight_decay, int t) { unsupported("adamw_update"); }

 protected:
  [[noreturn]] void unsupported(const char* op) const;

 private:
  DType compute_ = DType::F32;
  bool deterministic_ = false;
};

class Backend : public DeviceMemory, public DeviceStream, public DeviceOps {
 public:
  ~Backend() override = default;
  virtual DeviceKind kind() const = 0;
  std::string name() const override = 0;
  // The GPU's PCI bus id ("0000:3B:00.0"), to find it in NVML; "" for the CPU.
  virtual std::string pci_bus_id() const { return ""; }
  // The backend for host-side work on this backend's pinned host memory (optimizer offload): a
  // CPU backend; the planner's counting backend returns another counting one.
  virtual std::unique_ptr<Backend> make_host_backend(int threads) const;
};

// The CPU backend; `threads` <= 0 means all cores. Sets OpenMP and OpenBLAS thread counts.
std::unique_ptr<Backend> make_cpu_backend(int threads);

// Number of visible CUDA devices (0 when built without CUDA or when no driver/GPU is present).
int cuda_device_count();

// Resolves [run] device to a backend; logs the choice. CUDA uses GPU local_rank % visible GPUs.
std::unique_ptr<Backend> make_backend(DeviceChoice device, int threads, int local_rank = 0);

}  // namespace zt
