// Claiming [run] out_dir (see out_dir.h).
#include "engine/train/out_dir.h"

#include <filesystem>
#include <string>

#include "engine/core/atomic_file.h"
#include "engine/core/status.h"
#include "engine/core/user_path.h"

namespace zt {

DirLock claim_out_dir(const RunSpec& spec) {
  namespace fs = std::filesystem;
  const fs::path dir(spec.run.out_dir);
  check_dir_arg(dir.string(), fmt::format("{}: [run] out_dir", spec.source));
  std::error_code ec;
  const fs::path resolved = dir / "config.resolved.toml";
  if (fs::exists(resolved, ec) && fs::equivalent(resolved, spec.source, ec))
    user_error("{}: this is the run's own config.resolved.toml in [run] out_dir, which the run rewrites; copy it "
               "elsewhere first, or pass --set run.out_dir=ANOTHER_DIR", spec.source);
  check_output_file((dir / "metrics.jsonl").string(), fmt::format("{}: [run] out_dir", spec.source));
  DirLock lock(dir.string(), ".lock", fmt::format("{}: [run] out_dir = \"{}\"", spec.source, dir.string()),
               "wait for it to end, or choose another out_dir");
  write_file_atomic(resolved.string(), resolved_toml(spec));
  return lock;
}

}  // namespace zt
