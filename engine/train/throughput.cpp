// FLOPs per token and the peak MFU is judged against (see throughput.h).
#include "engine/train/throughput.h"

#include <chrono>
#include <cstring>
#include <vector>

namespace zt {

double flops_per_token(const RunSpec::Model& m, double n_params) {
  return 6.0 * n_params + 12.0 * double(m.n_layer) * double(m.d_model) * double(m.seq_len);
}

namespace {

// bf16/fp16 dense tensor-core peaks from the vendors' datasheets (no sparsity); the first name
// that occurs in the device's name wins, so longer names come first.
struct KnownGpu {
  const char* name;
  double tflops;
};
constexpr KnownGpu kGpus[] = {
    {"H200", 989}, {"H100 PCIe", 756}, {"H100", 989}, {"H800", 989}, {"GH200", 989}, {"B200", 2250},
    {"A100", 312}, {"A800", 312},      {"A10G", 70},  {"A10", 125},  {"L40S", 362},  {"L40", 181},
    {"L4", 121},   {"RTX 4090", 165},  {"RTX 3090", 71}, {"A6000", 155},
};

// The CPU backend's fp32 GEMM rate on a 256-cube product, best of 9 (about 10 ms on 2 cores).
double cpu_gemm_probe(Backend& be) {
  constexpr int n = int(kProbeN);
  const size_t bytes = kProbeBytes;
  std::vector<float> host(size_t(n) * n);
  for (size_t i = 0; i < host.size(); ++i) host[i] = float(int(i * 2654435761u % 2001) - 1000) / 1000.0f;
  void* a = be.alloc(bytes);
  void* w = be.alloc(bytes);
  void* out = be.alloc(bytes);
  be.copy_to_device(a, host.data(), bytes);
  be.copy_to_device(w, host.data(), bytes);
  const DType saved = be.compute_dtype();
  be.set_compute_dtype(DType::F32);
  double best = 1e30;
  for (int i = 0; i < 9; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    be.matmul_forward(out, a, w, nullptr, n, n, n);
    be.synchronize();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  be.set_compute_dtype(saved);
  for (void* p : {a, w, out}) be.free(p);
  return 2.0 * n * n * double(n) / best / 1e12;
}

}  // namespace

Peak device_peak(const RunSpec& spec, Backend& backend) {
  if (spec.run.peak_tflops > 0) return {spec.run.peak_tflops, "[run] peak_tflops"};
  if (backend.kind() == DeviceKind::CUDA) {
    const std::string name = backend.name();
    for (const KnownGpu& g : kGpus)
      if (name.find(g.name) != std::string::npos) {
        // fp32 without tensor cores runs far below the 16-bit peak; MFU stays against the 16-bit
        // peak (what the hardware could do), as is customary.
        return {g.tflops, std::string("table: ") + g.name + " bf16 dense"};
      }
    return {0, "unknown GPU: set [run] peak_tflops for MFU"};
  }
  return {cpu_gemm_probe(backend), "measured: fp32 GEMM probe (256^3) at start-up"};
}

}  // namespace zt
