// The models ztrain can build, by [model] arch. Declared here for the engine; defined in
// models/registry.cpp, the one place that names concrete models.
#pragma once
#include <memory>

#include "engine/backend/backend.h"
#include "engine/config/spec.h"
#include "engine/model/model.h"

namespace zt {

class Comm;

// The model [model] describes, with activations for micro-batches of up to max_batch sequences;
// `tp` is the tensor-parallel group (null: the whole model on this rank).
std::unique_ptr<Model> make_model(const RunSpec::Model& spec, Backend& backend, int max_batch, Comm* tp);

}  // namespace zt
