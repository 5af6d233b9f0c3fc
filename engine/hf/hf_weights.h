// Hugging Face weights in and out: `ztrain export` writes a checkpoint as safetensors with
// config.json; [model] init_from loads such a directory into this rank's shards, whatever the
// layout (tensor parallelism, ZeRO stage).
#pragma once
#include <cstdint>
#include <string>

#include "engine/core/dtype.h"
#include "engine/model/model.h"
#include "engine/model/model_states.h"

namespace zt {

// Writes checkpoint `ckpt_dir`'s parameters to out_dir as Hugging Face names and layouts in
// `dtype` (model.safetensors, split above max_file_bytes) with config.json. Returns a summary.
std::string export_hf(const std::string& ckpt_dir, const std::string& out_dir, DType dtype, uint64_t max_file_bytes);

// The first difference between `model` and the weights in `dir` (a missing or extra tensor, a
// shape), as a message; "" when they fit.
std::string hf_mismatch(const std::string& dir, const std::string& arch, const Model& model);

// Loads this rank's master weights from `dir` into `store` (not collective: the caller agrees on
// failures, then calls ModelStates::publish_written_masters).
void load_hf_weights(const std::string& dir, const std::string& arch, ModelStates& store, const Model& model);

}  // namespace zt
