// NVML (the NVIDIA driver's management library), loaded at run time with dlopen of
// libnvidia-ml.so.1: no build dependency, and a machine without the driver simply has no GPU rows.
// One sample per GPU, like a line of `nvidia-smi dmon`. Plain C++ (the GPU check uses it too).
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace zt {

struct GpuSample {
  int index = 0;
  double util_gpu = -1, util_mem = -1;  // fractions of the last sample period; -1 = not reported
  long long sm_clock_mhz = -1, mem_used_bytes = -1;
  double power_w = -1, temp_c = -1;
  std::vector<std::string> clock_event_reasons;  // "sw_power_cap", "hw_thermal", ... (throttling)
  // NVML's GPM metrics (Hopper and newer) since the previous sample, fractions; -1 = not
  // available. Unlike util_gpu (time with any kernel running), these say how busy the SMs were.
  double sm_active = -1;      // share of SMs busy
  double sm_occupancy = -1;   // active warps over the theoretical maximum
  double tensor_active = -1;  // time the SMs ran any tensor-core instruction
  double dram_active = -1;    // DRAM bandwidth used over the peak
};

// What does not change while a job runs: for `ztrain doctor`.
struct GpuInfo {
  std::string name;
  int cc_major = -1, cc_minor = -1;  // compute capability
  int pcie_gen = -1, pcie_width = -1;
  int nvlinks_active = -1;           // -1: NVML does not say (no NVLink)
  int ecc_enabled = -1;              // 1 on, 0 off, -1 not supported
};

class Nvml {
 public:
  // Loads NVML and finds the GPUs; on failure `why()` says what is missing.
  Nvml();
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;
  bool ok() const { return !devices_.empty(); }
  const std::string& why() const { return why_; }
  size_t gpus() const { return devices_.size(); }
  // One row per GPU. The GPM fields need two samples: the first call only starts them.
  std::vector<GpuSample> sample();
  bool gpm() const { return !gpm_.empty(); }  // GPM metrics are read (a supported GPU and driver)
  // The index in sample() of the GPU with this PCI bus id (CUDA's cudaDeviceGetPCIBusId), or -1.
  // NVML numbers every GPU of the machine, whatever CUDA_VISIBLE_DEVICES says.
  int index_of_pci(const std::string& bus_id) const;
  GpuInfo info(size_t gpu) const;
  std::string driver_version() const;  // "580.159.03", or "" when NVML does not say
  int cuda_driver_version() const;     // 13000 for CUDA 13.0, or -1

 private:
  struct Api;
  std::unique_ptr<Api> api_;
  std::vector<void*> devices_;
  std::vector<void*> gpm_;  // per device: the previous GPM sample (nullptr: unsupported), then a spare
  std::vector<void*> gpm_spare_;
  std::vector<bool> gpm_started_;  // a previous sample exists
  void read_gpm(size_t gpu, GpuSample& s);
  std::string why_;
};

}  // namespace zt
