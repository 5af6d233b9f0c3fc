// Causal self-attention, online softmax (flash-attention's recurrence): one warp per query row,
// keys streamed, no (T, T) matrix anywhere. Forward saves the row's log-sum-exp; backward
// recomputes the probabilities from it. Head size up to 256 (8 values per lane).
// This is the correct, simple version; the tiled shared-memory kernel is the next step.
#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {
constexpr int kMaxPerLane = 8;  // hs <= 32 * 8

__global__ void attention_forward_kernel(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= B * NH * T) return;
  const int t = row % T, h = (row / T) % NH, b = row / (T * NH);
  const int hs = C / NH, C3 = 3 * C;
  const float scale = rsqrtf(float(hs));
  const float* base = qkv + int64_t(b) * T * C3;
  float q[kMaxPerLane], acc[kMaxPerLane];
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int c = lane + 32 * j;
    q[j] = c < hs ? base[int64_t(t) * C3 + h * hs + c] : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int t2 = 0; t2 <= t; ++t2) {
    const float* k = base + int64_t(t2) * C3 + C + h * hs;
    const float* v = base + int64_t(t2) * C3 + 2 * C + h * hs;
    float dot = 0;
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int c = lane + 32 * j;
      if (c < hs) dot += q[j] * k[c];
    }
    const float sc = warp_sum(dot) * scale;
    const float m_new = fmaxf(m, sc);
    const float corr = expf(m - m_new), p = expf(sc - m_new);
    l = l * corr + p;
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int c = lane + 32 * j;
      acc[j] = acc[j] * corr + (c < hs ? p * v[c] : 0.0f);
    }
    m = m_new;
  }
  float* o = out + (int64_t(b) * T + t) * C + h * hs;
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int c = lane + 32 * j;
    if (c < hs) o[c] = acc[j] / l;
  }
  if (lane == 0) lse[(int64_t(b) * NH + h) * T + t] = m + logf(l);
}

// Warp-wide q . k_t2 and dout . v_t2 for one key row (each lane holds its slice of q and dout).
__device__ inline void qk_and_dv(const float* q, const float* d, const float* k, const float* v, int hs, int lane,
                                 float& qk, float& dv) {
  qk = 0;
  dv = 0;
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int c = lane + 32 * j;
    if (c < hs) {
      qk += q[j] * k[c];
      dv += d[j] * v[c];
    }
  }
  qk = warp_sum(qk);
  dv = warp_sum(dv);
}

__global__ void attention_backward_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse, int B,
                                          int T, int C, int NH) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= B * NH * T) return;
  const int t = row % T, h = (row / T) % NH, b = row / (T * NH);
  const int hs = C / NH, C3 = 3 * C;
  const float scale = rsqrtf(float(hs));
  const float* base = qkv + int64_t(b) * T * C3;
  float* dbase = dqkv + int64_t(b) * T * C3;
  float q[kMaxPerLane], d[kMaxPerLane], dq[kMaxPerLane];
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int c = lane + 32 * j;
    q[j] = c < hs ? base[int64_t(t) * C3 + h * hs + c] : 0.0f;
    d[j] = c < hs ? dout[(int64_t(b) * T + t) * C + h * hs + c] : 0.0f;
    dq[j] = 0.0f;
  }
  const float L = lse[(int64_t(b) * NH + h) * T + t];
  // D = sum_t2 p * dp (= dout . out), needed before any ds
  float D = 0;
  for (int t2 = 0; t2 <= t; ++t2) {
    float qk, dv;
    qk_and_dv(q, d, base + int64_t(t2) * C3 + C + h * hs, base + int64_t(t2) * C3 + 2 * C + h * hs, hs, lane, qk, dv);
    D += expf(qk * scale - L) * dv;
  }
  for (int t2 = 0; t2 <= t; ++t2) {
    const float* k = base + int64_t(t2) * C3 + C + h * hs;
    float qk, dp;
    qk_and_dv(q, d, k, base + int64_t(t2) * C3 + 2 * C + h * hs, hs, lane, qk, dp);
    const float p = expf(qk * scale - L);
    const float ds = p * (dp - D) * scale;
    float* dk = dbase + int64_t(t2) * C3 + C + h * hs;
    float* dvv = dbase + int64_t(t2) * C3 + 2 * C + h * hs;
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int c = lane + 32 * j;
      if (c < hs) {
        dq[j] += ds * k[c];
        atomicAdd(&dk[c], ds * q[j]);  // key/value rows collect from every later query
        atomicAdd(&dvv[c], p * d[j]);
      }
    }
  }
  float* dqo = dbase + int64_t(t) * C3 + h * hs;
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int c = lane + 32 * j;
    if (c < hs) dqo[c] += dq[j];
  }
}
}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, cudaStream_t s) {
  if (C / NH > 32 * kMaxPerLane) fail(__FILE__, __LINE__, "attention_forward", "head size above 256");
  attention_forward_kernel<<<blocks_for(int64_t(B) * NH * T, 8), 256, 0, s>>>(out, lse, qkv, B, T, C, NH);
  ZT_CUDA_LAUNCH_CHECK();
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* lse, int B, int T, int C,
                        int NH, cudaStream_t s) {
  if (C / NH > 32 * kMaxPerLane) fail(__FILE__, __LINE__, "attention_backward", "head size above 256");
  attention_backward_kernel<<<blocks_for(int64_t(B) * NH * T, 8), 256, 0, s>>>(dqkv, dout, qkv, lse, B, T, C, NH);
  ZT_CUDA_LAUNCH_CHECK();
}

}  // namespace zt::cuda
