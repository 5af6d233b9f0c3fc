// Checkpoints: the layout on disk and what they hold besides the model states.
//
// DIR/step_00000100/            one checkpoint, visible under this name only once complete
//   checkpoint.h5               what a user opens: /params/<name>, /adam_m/<name>, /adam_v/<name>
//                               are HDF5 virtual datasets of each tensor's full shape (fp32)
//                               whatever layout wrote them; /meta/... the training state
//   rank_00000.h5 ...           one per rank: the blocks of the states that rank owns,
//                               /<state>/<name>/<k> with attributes row0, col0 and crc32
// DIR/step_00000100.tmp-<job>/  a save in progress (or one a crash interrupted)
// DIR/latest                    the name of the newest complete checkpoint
//
// Why virtual datasets over per-rank files rather than parallel HDF5 writing one file: each rank
// writes only its own blocks with plain serial HDF5 (Debian's libhdf5, no MPI-IO build), in
// parallel and without collective metadata operations, and a reader still sees every tensor whole
// (h5py: f["params/transformer.wte.weight"][()]), from any layout. Each block carries a CRC-32
// (zlib) of its float bytes as written: HDF5's Fletcher-32 filter would need chunked storage and
// reports errors only as failed reads, while ours names the file and tensor.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/loader.h"
#include "engine/optim/loss_scaler.h"

namespace zt {

constexpr int64_t kCheckpointFormat = 1;
constexpr const char* kCheckpointStates[] = {"params", "adam_m", "adam_v"};  // ModelStates::State order

// The resume check's probe: a few sequences and their loss under the saved weights, computed by
// the saving run (engine/train/resume_probe.h).
struct ResumeProbe {
  int64_t rows = 0, seq_len = 0;         // 0 rows: none (a checkpoint written before probes)
  std::vector<int32_t> inputs, targets;  // (rows, seq_len)
  double loss = 0;                       // mean over the rows of each row's mean loss
  std::string compute;                   // "fp32", "bf16", "fp16": the precision it was computed in
  std::string computed_on;               // backend, precision and layout: bit-equal only on the same
};

// The training state besides the model states.
struct TrainState {
  int64_t step = 0;        // optimizer steps done: the step the resumed run continues with
  int64_t adam_steps = 0;  // AdamW's t (skipped fp16 steps excluded)
  LossScaler::State scaler;
  data::LoaderPosition data;
  ResumeProbe probe;
  std::string spec_toml;   // the resolved spec of the run that wrote it
  // [lora]: the frozen base the adapters were trained on: where it came from ([model] init_from,
  // or "seed N") and its weights' fingerprint (engine/checkpoint/weights_fingerprint.h); empty
  // without adapters.
  std::string lora_base;
  uint64_t lora_base_fingerprint = 0;
  int64_t world = 1, tensor = 1, data_parallel = 1, zero_stage = 0;  // the layout that wrote it
};

std::string checkpoint_name(int64_t step);  // "step_00000100"
std::string rank_file_name(int rank);       // "rank_00003.h5"

}  // namespace zt
