// `ztrain supervise [--max-restarts N] [--backoff S] [--max-backoff S] -- COMMAND...`: runs a
// training job and reruns it after a runtime failure (exit status 1 or another non-zero one, a
// signal, a collective timeout) from its latest complete checkpoint, never after bad input (exit
// 2) or after the supervisor itself was told to stop. Waits S seconds before the first rerun,
// doubling up to --max-backoff; logs one line per attempt's end and appends a {"kind":"restart"}
// row to the run's metrics.jsonl. Its exit status is the last attempt's. See docs/runbooks.md.
#pragma once
#include <string>
#include <vector>

namespace zt {

// `args`: what follows "supervise" on the command line. Runs outside MPI (it is mpirun's parent).
int supervise_main(const std::vector<std::string>& args);

}  // namespace zt
