// The bottleneck verdict: one line when something is wrong, naming the evidence and the knob.
// Judged every log interval from the step breakdown summed over the interval's steps and the
// backend's memory figures; the trainer reports a verdict once it holds in two intervals in a
// row. Thresholds (docs/observability.md, "Where the time goes"):
//   data-bound              waiting for data > 5% of the step time
//   communication-bound     exposed communication > 15%
//   offload-bound           blocked in offload transfers and NVMe I/O > 15%
//   host-bound              time outside every measured phase ("other") > 20%: the host, not the
//                           device, sets the pace (Python-free as ztrain is, that is launch
//                           overhead, small micro-batches or something else on the machine);
//                           or, where NVML's GPM metrics exist (Hopper+), the SMs busy < 70% of
//                           the time while data and communication waits are under their
//                           thresholds (NVML's plain utilization cannot tell: it counts any
//                           kernel running, a collective's spin included)
//   memory pressure         the peak above 90% of what the backend may hold, or fragmentation
//                           (reserved but unused) above 25%
//   throttling              the GPU's clocks held down by power or temperature (NVML's clock-event
//                           reasons in the latest telemetry row: sw/hw power cap or brake,
//                           sw/hw thermal, hw slowdown)
#pragma once
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/config/spec.h"
#include "engine/observe/step_result.h"

namespace zt {

struct Verdict {
  std::string kind;      // "data-bound", ...; empty: nothing wrong
  std::string evidence;  // "12% of the step time waits for data"
  std::string knob;      // what to change
  std::string subject;   // what it names, where it names one ("rank 3"): confirmed only when it holds too
  std::string line() const { return kind.empty() ? "" : "verdict: " + kind + ": " + evidence + "; " + knob; }
};

// What the device telemetry says (engine/observe/telemetry.h): the latest sample.
struct DeviceSignals {
  std::vector<std::string> throttle_reasons;  // NVML clock-event reasons (empty: none or no GPU)
  double sm_active = -1;                      // GPM: share of SMs busy (this rank's GPU); -1 unknown
  double tensor_active = -1;                  // GPM: tensor-pipe activity; -1 unknown
};

// `sum`: the breakdown summed over the interval's steps (step_ms and the *_ms parts).
// `memory_limit`: what the backend may hold in all (allocated + available), 0 = unknown.
// `mfu`: the interval's model FLOPs utilization, for the evidence (-1: unknown).
// `slow_source`: with several data sources, the one the loader spent most of its time on
// ("" with one), named by a data-bound verdict.
Verdict judge(const StepResult& sum, const MemoryStats& memory, double memory_limit, const RunSpec& spec,
              const DeviceSignals& device = {}, double mfu = -1, const std::string& slow_source = "");

}  // namespace zt
