// FLOPs per token and the peak MFU is judged against (see throughput.h).
#include "engine/observe/throughput.h"

#include <chrono>
#include <cstring>
#include <vector>

namespace zt {

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

// The CPU backend's fp32 GEMM rate on a 768-cube product, best of 5 (about 0.15 s on 2 cores;
// smaller products run too far below the machine's rate for an honest MFU). Measured rather than
// the nominal FMA peak (cores x clock x lanes x FMA units): virtual machines misreport the clock
// and the FMA units per core differ by microarchitecture, so a nominal figure can be far off in
// either direction. A probe disturbed by a busy machine reads low: Progress raises the peak to any
// faster rate the run achieves. The CPU backend's ops take any host memory: plain vectors keep
// the probe out of the backend's memory figures.
double cpu_gemm_probe(Backend& be) {
  constexpr int n = 768;
  std::vector<float> a(size_t(n) * n), out(a.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(int(i * 2654435761u % 2001) - 1000) / 1000.0f;
  const DType saved = be.compute_dtype();
  be.set_compute_dtype(DType::F32);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    be.matmul_forward(out.data(), a.data(), a.data(), nullptr, n, n, n);
    be.synchronize();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  be.set_compute_dtype(saved);
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
  return {cpu_gemm_probe(backend), "measured: fp32 GEMM probe (768^3) at start-up"};
}

}  // namespace zt
