// What every backend shares: memory tag names and the answer for an op a backend lacks (in
// ztrain_base: the CUDA plugin uses them too).
#include "engine/backend/backend.h"

#include <algorithm>
#include <chrono>

#include "engine/backend/cuda_limits.h"
#include "engine/core/status.h"

namespace zt {

DType compute_dtype_of(PrecisionChoice c, DeviceKind kind) {
  switch (c) {
    case PrecisionChoice::Auto: return kind == DeviceKind::CUDA ? DType::BF16 : DType::F32;
    case PrecisionChoice::Bf16: return DType::BF16;
    case PrecisionChoice::Fp16: return DType::F16;
    case PrecisionChoice::Fp32: break;
  }
  return DType::F32;
}

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

int DeviceStream::timing_point() {
  const int id = timing_next_;
  timing_next_ = (timing_next_ + 1) % kTimingPoints;
  timing_host_ns_[id] = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch()).count();
  return id;
}

double DeviceStream::timing_ms(int from, int to) { return double(timing_host_ns_[to] - timing_host_ns_[from]) / 1e6; }

void DeviceOps::matmul_gelu_backward(void* dpre, float* dweight, float* dbias, const void* dout, const void* inp,
                                   const void* weight, const void* pre, int N, int C, int OC) {
  matmul_backward(dpre, dweight, dbias, dout, inp, weight, N, C, OC);
  gelu_backward(dpre, pre, dpre, int64_t(N) * C);
}

const std::vector<std::string>& DeviceOps::op_names() {
  static const std::vector<std::string> names = {
      "embedding_forward", "embedding_backward", "layernorm_forward", "residual_layernorm_forward",
      "layernorm_backward", "matmul_forward", "matmul_gelu_forward", "matmul_backward", "matmul_gelu_backward",
      "fp8_weight_copy", "fp8_amax", "fp8_cast_with_amax", "matmul_forward_fp8", "matmul_backward_fp8",
      "attention_forward", "attention_backward", "rmsnorm_forward", "residual_rmsnorm_forward", "rmsnorm_backward",
      "head_rmsnorm_forward", "head_rmsnorm_backward", "rope", "swiglu_forward", "swiglu_backward", "gelu_forward", "gelu_backward", "softmax_crossentropy", "logits_row_max",
      "logits_row_sumexp", "logits_pick_target", "crossentropy_grad_from_lse", "add_rows_scaled", "dropout", "add", "scale",
      "sum_squares_accumulate", "sum_accumulate", "adamw_update"};
  return names;
}

std::string DeviceOps::supports_every_op(const OpRequest& r) {
  const auto& ops = op_names();
  return std::find(ops.begin(), ops.end(), r.op) == ops.end() ? fmt::format("there is no op {}", r.op) : "";
}

std::string DeviceOps::cuda_kernels_support(const OpRequest& r) {
  if (std::string why = supports_every_op(r); !why.empty()) return why;
  if ((r.op == "attention_forward" || r.op == "attention_backward") && r.head_size > kCudaAttentionMaxHead)
    return fmt::format("head size {} is above {}, the largest the CUDA attention kernels take", r.head_size,
                       kCudaAttentionMaxHead);
  return "";
}

std::string DeviceOps::supports(const OpRequest& r) const {
  if (std::string why = supports_every_op(r); !why.empty()) return why;
  return fmt::format("the {} backend does not implement {}", name(), r.op);
}

void DeviceOps::unsupported(const char* op) const {
  throw RuntimeFailure(fmt::format("op {} is not supported on backend {}", op, name()));
}

}  // namespace zt
