// `ztrain debug dump-state`: the model at initialization, its first micro-batch, the loss and every
// gradient, written to HDF5 for the PyTorch parity test; optionally the batches, losses and final
// parameters of the first N training steps too.
#pragma once
#include <string>

#include "engine/config/spec.h"

namespace zt {

// File layout (all fp32 unless noted, full logical shapes, PyTorch names):
//   /params/<name>, /grads/<name>        initial parameters; gradient of /out/loss
//                                        ([lora]: /params has the frozen weights and the
//                                        adapters, /grads the adapters' only)
//   /batch/inputs, /batch/targets        int32 (micro_batch, seq_len): global samples 0..B-1
//   /out/loss                            scalar, mean cross-entropy of that batch
//   /out/logits                          (micro_batch, vocab_size): logits of each sequence's last
//                                        position, in compute precision widened to fp32
//   /compute/<name>                      bf16/fp16 compute only: the compute-precision copy of
//                                        /params that the model reads, widened to fp32
//   /config/<key>                        float64 scalars: model dims, optimizer settings,
//                                        schedule (0 cosine, 1 linear, 2 constant), max_steps,
//                                        micro_batch, global_batch
// With train_steps = S > 0, after S optimizer steps from the same initialization:
//   /train/inputs, /train/targets        int32 (S, global_batch, seq_len), in the order used
//   /train/loss, /train/lr, /train/grad_norm   float64 (S)
//   /final/<name>                        parameters after S steps
void dump_state(const RunSpec& spec, const std::string& out_path, int train_steps);

}  // namespace zt
