// cuDNN's heuristics accept ztrain's fused-attention graphs (engine/backend/cuda/cudnn_attention.cpp)
// for Hopper GPUs, without a GPU: the graphs are built against the installed cuDNN and its
// heuristics are asked, with a device description (cuDNN's JSON form of an H100 and an H200),
// for engines that run them. The CUDA driver is the toolkit's stub (tests/cuda/cudnn_graphs.py
// puts it on the library path). A graph cuDNN's fused engines do not match finds none: the
// planted fault ZTRAIN_TEST_CUDNN_P_FP32=1 (P kept in fp32 for the second product) must make the
// forward unsupported. Prints one line per device and shape; exit 0 when every shape has engines
// for both passes (or, under the fault, when no forward has).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/backend/cuda/cudnn_attention.h"

namespace {

// cudaDeviceProp as cuDNN's device description reads it (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION)
std::string hopper(const char* name, long long memory, int mem_clock_khz) {
  return std::string("{\"deviceVer\":900,\"multiProcessorCount\":132,\"warpSize\":32,\"maxSharedMemoryPerBlock\":49152,"
                     "\"maxSharedMemoryPerBlockOptin\":232448,\"reservedSharedMemoryPerBlock\":1024,"
                     "\"maxRegistersPerSM\":65536,\"maxCtasPerSM\":32,\"maxThreadsPerBlock\":1024,"
                     "\"maxThreadsPerSM\":2048,\"regsPerBlock\":65536,\"totalGlobalMem\":") +
         std::to_string(memory) +
         ",\"smClockRateKHz\":1980000,\"l2CacheSize\":52428800,\"maxBlockSize\":[1024,1024,64],\"memClockRateKHz\":" +
         std::to_string(mem_clock_khz) +
         ",\"maxGridSize\":[2147483647,65535,65535],\"supportCoopLaunch\":1,\"pciDeviceId\":0,\"isTccDriver\":0,"
         "\"cudaDeviceId\":0,\"driverVer\":13000,\"deviceName\":\"" + name + "\"}";
}

}  // namespace

int main() {
  const bool planted = std::getenv("ZTRAIN_TEST_CUDNN_P_FP32") != nullptr;
  const struct {
    const char* name;
    std::string json;
  } devices[] = {{"H100", hopper("NVIDIA H100 80GB HBM3", 84987740160LL, 2619000)},
                 {"H200", hopper("NVIDIA H200", 150754820096LL, 3201000)}};
  using Shape = zt::cuda::cudnn_attention::Shape;
  const struct {
    const char* what;
    Shape s;
  } shapes[] = {{"GPT-2 124M", {8, 1024, 12, 12, 64, false}},
                {"head size 128", {2, 4096, 6, 6, 128, false}},
                {"fp16", {4, 1024, 12, 12, 64, true}},
                {"Llama 3 8B (grouped key/value heads)", {1, 8192, 32, 8, 128, false}}};
  int bad = 0;
  for (const auto& d : devices)
    for (const auto& x : shapes) {
      const auto r = zt::cuda::cudnn_attention::supported_on(x.s, d.json);
      std::printf("%s, %s (B %d T %d heads %d/%d of %d): forward %lld engines, backward %lld%s%s\n", d.name, x.what,
                  x.s.B, x.s.T, x.s.NH, x.s.NKV, x.s.hs, (long long)r.forward_engines, (long long)r.backward_engines,
                  r.error.empty() ? "" : "; error: ", r.error.c_str());
      if (!r.error.empty()) ++bad;
      else if (planted ? r.forward_engines > 0 : r.forward_engines < 1 || r.backward_engines < 1) ++bad;
    }
  return bad == 0 ? 0 : 1;
}
