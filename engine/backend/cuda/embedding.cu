// Token + position embedding, forward and backward (negative ids and a null wpe as in cpu/).
#include <stdexcept>
#include <string>

#include "engine/backend/cuda/cuda_common.cuh"
#include "engine/backend/cuda/embedding_sort.h"
#include "engine/backend/cuda/launch.cuh"
#include "engine/backend/cuda/ops.cuh"

namespace zt::cuda {

namespace {
// One block per token row, V channels per access (128 bits where the rows allow).
template <int V, typename T>
__global__ void __launch_bounds__(256)
    embedding_forward_kernel(T* out, const int32_t* inp, const T* wte, const T* wpe, int T_, int C,
                             const int32_t* pos) {
  const int bt = blockIdx.x, t = pos ? pos[bt] : bt % T_;
  const int tok = inp[bt];
  for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
    float v[V] = {}, p[V];
    if (tok >= 0) load_floats<V>(v, wte + int64_t(tok) * C + c);
    if (wpe) {
      load_floats<V>(p, wpe + int64_t(t) * C + c);
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] += p[k];
    }
    store_floats<V>(out + int64_t(bt) * C + c, v);
  }
}
// Tokens repeat, so rows of dwte collide: fp32 atomics (the one reduction on the GPU whose order
// is not fixed; the gradient buffers are fp32, so only the last bits vary between runs).
// dout is read V channels per access; the atomics stay scalar.
template <int V, typename T>
__global__ void __launch_bounds__(256)
    embedding_backward_kernel(float* dwte, float* dwpe, const T* dout, const int32_t* inp, int T_, int C,
                              const int32_t* pos) {
  const int bt = blockIdx.x, t = pos ? pos[bt] : bt % T_;
  const int tok = inp[bt];
  for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
    float d[V];
    load_floats<V>(d, dout + int64_t(bt) * C + c);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if (tok >= 0) atomicAdd(&dwte[int64_t(tok) * C + c + k], d[k]);
      if (dwpe) atomicAdd(&dwpe[int64_t(t) * C + c + k], d[k]);
    }
  }
}
// [run] deterministic, without atomics and in the CPU backend's order (engine/backend/cpu/
// embedding.cpp: every sum starts from the gradient's value and adds the rows in (b, t) order), so
// the result is the same every run and bit for bit the CPU backend's. The rows are grouped by token
// with a sort of (token, position) keys, then one block per token sums its rows in position order.
// Keys: token in the high 32 bits, position in the low; rows with a negative id and the padding to
// a power of two sort last as all-ones.
constexpr uint64_t kNoKey = ~uint64_t(0);
__global__ void __launch_bounds__(256) embedding_sort_keys_kernel(uint64_t* keys, const int32_t* inp, int BT, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  keys[i] = i < BT && inp[i] >= 0 ? uint64_t(uint32_t(inp[i])) << 32 | uint32_t(i) : kNoKey;
}
// One compare-exchange pass of the bitonic sort (sequences of k, partners j apart); the keys are
// distinct but for the all-ones ones, so the order is total.
__global__ void __launch_bounds__(256) bitonic_pass_kernel(uint64_t* keys, int n, int j, int k) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, p = i ^ j;
  if (i >= n || p <= i) return;
  const uint64_t a = keys[i], b = keys[p];
  if ((a > b) == ((i & k) == 0)) keys[i] = b, keys[p] = a;
}
// Block i: if sorted key i starts a token's run, that token's row of dwte plus its rows of dout in
// position order, V channels per access. A frequent token (a space, an end-of-text, padding) has
// thousands of rows: the run's end is found once by binary search, and the rows are read 4 at a
// time with independent loads, then added in order.
template <int V, typename T>
__global__ void __launch_bounds__(128)
    embedding_token_sums_kernel(float* dwte, const T* dout, const uint64_t* keys, int n, int C) {
  const int i = blockIdx.x;
  const uint64_t key = keys[i];
  const uint32_t tok = uint32_t(key >> 32);
  if (key == kNoKey || (i > 0 && uint32_t(keys[i - 1] >> 32) == tok)) return;
  // the run ends at the first key of a later token (the all-ones keys sort after every token)
  const uint64_t next = (uint64_t(tok) + 1) << 32;
  int lo = i + 1, hi = n;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (keys[mid] < next) lo = mid + 1;
    else hi = mid;
  }
  const int end = lo;
  float* row = dwte + int64_t(tok) * C;
  for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = row[c + k];
    int r = i;
    for (; r + 4 <= end; r += 4) {
      float d[4][V];
#pragma unroll
      for (int u = 0; u < 4; ++u) load_floats<V>(d[u], dout + int64_t(uint32_t(keys[r + u])) * C + c);
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] += d[u][k];
    }
    for (; r < end; ++r) {
      float d[V];
      load_floats<V>(d, dout + int64_t(uint32_t(keys[r])) * C + c);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += d[k];
    }
