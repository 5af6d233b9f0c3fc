// `ztrain plan --calibration FILE`: the efficiencies of step_time.h from a measurement, in the
// format tools/gpu_check.sh writes ($OUT/calibration.json; the H200's is bench/calibration/
// h200.json): the GPU it came from, its datasheet bf16 peak, the GEMMs at the model's shapes,
// the attention kernels per shape and the device memory's copy bandwidth. UserError naming the
// file and the field for a file that lacks one or whose GPU is not a known profile's.
#pragma once
#include <string>

#include "engine/plan/step_time.h"

namespace zt {

Calibration read_calibration(const std::string& path);

}  // namespace zt
