// A user's machine profile for `ztrain plan --machine FILE.toml` (the fields of machine.h):
//
//   [machine]
//   base = "h100"            # a built-in profile whose values the rest of the file changes
//   name = "my-cluster"      # default: the file's name
//   gpus_per_machine = 8
//   price_per_hour = 98.32   # the whole machine; prints the cost per billion tokens
//   [gpu]                    # name, tflops (bf16 dense), vector_tflops (fp32), memory_gb_per_s, memory_gb
//   [intra]                  # name, bus_gb_per_s, step_latency_us: between the GPUs of a machine
//                            # (reduce_scatter_gb_per_s, all_gather_gb_per_s where they differ)
//   [network]                # the same, across machines, per GPU
//   [calibration]            # gemm, attention_forward, attention_backward, memory, vector:
//                            # fractions of the [gpu] figures (default: the built-in calibration)
//
// `ztrain doctor --write-machine FILE.toml` under mpirun writes one with the links it measured. Every key is checked: an unknown
// one, a wrong type or a value out of range is a UserError naming the file, line and key.
#pragma once
#include <string>

#include "engine/plan/machine.h"

namespace zt {

MachineProfile read_machine_profile(const std::string& path);

// The text of a machine file that reads back as `m` to 6 significant digits (its [calibration]
// too, where it has its own: one attention figure a direction, the first shape's);
// `base`: a built-in profile the file names for its [gpu] instead of writing it ("" for none);
// `comment`: the file's first lines (each prefixed "# ").
std::string machine_file_text(const MachineProfile& m, const std::string& base, const std::string& comment);

}  // namespace zt
