// This rank's memory by tier (the device's books, pinned host memory, NVMe) and kind of state:
// the start-up lines of the run's log and metrics.jsonl's rows of kind "memory".
#pragma once
#include <cstdint>

#include <nlohmann/json.hpp>

#include "engine/backend/backend.h"
#include "engine/comm/topology.h"
#include "engine/config/spec.h"
#include "engine/parallel/param_store.h"

namespace zt {

nlohmann::json memory_record(const Backend& be, const ParamStore& store, int rank, int64_t step);
void log_memory(const Backend& be, const ParamStore& store, const Topology& topo, const RunSpec& spec);

}  // namespace zt
