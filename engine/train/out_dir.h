// [run] out_dir belongs to one run at a time.
#pragma once
#include "engine/config/spec.h"
#include "engine/core/dir_lock.h"

namespace zt {

// Rank 0, before writing anything: [run] out_dir is a directory (created if missing), not the
// home of the spec being run (config.resolved.toml would overwrite it), its metrics.jsonl (if
// any) a file, and no other run is using it: an exclusive lock on out_dir/.lock, held while the
// returned DirLock lives; UserError otherwise. Then writes out_dir/config.resolved.toml (the spec
// with every default and override, as the run uses it).
DirLock claim_out_dir(const RunSpec& spec);

}  // namespace zt
