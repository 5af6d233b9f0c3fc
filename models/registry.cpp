// Model registry (see registry.h).
#include "engine/model/registry.h"

#include "engine/core/status.h"
#include "models/gpt2.h"

namespace zt {

std::unique_ptr<Model> make_model(const RunSpec::Model& m, Backend& backend, int max_batch, Comm* tp) {
  if (m.arch == "gpt2")
    return std::make_unique<GPT2>(GPT2Config{int(m.n_layer), int(m.n_head), int(m.d_model), int(m.d_ff),
                                             int(m.vocab_size), int(m.seq_len)},
                                  backend, max_batch, tp);
  // The spec's validation names the supported architectures; reaching here is a missing entry.
  throw UserError(fmt::format("[model] arch = \"{}\" is not a supported architecture", m.arch));
}

}  // namespace zt
