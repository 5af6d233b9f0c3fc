// A backend that runs nothing: it hands out addresses no one may touch and keeps the books. The
// planner builds the real model, ZeRO states and optimizer on it and runs one real training step,
// so its memory figures come from the code that allocates, not from a second formula. Each op
// also counts the FLOPs it would do and the bytes it would move, for a roofline estimate of the
// step time.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/plan/collective_cost.h"

namespace zt {

class PlanBackend final : public Backend {
 public:
  // `kind`: the backend the plan is for (CPU: 64-byte rounding as the CPU backend; CUDA: the
  // caching allocator's size classes).
  explicit PlanBackend(DeviceKind kind);
  DeviceKind kind() const override { return kind_; }
  std::string name() const override { return "plan"; }
  std::string supports(const OpRequest& r) const override {
    return kind_ == DeviceKind::CUDA ? cuda_kernels_support(r) : supports_every_op(r);
  }
  std::unique_ptr<Backend> make_host_backend(int) const override { return std::make_unique<PlanBackend>(DeviceKind::CPU); }

  void* alloc(size_t bytes, MemTag tag, MemKind kind) override;
  void free(void* ptr) override;
  void copy_to_device(void*, const void*, size_t) override {}
  void copy_to_host(void* host_dst, const void*, size_t bytes) override;  // zeros
  void copy_device(void*, const void*, size_t bytes) override { count(0, 2.0 * double(bytes)); }
  void fill_zero(void*, size_t bytes) override { count(0, double(bytes)); }
  MemoryStats memory_stats() const override { return stats_; }
  void convert(void*, DType dt, const void*, DType st, int64_t n) override {
    count(0, double(n) * double(dtype_size(dt) + dtype_size(st)));
  }

  void embedding_forward(void*, const int32_t*, const void*, const void*, int B, int T, int C,
                         const int32_t*) override;
  void embedding_backward(float*, float*, const void*, const int32_t*, int B, int T, int C, const int32_t*) override;
  void layernorm_forward(void*, float*, float*, const void*, const void*, const void*, int N, int C, float) override;
  void residual_layernorm_forward(void*, void*, float*, float*, const void*, const void*, const void*, const void*,
                                  int N, int C, float) override;
  void layernorm_backward(void*, float*, float*, const void*, const void*, const void*, const float*, const float*,
                          int N, int C) override;
  void matmul_forward(void*, const void*, const void*, const void*, int N, int C, int OC) override;
  void matmul_gelu_forward(void*, void*, const void*, const void*, const void*, int N, int C, int OC) override;
  void matmul_backward(void*, float*, float*, const void*, const void*, const void*, int N, int C, int OC) override;
  void fp8_weight_copy(void*, const void*, int OC, int C) override;
  void fp8_amax(float*, const void*, int64_t n) override;
  void fp8_cast_with_amax(void*, float*, const void*, int64_t n, const float*) override;
  void matmul_forward_fp8(void*, const void*, const void*, const void*, int N, int C, int OC, const void* w_copy) override;
  void matmul_backward_fp8(void*, float*, float*, const void*, const void*, const void*, int N, int C, int OC,
                           const void* w_copy) override;
  void matmul_gelu_backward(void* dpre, float* dweight, float* dbias, const void* dout, const void* inp,
                            const void* weight, const void* pre, int N, int C, int OC) override;
  // Attention is priced causal over whole rows: packed documents (positions) cost less, never more.
  void attention_forward(void*, float*, const void*, int B, int T, int C, int NH, int NKV, const int32_t*) override;
  void attention_backward(void*, const void*, const void*, const void*, const float*, int B, int T, int C,
                          int NH, int NKV, const int32_t*) override;
  void rmsnorm_forward(void*, float*, const void*, const void*, int N, int C, float) override;
  void residual_rmsnorm_forward(void*, void*, float*, const void*, const void*, const void*, int N, int C,
                                float) override;
  void rmsnorm_backward(void*, float*, const void*, const void*, const void*, const float*, int N, int C) override;
  void head_rmsnorm_forward(void*, float*, const void*, const void*, int64_t N, int heads, int hs, int64_t,
                            float) override;
  void head_rmsnorm_backward(void*, float*, const void*, const void*, const void*, const float*, int64_t N, int heads,
                             int hs, int64_t) override;
  void rope(void*, int B, int T, int n_heads, int hs, int64_t, float, bool, const int32_t*,
            const RopeScaling&) override;
  void swiglu_forward(void*, const void*, int64_t N, int F) override;
  void swiglu_backward(void*, const void*, const void*, int64_t N, int F) override;
  void gelu_backward(void*, const void*, const void*, int64_t n) override;
  void gelu_forward(void*, const void*, int64_t n) override { count(8.0 * double(n), 2.0 * double(n) * double(es())); }
  void dropout(void*, const void*, int64_t N, int C, int64_t, float, uint64_t, uint64_t, int64_t, int64_t) override {
    count(40.0 * double(N) * C, 2.0 * double(N) * C * double(es()));  // Philox's 10 rounds an element; read, write
  }
  void add_rows_scaled(void*, int64_t, const void*, int64_t, int64_t N, int C, float) override {
    count(2.0 * double(N) * C, 3.0 * double(N) * C * double(es()));  // read y and x, write y
  }
  void softmax_crossentropy(float*, void*, const int32_t*, int N, int V, int Vr, float) override;
  void logits_row_max(float*, const void*, int N, int V, int Vr) override;
  void logits_row_sumexp(float*, const void*, const float*, int N, int V, int Vr) override;
  void logits_pick_target(float*, const void*, const int32_t*, int N, int V, int) override;
  void crossentropy_grad_from_lse(void*, const float*, const int32_t*, int N, int V, int Vr, int, float) override;
  void add(float*, const float*, const float*, int64_t n) override { count(double(n), 12.0 * double(n)); }
  void scale(float*, float, int64_t n) override { count(double(n), 8.0 * double(n)); }
  void sum_squares_accumulate(double*, const float*, int64_t n) override { count(2.0 * double(n), 4.0 * double(n)); }
  void sum_accumulate(double*, const float*, int64_t n, double) override { count(2.0 * double(n), 4.0 * double(n)); }
  void adamw_update(float*, const float*, float*, float*, void* pc, int64_t n, float, float, float, float, float,
                    int) override;

