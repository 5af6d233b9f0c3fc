// The bottleneck verdict (see verdict.h).
#include "engine/observe/verdict.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace zt {

Verdict judge(const StepResult& sum, const MemoryStats& memory, double memory_limit, const RunSpec& spec,
              const DeviceSignals& device, double mfu, const std::string& slow_source) {
  const double total = sum.step_ms > 0 ? sum.step_ms : 1;
  const double data = sum.data_wait_ms / total, comm = sum.comm_ms / total, other = sum.other_ms / total,
               offload = sum.offload_ms / total;
  // the largest excess over its threshold is named first: one line
  struct Candidate {
    double excess;
    Verdict v;
  };
  std::vector<Candidate> c;
  if (data > 0.05)
    c.push_back({data / 0.05, {"data-bound",
                               fmt::format("{:.0f}% of the step time waits for data{}", 100 * data,
                                           slow_source.empty() ? "" : "; " + slow_source),
                               fmt::format("raise [data] prefetch (now {}), put [data] cache_dir on a local SSD, check "
                                           "{} download rate (ztrain-bench-data)", spec.data.prefetch,
                                           slow_source.empty() ? "the source's" : "that source's")}});
  if (comm > 0.15)
    c.push_back({comm / 0.15, {"communication-bound",
                               fmt::format("{:.0f}% of the step time is blocked in collectives", 100 * comm),
                               fmt::format("raise [parallel] bucket_mb (now {:g}), keep tensor groups inside a node, "
                                           "try a lower ZeRO stage (now {}), or set [comm] nccl_algo / nccl_proto",
                                           spec.parallel.bucket_mb, spec.parallel.zero_stage)}});
  if (offload > 0.15)
    c.push_back({offload / 0.15,
                 {"offload-bound", fmt::format("{:.0f}% of the step time is blocked in offload transfers and NVMe I/O",
                                               100 * offload),
                  fmt::format("raise [offload] io_depth (now {}) or buffer_mb (now {:g}), put nvme_path on a faster "
                              "local SSD, {}raise [parallel] prefetch (now {}), or offload less (a higher ZeRO stage or "
                              "more ranks)",
                              spec.offload.io_depth, spec.offload.buffer_mb,
                              spec.offload.params == OffloadTier::Nvme ? "keep parameters in CPU memory (params = \"cpu\"), " : "",
                              spec.parallel.prefetch)}});
  const std::string host_knob = fmt::format("raise [train] micro_batch (now {}) so each launch does more work; "
                                            "check for other processes on the machine", spec.train.micro_batch);
  const std::string mfu_text = mfu >= 0 ? fmt::format(", MFU {:.0f}%", 100 * mfu) : "";
  if (other > 0.20)
    c.push_back({other / 0.20, {"host-bound",
                                fmt::format("{:.0f}% of the step time is outside the measured device work{}",
                                            100 * other, mfu_text),
                                host_knob}});
  else if (device.sm_active >= 0 && device.sm_active < 0.70 && data <= 0.05 && comm <= 0.15 && offload <= 0.15)
    c.push_back({0.70 / std::max(device.sm_active, 0.01),
                 {"host-bound",
                  fmt::format("the SMs were busy {:.0f}% of the time (NVML GPM; tensor pipes {:.0f}%){} with no data "
                              "communication or offload wait to explain it",
                              100 * device.sm_active, 100 * std::max(0.0, device.tensor_active), mfu_text),
                  host_knob}});
  const double frag = memory.fragmentation();
  const double near = memory_limit > 0 ? double(memory.peak) / memory_limit : 0;
  if (near > 0.90 || frag > 0.25)
    c.push_back({std::max(near / 0.90, frag / 0.25),
                 {"memory pressure",
                  near > 0.90 ? fmt::format("the peak ({:.1f} MiB) is {:.0f}% of the {:.1f} MiB the backend may hold",
                                            memory.peak / 1048576.0, 100 * near, memory_limit / 1048576.0)
                              : fmt::format("{:.0f}% of the reserved device memory is unused (fragmentation)", 100 * frag),
                  fmt::format("lower [train] micro_batch (now {}), raise the ZeRO stage (now {}) or tensor "
                              "parallelism; `ztrain plan` shows what fits", spec.train.micro_batch,
                              spec.parallel.zero_stage)}});
  std::string slowed;  // reasons that mean lost speed (not idle, not application clocks)
  for (const std::string& r : device.throttle_reasons)
    if (r != "gpu_idle" && r != "applications_clocks" && r != "display_clocks" && r != "sync_boost")
      slowed += (slowed.empty() ? "" : ", ") + r;
  if (!slowed.empty())
    c.push_back({10.0, {"throttling", "the GPU's clocks are held down (" + slowed + ")",
                        "check cooling and the power limit (nvidia-smi -q -d PERFORMANCE); the job runs slower until "
                        "that is fixed"}});
  if (c.empty()) return {};
  return std::max_element(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) { return a.excess < b.excess; })
      ->v;
}

}  // namespace zt
