// The built-in machine profiles (see machine.h). GPU figures are the vendors' datasheets (dense
// bf16 tensor-core and fp32 TFLOP/s, HBM bandwidth, memory, dense FP8 TFLOP/s: half the
// datasheets' "with sparsity" figure; A100 and A10 have no FP8 tensor cores). Link figures are bus bandwidths as
// nccl-tests reports them for large all-reduces: 8x H100 SXM over NVLink 4, 460-480 GB/s; 8x A100
// SXM over NVLink 3, 230-250 GB/s; 8x H100 PCIe (Gen5, no NVSwitch), 35-45 GB/s (a published
// reference table of nccl-tests results; the lower ends are taken). PCIe Gen4 machines get half
// the Gen5 figure. Networks: the line rate per GPU at 90% (InfiniBand with GPUDirect RDMA) or 80%
// (TCP) as bus bandwidth; not measured here: `ztrain doctor` under mpirun measures a cluster's own.
#include "engine/plan/machine.h"

#include <cctype>

#include <fmt/format.h>

#include "engine/core/status.h"

namespace zt {

namespace {

const DeviceSpec kH100{"H100 SXM", 989, 67, 3.35e12, 80e9, 1979};
const DeviceSpec kH200{"H200 SXM", 989, 67, 4.8e12, 141e9, 1979};
const DeviceSpec kA100{"A100 SXM 80GB", 312, 19.5, 2.04e12, 80e9, 0};
const DeviceSpec kA10{"A10 24GB", 125, 31.2, 0.6e12, 24e9, 0};
const DeviceSpec kL4{"L4", 121, 30, 0.3e12, 24e9, 242};

const Link kNvlink4{"NVLink 4", 460e9, 2e-6};
const Link kNvlink3{"NVLink 3", 230e9, 3e-6};
const Link kPcie4{"PCIe 4.0 (no NVLink)", 17.5e9, 5e-6};
Link ib(double gbit_per_gpu) { return {fmt::format("InfiniBand {:g} Gb/s per GPU", gbit_per_gpu), gbit_per_gpu / 8 * 1e9 * 0.9, 5e-6}; }
Link tcp(double gbit_per_gpu) { return {fmt::format("TCP {:g} Gb/s per GPU", gbit_per_gpu), gbit_per_gpu / 8 * 1e9 * 0.8, 25e-6}; }

std::vector<MachineProfile> builtin() {
  return {
      {"h100", kH100, 8, kNvlink4, ib(400), 0, "8x H100 SXM, NVSwitch, 400 Gb/s InfiniBand per GPU", std::nullopt},
      {"h200", kH200, 8, kNvlink4, ib(400), 0, "8x H200 SXM, NVSwitch, 400 Gb/s InfiniBand per GPU", std::nullopt},
      {"a100", kA100, 8, kNvlink3, ib(200), 0, "8x A100 SXM 80GB, NVSwitch, 200 Gb/s InfiniBand per GPU", std::nullopt},
      {"a10", kA10, 8, kPcie4, tcp(12.5), 0, "8x A10 24GB on PCIe 4.0, 100 Gb/s per machine", std::nullopt},
      {"l4", kL4, 8, kPcie4, tcp(12.5), 0, "8x L4 on PCIe 4.0, 100 Gb/s per machine", std::nullopt},
      {"h100-tcp", kH100, 8, kNvlink4, tcp(25), 0, "8x H100 SXM, NVSwitch, 200 Gb/s TCP per machine (no RDMA)", std::nullopt},
  };
}

}  // namespace

std::vector<std::string> machine_profile_names() {
  std::vector<std::string> out;
  for (const MachineProfile& m : builtin()) out.push_back(m.name);
  return out;
}

bool machine_profile_for_gpu(const std::string& device_name, MachineProfile& out) {
  std::string best;
  for (const MachineProfile& m : builtin()) {
    const std::string model = m.gpu.name.substr(0, m.gpu.name.find(' '));  // "H200", "A100"
    // the plain profile of a GPU (h100, not h100-tcp): the first one listed; the model as a whole
    // word ("L4" is not "L40S")
    for (size_t at = device_name.find(model); at != std::string::npos; at = device_name.find(model, at + 1)) {
      const size_t after = at + model.size();
      const bool whole = (at == 0 || !std::isalnum(static_cast<unsigned char>(device_name[at - 1]))) &&
                         (after == device_name.size() || !std::isalnum(static_cast<unsigned char>(device_name[after])));
      if (whole && model.size() > best.size()) best = model, out = m;
    }
  }
  return !best.empty();
}

std::string machine_profile_list() {
  std::string out;
  for (const std::string& n : machine_profile_names()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

MachineProfile machine_profile(const std::string& name) {
  for (const MachineProfile& m : builtin())
    if (m.name == name) return m;
  user_error("machine profile '{}': not one of {} (or a .toml machine file)", name, machine_profile_list());
}

}  // namespace zt