  // What the ops since construction would have done: matrix FLOPs (tensor cores), other FLOPs,
  // bytes moved through device memory, and the roofline time on a device of `tflops` (matrix),
  // `vector_tflops` and `bytes_per_s`: each op takes the longer of its arithmetic and its memory
  // time, and the ops run one after another.
  struct Work {
    double matrix_flops = 0, other_flops = 0, bytes = 0;
  };
  Work work() const { return work_; }
  // Every op called so far, by name (what Backend::OpRequest::op says): a run must have asked for
  // each of them before it started (tests/unit/plan/test_plan.cpp).
  const std::set<std::string>& ops_called() const { return ops_called_; }
  void reset_work() { work_ = {}, ops_.clear(), collectives_.clear(); }
  // (FP8 products at `fp8_tflops` where it is > 0)
  double roofline_seconds(double tflops, double vector_tflops, double bytes_per_s, double fp8_tflops = 0) const;

  // The step as a device would run it (engine/plan/step_time.h prices it): its ops in order, and
  // the collectives the plan's communicators were asked for (planned_job.h), each with the ops
  // issued before it was and before it was first waited for: the engine's own overlap, recorded.
  struct Op {
    double flops, bytes;
    bool matrix;
    const char* name;  // the op: "matmul_forward", "attention_backward", ...
    int head_size = 0, seq_len = 0;  // attention: its shape (kernels' efficiency depends on it)
    bool fp8 = false;  // a matrix product on FP8 tensor cores (its peak: DeviceSpec::fp8_tflops)
  };
  struct Collective {
    CollectiveKind kind;
    std::string group;  // "tp", "dp", "world"
    int size = 1, stride = 1;  // ranks, and the rank distance between members
    double bytes = 0;          // nccl-tests' size S
    size_t issued_at = 0;      // ops before it
    int64_t waited_at = -1;    // ops before the first wait for it; -1: the step's end
    uint64_t issue_seq = 0, wait_seq = 0;  // the order of issues and waits between the same two ops
  };
  const std::vector<Op>& ops() const { return ops_; }
  const std::vector<Collective>& collectives() const { return collectives_; }
  // What a plan communicator reports: a collective issued now (its handle), and a wait for one.
  int64_t record_collective(CollectiveKind kind, const std::string& group, int size, int stride, double bytes);
  void record_wait(int64_t handle);

 private:
  // Each op counts its work here; `op` is the calling op's name (GCC's and Clang's builtin).
  void count(double flops, double bytes, bool matrix = false, const char* op = __builtin_FUNCTION());
  size_t es() const { return compute_size(); }
  // an FP8 linear layer's operand cast to FP8 (`copies`: 1-byte copies written) and its product
  void count_fp8_cast(double elements, int copies, const char* op);
  void count_fp8_product(double flops, double bytes, const char* op);
  // planning for CUDA: the backend's one scratch buffer, which grows to the largest op's need
  // (engine/backend/cuda_scratch.h, the backend's own sizes) and stays; nothing on the CPU
  void cuda_scratch_for(int64_t floats);
  // the CUDA GEMMs' choice by measurement: the first weight-gradient GEMM of each shape is timed
  // into a scratch copy of its fp32 output, taken and given back at once (matmul.cu, fastest and
  // bgradb_pays)
  // Which weight-gradient GEMM the real autotune times (Gemm's plans, by types and epilogue): a plain
  // accumulating one, one with the BGRADB epilogue (which also times the plain one), an FP8 one.
  enum class Timed { Plain, Bgradb, Fp8 };
  void autotune_scratch(int N, int C, int OC, Timed what);

  DeviceKind kind_;
  MemoryStats stats_;
  struct Block {
    size_t bytes;
    MemTag tag;
    MemKind kind;
  };
  std::map<uintptr_t, Block> blocks_;
  uintptr_t next_ = uintptr_t(1) << 40;  // never dereferenced: outside any mapping
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  std::set<std::tuple<int, int, int, Timed>> timed_;  // the GEMMs autotune_scratch has timed
  std::set<std::string> ops_called_;
  Work work_;
  std::vector<Op> ops_;
  std::vector<Collective> collectives_;
  uint64_t events_ = 0;  // issues and waits recorded, for their order
};

}  // namespace zt
