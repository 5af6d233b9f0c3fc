// A run's start weights (see start_weights.h).
#include "engine/train/start_weights.h"

#include "engine/checkpoint/weights_fingerprint.h"
#include "engine/comm/agreement.h"
#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/core/timer.h"
#include "engine/hf/hf_weights.h"
#include "engine/hf/lora_export.h"

namespace zt {

void load_hf_init(Job& job, const RunSpec& spec, const Topology& topo) {
  const std::string& dir = spec.model.init_from;
  if (dir.empty()) return;
  Timer t;
  run_agreed(*topo.world, [&] {
    try {
      const std::string mismatch = hf_mismatch(dir, spec.model.arch, *job.model);
      if (!mismatch.empty()) user_error("does not fit the model: {}", mismatch);
      load_hf_weights(dir, spec.model.arch, job.weights(), *job.model);
    } catch (const UserError& e) {
      user_error("{}: [model] init_from = \"{}\": {}", spec.source, dir, e.what());
    }
  });
  job.weights().publish_written_masters();
  if (topo.is_root())
    spdlog::info("init_from: weights from {} ({} parameters, resharded to this layout in {:.2f} s; optimizer fresh)",
                 dir, job.model->num_global_params(), t.seconds());
}

LoraBase lora_base(Job& job, const RunSpec& spec, Comm& world, bool root) {
  if (!job.base) return {};
  LoraBase b;
  b.origin = spec.model.init_from.empty() ? fmt::format("seed {}", spec.run.seed) : spec.model.init_from;
  b.fingerprint = weights_fingerprint(*job.base, job.model->table(), world);
  if (root)
    spdlog::info("lora: rank {}, alpha {:g}, on {} of every block: {} adapter parameters train, {} frozen "
                 "(base {}, fingerprint {:016x})", spec.lora.rank, spec.lora.alpha, spec.lora.targets,
                 job.trained_table().num_global_params(), job.model->num_global_params(), b.origin, b.fingerprint);
  return b;
}

void check_lora_base(const TrainState& st, const LoraBase& base, const std::string& path) {
  if (st.lora_base_fingerprint == base.fingerprint && st.lora_base.empty() == base.origin.empty()) return;
  user_error("checkpoint {}'s adapters were trained on the base weights of {} (fingerprint {:016x}); this run's base "
             "is {} (fingerprint {:016x}): adapters fit only the weights they were trained on (set [model] init_from "
             "to that base)", path, st.lora_base, st.lora_base_fingerprint, base.origin, base.fingerprint);
}

void init_lora_from_peft(Job& job, const RunSpec& spec, bool root) {
  const std::string& dir = spec.lora.init_from;
  if (dir.empty()) return;
  try {
    const std::string mismatch = peft_mismatch(dir, spec.lora, job.trained_table());
    if (!mismatch.empty()) user_error("does not fit: {}", mismatch);
    load_peft_adapters(dir, *job.store, job.trained_table());
  } catch (const UserError& e) {
    user_error("{}: [lora] init_from = \"{}\": {}", spec.source, dir, e.what());
  }
  if (root) spdlog::info("lora: adapters from {} (optimizer fresh)", dir);
}

}  // namespace zt
