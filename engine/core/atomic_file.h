// Whole-file writes that never leave a half-written file under the real name: the bytes go to
// PATH.tmp, which is renamed over PATH once complete. On failure PATH.tmp is removed and the error
// names the file and the system's reason (a full disk says so).
#pragma once
#include <string>
#include <string_view>

namespace zt {

// `durable`: fsync the file before the rename and the directory after it (checkpoints, shards).
// RuntimeFailure on any error.
void write_file_atomic(const std::string& path, std::string_view bytes, bool durable = false);

// Puts the directory `built` (complete) where `dir` is: atomically where the filesystem can
// exchange the two (renameat2), else by two renames (a crash between them leaves the previous
// one whole in DIR.previous-PID). The previous `dir`, if any, is then removed. RuntimeFailure on
// any error, with `dir` untouched.
void replace_dir_atomic(const std::string& built, const std::string& dir);

// fsync of a file or directory (directories: after a rename into them, so the entry is durable).
void fsync_path(const std::string& path);

}  // namespace zt
