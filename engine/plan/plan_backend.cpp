// PlanBackend (see plan_backend.h): the books of the real allocations, and each op's FLOPs and
// bytes (every operand read once, every result written once; accumulating outputs read too).
#include "engine/plan/plan_backend.h"

#include <algorithm>
#include <cstring>

#include "engine/backend/cuda_scratch.h"
#include "engine/backend/fp8_recipe.h"
#include "engine/core/status.h"

namespace zt {

PlanBackend::PlanBackend(DeviceKind kind) : kind_(kind) {
  // the CUDA backend's start-up allocation: the sum ops' partials (engine/backend/cuda_scratch.h)
  if (kind_ == DeviceKind::CUDA) alloc(cuda_scratch::sum_partials_bytes(), MemTag::Other, MemKind::Device);
}

void* PlanBackend::alloc(size_t bytes, MemTag tag, MemKind kind) {
  // the real backends' rounding: CPU 64 bytes (aligned_alloc); CUDA the caching allocator's size
  // classes (engine/backend/cuda/allocator.cu: 512 B steps below 1 MiB, 2 MiB steps above)
  const size_t unit = kind_ == DeviceKind::CPU ? 64 : bytes < (size_t(1) << 20) ? 512 : size_t(2) << 20;
  const size_t rounded = (std::max<size_t>(bytes, kind_ == DeviceKind::CPU ? 0 : 1) + unit - 1) / unit * unit;
  const uintptr_t p = next_;
  next_ += std::max<size_t>(rounded, unit) + 4096;
  blocks_[p] = {rounded, tag, kind};
  if (kind == MemKind::PinnedHost) {
    stats_.pinned_host += rounded;
  } else {
    stats_.allocated += rounded;
    stats_.peak = std::max(stats_.peak, stats_.allocated);
    stats_.n_allocs++;
    stats_.by_tag[size_t(tag)] += rounded;
    stats_.peak_by_tag[size_t(tag)] = std::max(stats_.peak_by_tag[size_t(tag)], stats_.by_tag[size_t(tag)]);
    stats_.reserved = std::max(stats_.reserved, stats_.allocated);
  }
  return reinterpret_cast<void*>(p);
}

void PlanBackend::free(void* ptr) {
  if (!ptr) return;
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  ZT_CHECK(it != blocks_.end(), "plan: free of an unknown pointer");
  const Block b = it->second;
  blocks_.erase(it);
  if (b.kind == MemKind::PinnedHost) {
    stats_.pinned_host -= b.bytes;
    return;
  }
  stats_.allocated -= b.bytes;
  stats_.n_allocs--;
  stats_.by_tag[size_t(b.tag)] -= b.bytes;
}

void PlanBackend::copy_to_host(void* host_dst, const void*, size_t bytes) {
  // losses and norms read back as 0: finite, the step goes on; a destination this backend handed
  // out (pinned host memory of an offloaded state) exists only in the books. Bulk reads (a
  // gradient unit on its way to the host) carry no value a plan uses: zeroing them would cost
  // seconds of memset per step of a large model, at every start-up's memory check.
  const uintptr_t d = reinterpret_cast<uintptr_t>(host_dst);
  auto it = blocks_.upper_bound(d);
  const bool ours = it != blocks_.begin() && d < (--it)->first + std::max<size_t>(it->second.bytes, 1) + 4096;
  constexpr size_t kValueBytes = size_t(1) << 20;  // the largest read whose values the step uses (losses of a batch)
  if (!ours) std::memset(host_dst, 0, std::min(bytes, kValueBytes));
  count(0, double(bytes));
}

void PlanBackend::count(double flops, double bytes, bool matrix, const char* op) {
  ops_called_.insert(op);
  (matrix ? work_.matrix_flops : work_.other_flops) += flops;
  work_.bytes += bytes;
  ops_.push_back({flops, bytes, matrix, op});
}

int64_t PlanBackend::record_collective(CollectiveKind kind, const std::string& group, int size, int stride,
                                       double bytes) {
  collectives_.push_back({kind, group, size, stride, bytes, ops_.size(), -1, events_++, 0});
  return int64_t(collectives_.size());  // handles from 1: 0 is no collective
}

void PlanBackend::record_wait(int64_t handle) {
  if (handle < 1 || size_t(handle) > collectives_.size()) return;  // issued before reset_work()
  Collective& c = collectives_[size_t(handle - 1)];
  if (c.waited_at < 0) c.waited_at = int64_t(ops_.size()), c.wait_seq = events_++;
}

double PlanBackend::roofline_seconds(double tflops, double vector_tflops, double bytes_per_s,
                                     double fp8_tflops) const {
  double s = 0;
  for (const Op& op : ops_) {
    const double peak = !op.matrix ? vector_tflops : op.fp8 && fp8_tflops > 0 ? fp8_tflops : tflops;
    s += std::max(op.flops / (peak * 1e12), op.bytes / bytes_per_s);
  }
  return s;
}

void PlanBackend::embedding_forward(void*, const int32_t*, const void*, const void*, int B, int T, int C,
                                    const int32_t*) {
  const double n = double(B) * T * C;
  count(n, n * double(2 * es() + es()));
}
void PlanBackend::embedding_backward(float*, float*, const void*, const int32_t*, int B, int T, int C,
                                     const int32_t*) {
  cuda_scratch_for(cuda_scratch::embedding_backward(int64_t(B) * T, deterministic()));
  const double n = double(B) * T * C;
  count(n, n * double(es() + 2 * 4 + 2 * 4));
}
void PlanBackend::layernorm_forward(void*, float*, float*, const void*, const void*, const void*, int N, int C,
                                    float) {
  const double n = double(N) * C;
  count(8 * n, n * double(2 * es()) + 8.0 * N);
}
void PlanBackend::residual_layernorm_forward(void*, void*, float*, float*, const void*, const void*, const void*,
                                             const void*, int N, int C, float) {
  const double n = double(N) * C;
  count(9 * n, n * double(4 * es()) + 8.0 * N);
}
void PlanBackend::layernorm_backward(void*, float*, float*, const void*, const void*, const void*, const float*,
                                     const float*, int N, int C) {
  cuda_scratch_for(cuda_scratch::layernorm_backward(C));
  const double n = double(N) * C;
  count(12 * n, n * double(4 * es()) + 8.0 * N + 16.0 * C);
}
void PlanBackend::matmul_forward(void*, const void*, const void*, const void* bias, int N, int C, int OC) {
  count(2.0 * N * C * OC, double(es()) * (double(N) * C + double(OC) * C + double(N) * OC + (bias ? OC : 0)), true);
}
void PlanBackend::matmul_gelu_forward(void*, void*, const void*, const void*, const void*, int N, int C, int OC) {
  count(2.0 * N * C * OC, double(es()) * (double(N) * C + double(OC) * C + 2.0 * N * OC + OC), true);
}
void PlanBackend::matmul_backward(void* dinp, float* dweight, float* dbias, const void*, const void*, const void*,
                                  int N, int C, int OC) {
  // dinp = dout W (written), dweight += dout^T inp in fp32, dbias += column sums (in the weight
  // GEMM): one op when both are asked for, each its own when asked apart (the step then runs
  // collectives between them)
  const double dx_bytes = double(es()) * (double(N) * OC + double(OC) * C + double(N) * C);
  const double dw_bytes = double(es()) * (double(N) * OC + double(N) * C) + 8.0 * OC * C + (dbias ? 8.0 * OC : 0);
  if (dweight) {
    cuda_scratch_for(cuda_scratch::matmul_backward(OC, dbias != nullptr));
    autotune_scratch(N, C, OC, dbias ? Timed::Bgradb : Timed::Plain);
  }
  if (dinp && dweight) return count(4.0 * N * C * OC, dx_bytes + dw_bytes, true);
  if (dinp) count(2.0 * N * C * OC, dx_bytes, true);
  if (dweight) count(2.0 * N * C * OC, dw_bytes, true);
}
// FP8 linear layers (cuda/fp8_linear.cu): the scales' and FP8 copies' scratch; each operand's
// cast (its amax pass reads it, the cast reads it again and writes 1-byte copies: memory-bound)
// and the products on FP8 tensor cores, reading 1-byte operands. Shapes the recipe refuses run as
// the compute type's.
void PlanBackend::count_fp8_cast(double elements, int copies, const char* op) {
  count(4.0 * elements, elements * (2.0 * double(es()) + copies), false, op);
}
void PlanBackend::count_fp8_product(double flops, double bytes, const char* op) {
  count(flops, bytes, true, op);
  ops_.back().fp8 = true;
}
void PlanBackend::fp8_weight_copy(void*, const void*, int OC, int C) {
  cuda_scratch_for(cuda_scratch::fp8_weight_copy());
  count_fp8_cast(double(OC) * C, 1, "fp8_weight_copy");
}
// ZeRO-3's FP8 shards: the amax pass reads the shard, the cast reads it again and writes bytes
void PlanBackend::fp8_amax(float*, const void*, int64_t n) {
  cuda_scratch_for(cuda_scratch::fp8_amax());
  count(double(n), double(n) * double(es()), false, "fp8_amax");
}
void PlanBackend::fp8_cast_with_amax(void*, float*, const void*, int64_t n, const float*) {
  count(3.0 * double(n), double(n) * (double(es()) + 1.0), false, "fp8_cast_with_amax");
}
void PlanBackend::matmul_forward_fp8(void* out, const void* inp, const void* w, const void* bias, int N, int C, int OC,
                                     const void* w_copy) {
  if (!fp8_recipe::applies(N, C, OC)) return matmul_forward(out, inp, w, bias, N, C, OC);
  const char* op = "matmul_forward_fp8";
  cuda_scratch_for(cuda_scratch::matmul_forward_fp8(N, C, OC));
  count_fp8_cast(double(N) * C, 1, op);
  if (!w_copy) count_fp8_cast(double(OC) * C, 1, op);
  count_fp8_product(2.0 * N * C * OC, double(N) * C + double(OC) * C + double(es()) * (double(N) * OC + (bias ? OC : 0)),
                    op);
}
void PlanBackend::matmul_backward_fp8(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                                      const void* w, int N, int C, int OC, const void* w_copy) {
  if (!fp8_recipe::applies(N, C, OC)) return matmul_backward(dinp, dweight, dbias, dout, inp, w, N, C, OC);
  const char* op = "matmul_backward_fp8";
  cuda_scratch_for(cuda_scratch::matmul_backward_fp8(N, C, OC, dbias != nullptr));
  count_fp8_cast(double(N) * OC, (dinp ? 1 : 0) + (dweight ? 1 : 0), op);  // dy, and its transpose
  if (dinp) {
    if (w_copy) count(0, 2.0 * OC * C, false, op);  // the copy's bytes transposed
    else count_fp8_cast(double(OC) * C, 1, op);     // w^T
    count_fp8_product(2.0 * N * C * OC, double(OC) * C + double(N) * OC + double(es()) * N * C, op);
  }
  if (dweight) {
    autotune_scratch(N, C, OC, Timed::Fp8);  // no BGRADB epilogue in FP8: the bias gradient is a column sum
    count_fp8_cast(double(N) * C, 1, op);  // x^T
    count_fp8_product(2.0 * N * C * OC, double(N) * C + double(N) * OC + 8.0 * OC * C, op);
    if (dbias) count(double(N) * OC, double(es()) * N * OC + 8.0 * OC, false, op);  // column sums of dy
  }
}
void PlanBackend::matmul_gelu_backward(void*, float*, float* dbias, const void*, const void*, const void*,
                                       const void*, int N, int C, int OC) {
  // as matmul_backward, with gelu'(pre) applied as dinp is written: one more read (pre), no pass
  cuda_scratch_for(cuda_scratch::matmul_backward(OC, dbias != nullptr));
  autotune_scratch(N, C, OC, dbias ? Timed::Bgradb : Timed::Plain);
  count(4.0 * N * C * OC + 12.0 * N * C,
        double(es()) * (2.0 * N * OC + double(OC) * C + 3.0 * N * C) + 8.0 * OC * C + (dbias ? 8.0 * OC : 0), true);
}
void PlanBackend::attention_forward(void*, float*, const void*, int B, int T, int C, int NH, int NKV,
                                    const int32_t*) {
  cuda_scratch_for(cuda_scratch::attention_forward());
  // causal: half of QK^T and of PV
  const double qkv = double(B) * T * C * (1.0 + 2.0 * NKV / NH);
  count(2.0 * B * double(T) * T * C, double(es()) * (qkv + double(B) * T * C) + 4.0 * B * NH * T, true);
  ops_.back().head_size = C / NH, ops_.back().seq_len = T;
}
void PlanBackend::cuda_scratch_for(int64_t floats) {
  if (kind_ != DeviceKind::CUDA) return;  // the CPU backend's ops need no device scratch
  const size_t bytes = size_t(floats) * sizeof(float);
  if (bytes <= scratch_bytes_) return;
  free(scratch_);
  scratch_ = alloc(bytes, MemTag::Other, MemKind::Device);
  scratch_bytes_ = bytes;
}

void PlanBackend::autotune_scratch(int N, int C, int OC, Timed what) {
  if (kind_ != DeviceKind::CUDA || deterministic() || !timed_.insert({N, C, OC, what}).second) return;
  if (what == Timed::Bgradb) timed_.insert({N, C, OC, Timed::Plain});  // Gemm::bgradb_pays times it too
  // the weight gradient's algorithms timed into a scratch (C, OC) output; with BGRADB, then the
  // epilogue against the column sums into that and a scratch bias gradient (Gemm::bgradb_pays):
  // the largest of those transient allocations
  const bool bias = what == Timed::Bgradb;
  free(alloc((size_t(C) + (bias ? 1 : 0)) * size_t(OC) * sizeof(float), MemTag::Other, MemKind::Device));
}

void PlanBackend::attention_backward(void*, const void*, const void*, const void*, const float*, int B, int T,
                                     int C, int NH, int NKV, const int32_t*) {
  cuda_scratch_for(cuda_scratch::attention_backward(B, T, C, NH, es(), deterministic()));
  const double qkv = double(B) * T * C * (1.0 + 2.0 * NKV / NH);
  count(5.0 * B * double(T) * T * C, double(es()) * (qkv * 2 + 2.0 * B * T * C) + 4.0 * B * NH * T, true);
  ops_.back().head_size = C / NH, ops_.back().seq_len = T;
}
void PlanBackend::rmsnorm_forward(void*, float*, const void*, const void*, int N, int C, float) {
  const double n = double(N) * C;
  count(4 * n, n * double(2 * es()) + 4.0 * N);
}
void PlanBackend::residual_rmsnorm_forward(void*, void*, float*, const void*, const void*, const void*, int N, int C,
                                           float) {
  const double n = double(N) * C;
  count(5 * n, n * double(4 * es()) + 4.0 * N);
}
void PlanBackend::rmsnorm_backward(void*, float*, const void*, const void*, const void*, const float*, int N, int C) {
  cuda_scratch_for(cuda_scratch::rmsnorm_backward(C));
  const double n = double(N) * C;
  count(8 * n, n * double(4 * es()) + 4.0 * N + 8.0 * C);
}
void PlanBackend::head_rmsnorm_forward(void*, float*, const void*, const void*, int64_t N, int heads, int hs, int64_t,
                                       float) {
  const double n = double(N) * heads * hs;  // the plain norm's work on N x heads rows
  count(4 * n, n * double(2 * es()) + 4.0 * N * heads);
}
void PlanBackend::head_rmsnorm_backward(void*, float*, const void*, const void*, const void*, const float*, int64_t N,
                                        int heads, int hs, int64_t) {
  cuda_scratch_for(cuda_scratch::rmsnorm_backward(hs));
  const double n = double(N) * heads * hs;
  count(8 * n, n * double(3 * es()) + 4.0 * N * heads + 8.0 * hs);  // written in place: dout read, dinp written
}
void PlanBackend::rope(void*, int B, int T, int n_heads, int hs, int64_t, float, bool, const int32_t*,
                       const RopeScaling&) {
  const double n = double(B) * T * n_heads * hs;
  count(3 * n, n * double(2 * es()));
}
void PlanBackend::swiglu_forward(void*, const void*, int64_t N, int F) {
  const double n = double(N) * F;
  count(6 * n, n * double(3 * es()));
}
void PlanBackend::swiglu_backward(void*, const void*, const void*, int64_t N, int F) {
  const double n = double(N) * F;
  count(12 * n, n * double(7 * es()));
}
void PlanBackend::gelu_backward(void*, const void*, const void*, int64_t n) { count(12.0 * double(n), 4.0 * double(n) * double(es())); }
void PlanBackend::softmax_crossentropy(float*, void*, const int32_t*, int N, int V, int, float) {
  const double n = double(N) * V;
  count(6 * n, n * double(3 * es()) + 8.0 * N);
}
void PlanBackend::logits_row_max(float*, const void*, int N, int V, int) { count(double(N) * V, double(N) * V * double(es())); }
void PlanBackend::logits_row_sumexp(float*, const void*, const float*, int N, int V, int) {
  count(3.0 * N * V, double(N) * V * double(es()));
}
void PlanBackend::logits_pick_target(float*, const void*, const int32_t*, int N, int, int) { count(0, 12.0 * N); }
void PlanBackend::crossentropy_grad_from_lse(void*, const float*, const int32_t*, int N, int V, int, int, float) {
  count(4.0 * N * V, 2.0 * N * V * double(es()));
}
void PlanBackend::adamw_update(float*, const float*, float*, float*, void* pc, int64_t n, float, float, float, float,
                               float, int) {
  // read params, grads, m, v; write params, m, v (and the compute copy)
  count(12.0 * double(n), double(n) * (7 * 4 + (pc ? double(es()) : 0)));
}

}  // namespace zt
