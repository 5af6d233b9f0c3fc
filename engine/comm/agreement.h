// Start-up agreement. Ranks start from their own command line and files, so a failure (a bad
// --set, a missing file on one machine) may hit some ranks only. Before any collective that
// could wait on a failed rank, the ranks decide together: every rank ends promptly with the same
// exit status, and each failure is printed once, by the rank that saw it.
#pragma once
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/comm.h"

namespace zt {

// Every rank passes the error its own start-up step raised (null if none). If any rank failed,
// each failing rank prints its error with its rank (rank 0 alone, without a rank, when every rank
// failed: the same bad file everywhere) and every rank throws PeerFailure carrying the job's exit
// status: 1 if any rank failed at run time, else 2. A group of one rethrows its own error.
void agree_on_failure(Comm& world, std::exception_ptr error);

// Runs f on every rank and agrees on its outcome (above).
void run_agreed(Comm& world, const std::function<void()>& f);

// Every rank must run the same spec: `entries` ("[section] key", value) from resolved_entries().
// Compared by hash; when a rank differs, the lowest such rank names the first differing key with
// both values, and every rank throws PeerFailure(2). No key may differ by design: ranks share
// out_dir, cache_dir and checkpoint dir (per-rank files inside them are named by rank).
void agree_on_spec(Comm& world, const std::vector<std::pair<std::string, std::string>>& entries);

}  // namespace zt
