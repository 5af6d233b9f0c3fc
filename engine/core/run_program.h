// Runs another program without a shell, so nothing a user named (a directory, an output path)
// is ever parsed as shell syntax.
#pragma once
#include <string>
#include <vector>

namespace zt {

// Runs argv (argv[0] looked up on PATH) in directory `cwd`, its stdout to /dev/null and its
// stderr into the file `stderr_path`, and waits for it. Its exit status; 128 + N when killed by
// signal N; -1 when it could not be started (errno says why: ENOENT, not installed).
int run_program(const std::vector<std::string>& argv, const std::string& cwd, const std::string& stderr_path);

}  // namespace zt
