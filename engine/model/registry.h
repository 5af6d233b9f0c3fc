// The model families ztrain can build, by [model] arch (family.h). Declared here for the engine;
// defined in models/registry.cpp, the one place that lists the families.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/config/spec.h"
#include "engine/model/family.h"
#include "engine/model/model.h"

namespace zt {

class Comm;

const std::vector<const ModelFamily*>& model_families();
// The family named `arch`, or null.
const ModelFamily* find_model_family(const std::string& arch);
// The family named `arch`; UserError naming the supported ones otherwise.
const ModelFamily& model_family(const std::string& arch);
// The supported families for messages: "\"a\", \"b\"" (quoted) or "a, b".
std::string model_family_names(bool quoted = true);

// The model [model] describes (its family's make), for micro-batches of up to max_batch
// sequences; `tp` is the tensor-parallel group (null: the whole model on this rank), with
// Megatron sequence parallelism over it when `sequence_parallel`.
std::unique_ptr<Model> make_model(const RunSpec::Model& spec, Backend& backend, int max_batch, Comm* tp,
                                  Recompute recompute = Recompute::None, bool sequence_parallel = false,
                                  const RunSpec::Lora& lora = {});

// The first op a run of [model] m in `compute` needs that `backend` cannot run, as a message
// ("op: why"); "" when it runs them all. The model's ops (its family's), the vocabulary-parallel
// loss, gradient clipping and AdamW.
std::string unsupported_op(const Backend& backend, const RunSpec::Model& m, DType compute);
// The ops unsupported_op asks about: the family's, the loss's and the optimizer's.
std::vector<Backend::OpRequest> run_ops(const RunSpec::Model& m, DType compute);

// What that model holds on one rank of a tensor-parallel group of `tp` (its family's footprint).
ModelFootprint model_footprint(const RunSpec::Model& spec, int max_batch, int tp, size_t compute_size,
                               Recompute recompute = Recompute::None, bool sequence_parallel = false);

}  // namespace zt
