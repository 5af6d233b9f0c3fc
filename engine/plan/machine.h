// The machines a plan prices a step on: the GPU (the roofline's peaks), how many of them a machine
// holds, the link between them inside a machine and the network each one gets across machines,
// and what the machine costs. Built-in profiles for the common rented shapes (machine_profile),
// or a user's TOML file (engine/plan/machine_file.h).
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace zt {

// A device for the roofline: matrix (bf16 dense) and vector (fp32) TFLOP/s and memory bandwidth,
// and its FP8 tensor cores' dense TFLOP/s (0: none, [precision] fp8 cannot run there).
struct DeviceSpec {
  std::string name;
  double tflops = 0, vector_tflops = 0, bytes_per_s = 0;
  double memory_bytes = 0;
  double fp8_tflops = 0;
};

// A link as a ring collective sees it: the bus bandwidth (nccl-tests' busbw, the bytes per second
// each rank's share of a large collective moves at) and the latency of one ring step.
struct Link {
  std::string name;          // "NVLink 4", "PCIe 4.0", "InfiniBand 400 Gb/s", "TCP"
  double bytes_per_s = 0;    // bus bandwidth (the all-reduce's)
  double step_latency_s = 0; // per ring step (a collective of n ranks takes 2(n-1) or n-1 of them)
  // Where a collective's bus bandwidth is not the all-reduce's, as `ztrain doctor` measures it
  // (Open MPI over TCP moves an all-gather at the link's rate and a reduce-scatter at about a third
  // of it); 0: bytes_per_s. The built-in profiles leave them 0 (NCCL's are alike on large sizes).
  double reduce_scatter_bytes_per_s = 0, all_gather_bytes_per_s = 0;
};

// What fraction of the datasheet figures each kind of op reaches (a measurement: default from the
// H200 run of record, tools/gpu_check.sh -> bench/calibration/h200.json; --calibration FILE reads
// another such file).
struct Calibration {
  double gemm = 0;    // matrix products: of the bf16 dense peak
  double fp8_gemm = 0;  // FP8 products: of the FP8 dense peak (0: not measured, taken as `gemm`)
  // the attention kernels per measured shape: of the bf16 dense peak, forward and backward
  struct Attention {
    int head_size = 0, seq_len = 0;
    double forward = 0, backward = 0;
  };
  std::vector<Attention> attention;
  double memory = 0;  // memory-bound ops: of the HBM bandwidth
  double vector = 0;  // other arithmetic: of the fp32 peak
  std::string source;
  // The measured shape nearest head size `hs` and `T` tokens: the same head size if measured,
  // then the nearest T by ratio (attention's efficiency grows with T: a longer sequence than any
  // measured takes the longest's).
  Attention attention_at(int hs, int T) const;
};
struct MachineProfile {
  std::string name;              // "h100", or the file's [machine] name
  DeviceSpec gpu;
  int gpus_per_machine = 8;
  Link intra;                    // between the GPUs of one machine
  Link network;                  // across machines, per GPU (the machine's NICs shared by its GPUs)
  double price_per_hour = 0;     // the whole machine, in the user's currency; 0 = not given
  std::string source;            // where the figures come from
  // Its own efficiencies (a machine file's [calibration]: a CPU measured by `ztrain doctor`);
  // none: step_time.h's default_calibration(), or --calibration.
  std::optional<Calibration> calibration;
};

// "h100", "h200", "a100", "a10", "l4", "h100-tcp": built-in profiles (their figures and sources
// in machine.cpp and docs/commands.md); UserError naming the known ones for another name.
MachineProfile machine_profile(const std::string& name);
std::vector<std::string> machine_profile_names();
std::string machine_profile_list();  // "h100, h200, ...", for messages
// The built-in profile of the GPU a device name names ("NVIDIA H200, 580.159.04, ..." -> h200;
// the longest GPU model in it wins: A100 over A10); false when none.
bool machine_profile_for_gpu(const std::string& device_name, MachineProfile& out);

}  // namespace zt
