// `ztrain doctor [SPEC.toml]`: checks a machine before an expensive job starts on it, one line per
// check with PASS / WARN / FAIL and the fix: GPUs (NVML: name, compute capability, PCIe and NVLink,
// ECC, clocks held down), driver and CUDA versions, NCCL and MPI, the job's all-reduce bandwidth
// (under mpirun), host memory, ulimits (memlock, open files), and with a spec: one HEAD to each
// s3:// or http(s):// data source, the checkpoint store, and free space and write speed of
// cache_dir, out_dir and the local checkpoint directory. Without a GPU the GPU lines say so.
#pragma once
#include <string>

#include "engine/config/spec.h"

namespace zt {

// Prints the report (rank 0 everything; other ranks what is not a pass); returns 1 if any check
// failed, else 0. `spec` may be null (machine checks only). `write_machine`: a path to write the
// measured machine profile to (engine/plan/machine_file.h), or "".
int run_doctor(const RunSpec* spec, const std::string& write_machine);

}  // namespace zt
