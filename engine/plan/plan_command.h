// `ztrain plan`: what a spec needs on each rank, and with a machine profile how fast its step runs
// there (layout_plan.h, step_time.h); --search ranks the layouts that fit, --compare answers the
// buyer's question over several machine profiles. Output for people, or JSON (--json).
#pragma once
#include <string>
#include <vector>

#include "engine/config/spec.h"

namespace zt {

struct PlanOptions {
  int world = 1;
  std::string gpu;          // a built-in machine profile (machine.h)
  std::string machine;      // a machine profile file (machine_file.h)
  std::string calibration;  // a calibration file (calibration_file.h); empty: default_calibration()
  std::string device_memory;            // bytes a rank may use ("80GB"); empty: the machine's, the spec's
  std::vector<std::string> compare;     // machine profiles (names or .toml files) to compare
  bool search = false, json = false;
};

// Prints the plan; returns the exit status (0). UserError for bad options or a spec that cannot fit.
int plan_command(const PlanOptions& o, const RunSpec& spec);

}  // namespace zt
