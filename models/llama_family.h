// The Llama-shaped families' shared entry (engine/model/family.h): one model (models/llama.h)
// whose options and config.json each family sets. models/llama_family.cpp (Llama 2/3),
// models/mistral_family.cpp and models/qwen_families.cpp (Qwen2/2.5, Qwen3) derive from it;
// each says what differs: its names, its options, its own config.json fields.
#pragma once
#include <string>
#include <vector>

#include "engine/model/family.h"

namespace zt {

// What sets one Llama-shaped family apart.
struct LlamaShape {
  const char* name;      // [model] arch, and config.json's model_type
  const char* hf_class;  // config.json's architectures[0]
  bool qkv_bias = false;  // biases on q, k and v (Qwen2)
  bool qk_norm = false;   // an RMSNorm of each q and k head before RoPE (Qwen3)
};

class LlamaShapedFamily : public ModelFamily {
 public:
  explicit LlamaShapedFamily(LlamaShape shape) : shape_(shape) {}
  const char* name() const override { return shape_.name; }

  void resolve(RunSpec::Model& m, const ModelKeyChecks& c) const override;
  std::unique_ptr<Model> make(const RunSpec::Model& m, Backend& backend, int max_batch, Comm* tp, Recompute rc,
                              bool sequence_parallel, const RunSpec::Lora& lora) const override;
  std::vector<std::string> lora_roles() const override;
  std::string lora_default_targets() const override { return "q,v"; }  // PEFT's q_proj, v_proj
  std::vector<Backend::OpRequest> ops(const RunSpec::Model& m, DType compute) const override;
  ModelFootprint footprint(const RunSpec::Model& m, int max_batch, int tp, size_t compute_size, Recompute rc,
                           bool sequence_parallel) const override;
  double matmul_params(const RunSpec::Model& m) const override;
  double lora_params(const RunSpec::Model& m, const RunSpec::Lora& l) const override;

  bool reads_hf_model_type(const std::string& type) const override { return type == shape_.name; }
  std::vector<HfModelKey> read_hf_config(const HfConfigView& c) const override;
  HfConfigFields hf_config(const RunSpec::Model& m, const char* torch_dtype) const override;

 protected:
  // The family's own config.json fields: read (or refused by name) on import, written on export.
  virtual void read_family_fields(const HfConfigView& c) const {}
  virtual void write_family_fields(const RunSpec::Model& m, HfConfigFields& out) const {}
  // Sliding-window attention's fields as Mistral and Qwen spell them: `sliding_window` null, or
  // (Qwen) a size that `use_sliding_window = false` leaves unused (with max_window_layers, the
  // layers it would apply to); anything else is refused, since ztrain attends over the whole
  // causal context.
  static void full_attention_only(const HfConfigView& c, bool has_use_flag);

 private:
  LlamaShape shape_;
};

}  // namespace zt
