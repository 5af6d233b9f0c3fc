// `ztrain report RUN_DIR`: a PNG dashboard of a run from its metrics.jsonl: train and val loss,
// tokens/s and MFU, the step breakdown stacked (shares of the step time), and memory over time
// (the "device" telemetry rows). Drawn by gnuplot (Debian: gnuplot-nox): a small C program with a
// PNG (cairo) terminal, so the report needs no Python; ztrain writes the data and the script and
// runs it.
#pragma once
#include <string>

#include "engine/config/spec.h"

namespace zt {

// Writes the dashboard to `png` (default RUN_DIR/report.png); returns its path. `run_spec`: the
// run's config.resolved.toml as loaded (its mixture's configured weights are drawn beside the
// measured ones), null when it could not be read. UserError when RUN_DIR has no metrics.jsonl
// with train rows or gnuplot is missing.
std::string write_report(const std::string& run_dir, const std::string& png, const RunSpec* run_spec);

}  // namespace zt
