// The FP8 linear layers' products at GPT-2 124M's shapes (d_model 768, d_ff 3072: attn.c_attn,
// attn.c_proj, mlp.c_fc, mlp.c_proj), forward and backward with biases, in bf16 on the emulated
// device, so that ZTRAIN_EMU_CUBLASLT_DUMP records the cuBLASLt descriptors ztrain builds for
// them (tests/cuda_emu/fp8_descriptors.py checks them). 64 rows: the descriptors depend on the
// row count only through n and the leading dimensions, which the checker covers; the products'
// values are not read here.
#include <cstdio>

#include "engine/backend/backend.h"

int main() {
  auto gpu = zt::make_backend(zt::DeviceChoice::Cuda, 1);
  gpu->set_compute_dtype(zt::DType::BF16);
  const int N = 64;
  const int shapes[4][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};  // (in C, out OC)
  for (const auto& s : shapes) {
    const int C = s[0], OC = s[1];
    void* x = gpu->alloc(size_t(N) * C * 2);
    void* w = gpu->alloc(size_t(OC) * C * 2);
    void* b = gpu->alloc(size_t(OC) * 2);
    void* y = gpu->alloc(size_t(N) * OC * 2);
    void* dx = gpu->alloc(size_t(N) * C * 2);
    auto* dw = static_cast<float*>(gpu->alloc(size_t(OC) * C * 4));
    auto* db = static_cast<float*>(gpu->alloc(size_t(OC) * 4));
    gpu->matmul_forward_fp8(y, x, w, b, N, C, OC, nullptr);
    gpu->matmul_backward_fp8(dx, dw, db, y, x, w, N, C, OC, nullptr);
    gpu->synchronize();
    for (void* p : {x, w, b, y, dx, static_cast<void*>(dw), static_cast<void*>(db)}) gpu->free(p);
    std::printf("linear (%d -> %d): forward and backward in FP8\n", C, OC);
  }
  return 0;
}
