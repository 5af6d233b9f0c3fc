// The files of a checkpoint directory (layout in checkpoint.h): names, listing, the `latest`
// pointer, and checkpoint.h5 (virtual datasets over the rank files, and the training state).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/model/model.h"

namespace zt {

class H5File;

struct CheckpointEntry {
  std::string path, name;
  int64_t step = 0;
  bool complete = false;  // a step_XXXXXXXX directory (a save in progress or interrupted: .tmp-JOB[.superseded-K])
  int64_t job_id = 0;     // of an incomplete one
  double bytes = 0;
};
// Every checkpoint directory under `dir`, oldest step first (empty when dir does not exist).
std::vector<CheckpointEntry> list_checkpoints(const std::string& dir);

// `latest` holds the newest complete checkpoint's name; written atomically and durably.
void write_latest(const std::string& dir, const std::string& name);
std::string read_latest(const std::string& dir);  // "" when absent
// The local checkpoint directory a user's path names: a checkpoint directory, its checkpoint.h5,
// or a checkpoint root (through `latest`). UserError when it names none.
std::string resolve_local_checkpoint(const std::string& path);

// One block of a rank file: rows [row0, row0 + rows) x columns [col0, col0 + cols) of tensor
// `param`, held under the same name in each state ("/<state>/<tensor>/<k>", k counting that
// tensor's blocks in the rank file's order).
struct RankBlock {
  int param;
  int64_t row0, col0, rows, cols;
};
// Rank 0, after every rank wrote its rank file into `ckpt_dir`: checkpoint.h5 with a virtual
// dataset per state and tensor over the rank files' blocks (blocks[r]: rank r's, in its file's
// order), and the training state. The rank files need not be on this machine (an s3:// dir with a
// local_dir per host): their layout comes from `blocks`, not from reading them. Each rank file
// carries the job_id, step and rank of the save that wrote it (attributes of "/"); the master
// file, the job_id.
void write_master_file(const std::string& ckpt_dir, const std::vector<std::vector<RankBlock>>& blocks,
                       int64_t job_id, const ParamTable& model, const TrainState& state);
// "" when rank file `rank` of `ckpt_dir` (open as `f`) was written by the save that wrote
// `master` (at `step`), else why not. Checkpoints older than these attributes pass.
std::string rank_file_mismatch(const H5File& master, const H5File& f, int64_t step, int rank);
// The training state of checkpoint.h5 in `ckpt_dir` (UserError naming the file when damaged).
TrainState read_train_state(const std::string& ckpt_dir);

}  // namespace zt
