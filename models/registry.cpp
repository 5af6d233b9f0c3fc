// The model registry (engine/model/registry.h): the one list of the families.
#include "engine/model/registry.h"

#include "engine/core/status.h"

namespace zt {

const ModelFamily& gpt2_family();   // models/gpt2_family.cpp
const ModelFamily& llama_family();    // models/llama_family.cpp
const ModelFamily& mistral_family();  // models/mistral_family.cpp
const ModelFamily& qwen2_family();    // models/qwen_families.cpp
const ModelFamily& qwen3_family();

const char* default_model_family() { return "gpt2"; }

const std::vector<const ModelFamily*>& model_families() {
  static const std::vector<const ModelFamily*> all = {&gpt2_family(), &llama_family(), &mistral_family(),
                                                              &qwen2_family(), &qwen3_family()};
  return all;
}

const ModelFamily* find_model_family(const std::string& arch) {
  for (const ModelFamily* f : model_families())
    if (arch == f->name()) return f;
  return nullptr;
}

std::string model_family_names(bool quoted) {
  std::string out;
  for (const ModelFamily* f : model_families())
    out += std::string(out.empty() ? "" : ", ") + (quoted ? "\"" : "") + f->name() + (quoted ? "\"" : "");
  return out;
}

const ModelFamily& model_family(const std::string& arch) {
  if (const ModelFamily* f = find_model_family(arch)) return *f;
  throw UserError(fmt::format("[model] arch = \"{}\" is not a supported architecture (supported: {})", arch,
                              model_family_names()));
}

std::unique_ptr<Model> make_model(const RunSpec::Model& m, Backend& backend, int max_batch, Comm* tp, Recompute rc,
                                  bool sequence_parallel, const RunSpec::Lora& lora) {
  return model_family(m.arch).make(m, backend, max_batch, tp, rc, sequence_parallel, lora);
}

std::vector<Backend::OpRequest> run_ops(const RunSpec::Model& m, DType compute) {
  std::vector<Backend::OpRequest> ops = model_family(m.arch).ops(m, compute);
  // the loss (engine/model/tensor_parallel: whole or vocabulary-parallel logits) and the
  // optimizer (clipping, AdamW; an offloaded optimizer runs them on the host's CPU backend)
  for (const char* op : {"softmax_crossentropy", "logits_row_max", "logits_row_sumexp", "logits_pick_target",
                         "crossentropy_grad_from_lse", "sum_accumulate", "add", "scale", "sum_squares_accumulate",
                         "adamw_update"})
    ops.push_back({op, compute});
  return ops;
}

std::string unsupported_op(const Backend& backend, const RunSpec::Model& m, DType compute) {
  for (const Backend::OpRequest& r : run_ops(m, compute))
    if (std::string why = backend.supports(r); !why.empty()) return fmt::format("{}: {}", r.op, why);
  return "";
}

ModelFootprint model_footprint(const RunSpec::Model& m, int max_batch, int tp, size_t compute_size, Recompute rc,
                               bool sequence_parallel) {
  return model_family(m.arch).footprint(m, max_batch, tp, compute_size, rc, sequence_parallel);
}

}  // namespace zt
