// A model family ([model] arch): what ztrain knows about one architecture, in one entry per family
// (models/gpt2_family.cpp, models/llama_family.cpp) found through the registry (registry.h):
// its [model] defaults and checks, its Hugging Face names and config.json, how to build it and
// what it holds. The engine asks the entry and never names a family.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/config/model_keys.h"
#include "engine/config/spec.h"
#include "engine/model/model.h"

namespace zt {

class Comm;

// What a model holds on one rank of a tensor-parallel group, from the shapes alone (nothing is
// built; doubles, so that absurd specs cannot overflow): parameter elements, and the bytes of its
// activation buffer with `compute_size`-byte activations.
struct ModelFootprint {
  double params = 0, activation_bytes = 0;
};

// A Hugging Face model directory's config.json, as engine/hf reads it: a missing or malformed
// field is a UserError naming the file and the field. A field may be a dotted path into an object
// ("rope_parameters.rope_theta"). Every field the family reads (a value, its JSON text) or ignores
// is accounted for; non-null config.json fields left over after read_hf_config are refused by
// name, since a field ztrain does not know may change the model's math (a new RoPE spelling did).
class HfConfigView {
 public:
  virtual ~HfConfigView() = default;
  virtual void ignore(const char* field) const = 0;  // read on purpose as nothing: why at the call
  virtual bool has(const char* field) const = 0;       // present and not null
  virtual bool contains(const char* field) const = 0;  // present, null or not
  virtual int64_t integer(const char* field) const = 0;  // a size in [0, 2^31]; required
  virtual double number(const char* field, double dflt) const = 0;
  virtual std::string string(const char* field, const char* dflt) const = 0;
  virtual bool boolean(const char* field, bool dflt) const = 0;
  virtual std::string json(const char* field) const = 0;  // the field as JSON text, for messages
  [[noreturn]] virtual void reject(const std::string& why) const = 0;  // UserError naming the file
};

// config.json's fields as a family writes them (engine/hf turns them into JSON).
using HfValue = std::variant<std::nullptr_t, int64_t, double, bool, std::string, std::vector<std::string>>;
using HfConfigFields = std::vector<std::pair<std::string, HfValue>>;

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  virtual const char* name() const = 0;  // its [model] arch

  // The family's defaults for keys the spec left out and its checks of keys whose meaning
  // depends on the family; the spec reader has checked the generic ones (sizes, divisibility).
  virtual void resolve(RunSpec::Model& m, const ModelKeyChecks& c) const = 0;

  // The model [model] m describes, with activations for micro-batches of up to max_batch
  // sequences; `tp` is the tensor-parallel group (null: the whole model on this rank), the
  // sequence region split across it with `sequence_parallel`; with `lora` enabled its weights are
  // frozen and low-rank adapters train (engine/model/lora.h).
  virtual std::unique_ptr<Model> make(const RunSpec::Model& m, Backend& backend, int max_batch, Comm* tp,
                                      Recompute recompute, bool sequence_parallel,
                                      const RunSpec::Lora& lora) const = 0;
  // The backend ops that model calls in forward and backward, in compute dtype `compute`
  // (the loss and optimizer ops are the engine's: registry.h's unsupported_op adds them).
  virtual std::vector<Backend::OpRequest> ops(const RunSpec::Model& m, DType compute) const = 0;
  // What that model holds on one rank of a tensor-parallel group of `tp` (nothing built).
  virtual ModelFootprint footprint(const RunSpec::Model& m, int max_batch, int tp, size_t compute_size,
                                   Recompute recompute, bool sequence_parallel) const = 0;

  // The weights of the matrix products one token passes through in the full model: every linear
  // layer and the output head over the real vocabulary; not the embedding lookups, positions,
  // norms or biases. The N of the model FLOPs 6N (observe/throughput.h).
  virtual double matmul_params(const RunSpec::Model& m) const = 0;
  // The low-rank adapters' parameters [lora] l adds to the full model (A and B of every targeted
  // layer); 0 without adapters.
  virtual double lora_params(const RunSpec::Model& m, const RunSpec::Lora& l) const = 0;

  // The roles of its linear layers that [lora] targets name, in block order ("q", "k", ...; GPT-2's
  // packed attention input is "qkv"); the model maps each to its layer.
  virtual std::vector<std::string> lora_roles() const = 0;
  // The roles adapted when [lora] targets is empty, as PEFT's defaults ("q,v" for Llama).
  virtual std::string lora_default_targets() const = 0;

  // Hugging Face: whether config.json's model_type is one this family reads, the [model] keys
  // it determines (UserError through c.reject for a model the family cannot build), and the
  // config.json fields of [model] m (torch_dtype "float32", "bfloat16" or "float16").
  virtual bool reads_hf_model_type(const std::string& model_type) const = 0;
  virtual std::vector<HfModelKey> read_hf_config(const HfConfigView& c) const = 0;
  virtual HfConfigFields hf_config(const RunSpec::Model& m, const char* torch_dtype) const = 0;
  // Our parameter names are Hugging Face's; whether `name` is stored transposed there (GPT-2's
  // Conv1D weights are (in, out), ours (out, in) as nn.Linear), and whether Hugging Face's tensor
  // may have more rows than ours, the first ones used (GPT-2's learned positions: a model trained
  // for more positions fine-tunes at a shorter seq_len).
  virtual bool hf_transposed(const std::string& name) const { return false; }
  virtual bool hf_row_prefix(const std::string& name) const { return false; }
};

}  // namespace zt
