// Checkpoints in object storage ([checkpoint] dir = "s3://bucket/prefix"): each checkpoint is
// written to a local directory first (the cache), then uploaded in the background with the data
// layer's store (multipart, retries); a checkpoint exists in the store once its checkpoint.h5,
// uploaded last, does. Objects: <prefix>/step_XXXXXXXX/{rank_NNNNN.h5, checkpoint.h5}, <prefix>/latest.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/store/object_store.h"
#include "engine/config/spec.h"

namespace zt {

bool is_remote_dir(const std::string& dir);
// Where checkpoints are written locally: a local dir itself; for an s3:// dir (or none, when an
// s3:// checkpoint is resumed) local_dir, or <run.out_dir>/checkpoints.
std::string local_checkpoint_root(const RunSpec& spec);
// The store behind an s3:// dir: `data` holds [data]'s credentials, endpoint and retries
// (data_options(spec).store); uploads go in parts of [checkpoint] upload_part_mb.
std::unique_ptr<data::ObjectStore> open_checkpoint_store(const RunSpec& spec, data::StoreOptions data,
                                                         const std::string& uri);

// Names ("step_00000100") of the complete checkpoints in the store, oldest first.
std::vector<std::string> remote_checkpoints(data::ObjectStore& store);
// Downloads checkpoint `name` into local_root/name (through a temporary name; nothing is
// downloaded when a complete local copy exists). Returns the local path.
std::string download_checkpoint(data::ObjectStore& store, const std::string& name, const std::string& local_root,
                                bool* fetched = nullptr);
// Deletes the objects of complete checkpoints older than the newest keep_last, and of incomplete
// ones older than the newest complete one (left by crashed jobs).
void prune_remote(data::ObjectStore& store, int64_t keep_last);

}  // namespace zt
