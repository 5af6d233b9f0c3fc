// Device telemetry, like `nvidia-smi dmon`: a background thread samples every [run] telemetry_s
// seconds and hands one row per device to `sink` (metrics.jsonl rows of kind "device").
//   GPUs: NVML, loaded at run time (dlopen of libnvidia-ml.so.1: no build dependency): GPU and
//         memory utilization, SM clock, memory used, power, temperature, clock-event (throttle)
//         reasons. NVML's utilization counts time with any kernel running, not how busy the SMs
//         are (a rank stalled in a collective shows 100%), so on Hopper and newer NVML's GPM
//         metrics are read too: SM activity and occupancy, tensor-pipe and DRAM activity.
//   CPU:  this process's CPU utilization (CPU time over wall time x threads) and resident memory.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/nvml.h"
#include "engine/observe/verdict.h"

namespace zt {

class Telemetry {
 public:
  // `gpus`: sample the local GPUs through NVML (else this process on the CPU). `threads`: the
  // CPU backend's threads (utilization 1.0 = all of them busy).
  // `focus_pci`: the PCI bus id of this rank's GPU, whose GPM activity the verdict reads ("" or
  // not found: the mean over the machine's GPUs).
  Telemetry(double every_s, bool gpus, int threads, std::function<void(const nlohmann::json&)> sink,
            const std::string& focus_pci = "");
  ~Telemetry();  // stops the thread
  Telemetry(const Telemetry&) = delete;
  Telemetry& operator=(const Telemetry&) = delete;
  // "NVML: 1 GPU" or why there are no GPU rows (no libnvidia-ml, no GPU); for the log.
  const std::string& status() const { return status_; }
  // The latest sample's throttle reasons and GPM activity (this machine's GPUs), for the verdict.
  DeviceSignals signals() const;

 private:
  void loop();
  void sample_cpu(double t);
  void sample_gpus(double t);
  double every_s_;
  int threads_;
  std::function<void(const nlohmann::json&)> sink_;
  std::string status_;
  std::unique_ptr<Nvml> nvml_;
  int focus_ = -1;  // index of this rank's GPU in NVML's samples
  double last_cpu_s_ = 0, last_wall_s_ = 0;
  mutable std::mutex mu_;
  DeviceSignals signals_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace zt
