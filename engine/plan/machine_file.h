// A user's machine profile for `ztrain plan --machine FILE.toml` (the fields of machine.h):
//
//   [machine]
//   base = "h100"            # a built-in profile whose values the rest of the file changes
//   name = "my-cluster"      # default: the file's name
//   gpus_per_machine = 8
//   price_per_hour = 98.32   # the whole machine; prints the cost per billion tokens
//   [gpu]                    # name, tflops (bf16 dense), vector_tflops (fp32), memory_gb_per_s, memory_gb
//   [intra]                  # name, bus_gb_per_s, step_latency_us: between the GPUs of a machine
//   [network]                # the same, across machines, per GPU
//
// `ztrain doctor` under mpirun measures the links of a cluster. Every key is checked: an unknown
// one, a wrong type or a value out of range is a UserError naming the file, line and key.
#pragma once
#include <string>

#include "engine/plan/machine.h"

namespace zt {

MachineProfile read_machine_profile(const std::string& path);

}  // namespace zt
