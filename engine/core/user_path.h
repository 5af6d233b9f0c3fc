// Paths the user gave (a spec key, a command-line argument), checked before they are used, so
// that a bad one gets one message naming it (UserError, exit 2), never a raw filesystem error.
// `what` names the key or argument, e.g. `run.toml: [checkpoint] dir` or `export: --out` (empty:
// the message starts with the path).
#pragma once
#include <string>

namespace zt {

// A directory to write into: a directory, created with its parents when missing (with `create`;
// else it may be missing).
void check_dir_arg(const std::string& path, const std::string& what, bool create = true);
// A file to write (or append to): not a directory nor a device; its directory exists.
void check_output_file(const std::string& path, const std::string& what);
// A file to read: exists, a regular file (after following symlinks: no loop, no device such as
// /dev/zero, no directory).
void check_input_file(const std::string& path, const std::string& what);

}  // namespace zt
