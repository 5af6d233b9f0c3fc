// Low-rank adapters out of a LoRA checkpoint, and back in:
// - PEFT's adapter directory (`ztrain export --format peft`): adapter_model.safetensors with PEFT's
//   tensor names (base_model.model.<module>.lora_A.weight (r, in), .lora_B.weight (out, r)) and
//   adapter_config.json (peft_type LORA, r, lora_alpha, target_modules, ...), as PEFT's
//   save_pretrained writes them;
// - the merged model (`--format hf --merge-lora`): every weight of the base the checkpoint records
//   ([model] init_from's directory, or the seed's initialization), W + alpha / r B A where an
//   adapter is, in Hugging Face's names and layouts with config.json: any HF loader (and
//   ztrain's [model] init_from) reads it as a plain model;
// - [lora] init_from: a PEFT adapter directory whose adapters start a run.
#pragma once
#include <cstdint>
#include <string>

#include "engine/config/spec.h"
#include "engine/core/dtype.h"
#include "engine/model/model_states.h"
#include "engine/model/param_table.h"

namespace zt {

// `base_dir`: the base's directory when not the one the checkpoint records (empty: that one).
// Each returns a one-line summary.
std::string export_peft(const std::string& ckpt_dir, const std::string& out_dir, DType dtype);
std::string export_merged(const std::string& ckpt_dir, const std::string& out_dir, DType dtype, uint64_t max_file_bytes,
                          const std::string& base_dir);

// The first reason the PEFT adapter directory `dir` does not fit [lora] l over the adapters'
// table (its r, lora_alpha, target modules, a missing or misshapen tensor); "" when it fits.
std::string peft_mismatch(const std::string& dir, const RunSpec::Lora& l, const ParamTable& adapters);
// Loads this rank's adapter masters from `dir` into `store` (not collective: the caller agrees
// on failures, then calls publish_written_masters).
void load_peft_adapters(const std::string& dir, ModelStates& store, const ParamTable& adapters);

}  // namespace zt