#pragma unroll
    for (int k = 0; k < V; ++k) row[c + k] = acc[k];
  }
}
// dwpe (T, C): thread (t, c) adds dout[b, t, c] for b ascending (one document a row; with
// positions the rows are sorted by position and summed as the tokens' are)
template <typename T>
__global__ void __launch_bounds__(256)
    embedding_position_sums_kernel(float* dwpe, const T* dout, int B, int T_, int C) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(T_) * C) return;
  float acc = dwpe[i];
  for (int b = 0; b < B; ++b) acc += to_float(dout[int64_t(b) * T_ * C + i]);
  dwpe[i] = acc;
}
}  // namespace

template <typename T>
void embedding_backward_deterministic(float* dwte, float* dwpe, const T* dout, const int32_t* inp, int B, int T_,
                                      int C, const int32_t* pos, void* scratch, cudaStream_t s) {
  const int64_t BT = int64_t(B) * T_;
  if (BT <= 0) return;
  if (BT > (int64_t(1) << 30))  // the keys' count, padded to a power of two, must fit an int
    throw std::runtime_error("deterministic embedding backward: " + std::to_string(BT) + " token rows, more than 2^30");
  const int n = int(embedding_sort_keys(BT));
  uint64_t* keys = static_cast<uint64_t*>(scratch);
  // the rows of `ids` grouped by id, each group summed into its row of `dst` in (b, t) order
  auto sums_by_id = [&](float* dst, const int32_t* ids) {
    launch(embedding_sort_keys_kernel, (n + 255) / 256, 256, 0, s, keys, ids, int(BT), n);
    for (int k = 2; k <= n; k <<= 1)
      for (int j = k >> 1; j > 0; j >>= 1) launch(bitonic_pass_kernel, (n + 255) / 256, 256, 0, s, keys, n, j, k);
    with_vec<T>(C, {dout}, [&](auto v) {
      launch(embedding_token_sums_kernel<decltype(v)::value, T>, n, 128, 0, s, dst, dout, keys, n, C);
    });
  };
  sums_by_id(dwte, inp);
  if (dwpe && pos) {
    sums_by_id(dwpe, pos);  // the keys' scratch again, after the token sums that read it (one stream)
  } else if (dwpe) {
    const int64_t tc = int64_t(T_) * C;
    launch(embedding_position_sums_kernel<T>, int((tc + 255) / 256), 256, 0, s, dwpe, dout, B, T_, C);
  }
  ZT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void embedding_forward(T* out, const int32_t* inp, const T* wte, const T* wpe, int B, int T_, int C, const int32_t* pos,
                       cudaStream_t s) {
  if (B * T_ <= 0) return;
  with_vec<T>(C, {out, wte, wpe}, [&](auto v) {
    launch(embedding_forward_kernel<decltype(v)::value, T>, B * T_, 256, 0, s, out, inp, wte, wpe, T_, C, pos);
  });
  ZT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void embedding_backward(float* dwte, float* dwpe, const T* dout, const int32_t* inp, int B, int T_, int C,
                        const int32_t* pos, cudaStream_t s) {
  if (B * T_ <= 0) return;
  with_vec<T>(C, {dout}, [&](auto v) {
    launch(embedding_backward_kernel<decltype(v)::value, T>, B * T_, 256, 0, s, dwte, dwpe, dout, inp, T_, C, pos);
  });
  ZT_CUDA_LAUNCH_CHECK();
}

#define ZT_INSTANTIATE(T)                                                                                    \
  template void embedding_forward<T>(T*, const int32_t*, const T*, const T*, int, int, int, const int32_t*,   \
                                     cudaStream_t);                                                          \
  template void embedding_backward<T>(float*, float*, const T*, const int32_t*, int, int, int, const int32_t*, \
                                      cudaStream_t);                                                         \
  template void embedding_backward_deterministic<T>(float*, float*, const T*, const int32_t*, int, int, int,   \
                                                    const int32_t*, void*, cudaStream_t);
ZT_INSTANTIATE(float)
ZT_INSTANTIATE(__nv_bfloat16)
ZT_INSTANTIATE(__half)
#undef ZT_INSTANTIATE

}  // namespace zt::cuda
