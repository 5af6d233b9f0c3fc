// Hugging Face weights in and out: `ztrain export` writes a checkpoint as safetensors with
// config.json; [model] init_from loads such a directory into this rank's shards, whatever the
// layout (tensor parallelism, ZeRO stage).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/checkpoint/h5_file.h"
#include "engine/config/spec.h"
#include "engine/core/dtype.h"
#include "engine/hf/safetensors.h"
#include "engine/model/model.h"
#include "engine/model/model_states.h"

namespace zt {

// A parameter's tensor in a Hugging Face directory's files, or null. GPT-2 checkpoints published by
// OpenAI's conversion (the Hub's `gpt2`) name them without the `transformer.` prefix: both are read.
const SafeTensor* find_tensor(const SafetensorsDir& w, const std::string& name);
// Reads elements [first, first + n) of checkpoint dataset `ds` (a tensor's full shape, row-major)
// from `f`, which must outlive it.
std::function<void(uint64_t first, uint64_t n, float* out)> checkpoint_reader(const H5File& f, const std::string& ds);

// An export directory written whole: `write` fills a directory built beside out_dir (returning
// the weights files it wrote) and out_dir is replaced by it, keeping what else the user keeps
// there (a tokenizer, a README) except the names `replaced` says the export writes. Returns the
// weights files' bytes. UserError for an out_dir that cannot be swapped (a run's directory, ...).
uint64_t export_into(const std::string& out_dir, const std::function<bool(const std::string& name)>& replaced,
                     const std::function<std::vector<std::string>(const std::string& building)>& write);

// A Hugging Face model directory out of `tensors` (our names mapped, in Hugging Face's layouts)
// with config.json for [model] m, written whole (export_into); the weights files and their bytes.
struct HfWritten {
  size_t files = 0;  // the safetensors files and index
  uint64_t bytes = 0;
};
HfWritten export_hf_model(const std::string& out_dir, const std::vector<TensorSource>& tensors, const RunSpec::Model& m,
                          DType dtype, uint64_t max_file_bytes);

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
