// Reading checkpoints: verification of every block's checksum, and loading this rank's states
// from the full tensors whatever layout wrote them (resharding).
#pragma once
#include <string>

#include "engine/model/model.h"
#include "engine/model/model_states.h"

namespace zt {

// Checks checkpoint `ckpt_dir`: its checkpoint.h5 opens, and every block of the rank files with
// index = part (mod parts) has its CRC-32 (so `parts` ranks share the work). Returns "" or the
// first problem, naming the file and the tensor.
std::string verify_checkpoint(const std::string& ckpt_dir, int part = 0, int parts = 1);

// The first tensor whose name or shape differs between the model and the checkpoint, as a
// message ("" when they match).
std::string model_mismatch(const std::string& ckpt_dir, const ParamTable& model);

// Loads this rank's master weights (and, unless weights_only, AdamW moments) from the
// checkpoint's full tensors into `store` (not collective: the caller agrees on failures, then
// calls ModelStates::publish_written_masters). Reads in blocks of at most 64 MiB. Checks first that
// the rank files with index = part (mod parts) are this checkpoint's own (the ranks share that).
void load_states(const std::string& ckpt_dir, ModelStates& store, const ParamTable& model, bool weights_only,
                 int part = 0, int parts = 1);

}  // namespace zt
