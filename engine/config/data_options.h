// The data pipeline's options from the run spec's [data] section (the data layer knows no RunSpec).
#pragma once
#include "data/loader.h"
#include "engine/config/spec.h"

namespace zt {

data::DataOptions data_options(const RunSpec& spec);

}  // namespace zt
