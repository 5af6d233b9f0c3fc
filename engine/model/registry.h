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
// `recompute`: [train] recompute.
std::unique_ptr<Model> make_model(const RunSpec::Model& spec, Backend& backend, int max_batch, Comm* tp,
                                  Recompute recompute = Recompute::None);
Recompute recompute_of(const std::string& name);  // [train] recompute's value

// What that model holds on one rank of a tensor-parallel group of `tp`, computed from the shapes
// alone (nothing is built; doubles, so that absurd specs cannot overflow): its parameter elements
// and the bytes of its activation buffer with `compute_size`-byte activations.
struct ModelFootprint {
  double params = 0, activation_bytes = 0;
};
ModelFootprint model_footprint(const RunSpec::Model& spec, int max_batch, int tp, size_t compute_size,
                               Recompute recompute = Recompute::None);

}  // namespace zt
