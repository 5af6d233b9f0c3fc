// The machines a plan prices a step on: the GPU (the roofline's peaks), how many of them a machine
// holds, the link between them inside a machine and the network each one gets across machines,
// and what the machine costs. Built-in profiles for the common rented shapes (machine_profile),
// or a user's TOML file (engine/plan/machine_file.h).
#pragma once
#include <string>
#include <vector>

namespace zt {

// A device for the roofline: matrix (bf16 dense) and vector (fp32) TFLOP/s and memory bandwidth.
struct DeviceSpec {
  std::string name;
  double tflops = 0, vector_tflops = 0, bytes_per_s = 0;
  double memory_bytes = 0;
};

// A link as a ring collective sees it: the bus bandwidth (nccl-tests' busbw, the bytes per second
// each rank's share of a large collective moves at) and the latency of one ring step.
struct Link {
  std::string name;          // "NVLink 4", "PCIe 4.0", "InfiniBand 400 Gb/s", "TCP"
  double bytes_per_s = 0;    // bus bandwidth
  double step_latency_s = 0; // per ring step (a collective of n ranks takes 2(n-1) or n-1 of them)
};

struct MachineProfile {
  std::string name;              // "h100", or the file's [machine] name
  DeviceSpec gpu;
  int gpus_per_machine = 8;
  Link intra;                    // between the GPUs of one machine
  Link network;                  // across machines, per GPU (the machine's NICs shared by its GPUs)
  double price_per_hour = 0;     // the whole machine, in the user's currency; 0 = not given
  std::string source;            // where the figures come from
};

// "h100", "h200", "a100", "a10", "l4", "h100-tcp": built-in profiles (their figures and sources
// in machine.cpp and docs/commands.md); UserError naming the known ones for another name.
MachineProfile machine_profile(const std::string& name);
std::vector<std::string> machine_profile_names();
// The built-in profile of the GPU a device name names ("NVIDIA H200, 580.159.04, ..." -> h200;
// the longest GPU model in it wins: A100 over A10); false when none.
bool machine_profile_for_gpu(const std::string& device_name, MachineProfile& out);

}  // namespace zt
