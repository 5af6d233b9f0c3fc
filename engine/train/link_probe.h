// The job's links measured the way its step uses them, for `ztrain doctor` under mpirun: each
// collective the planner prices (all-reduce, reduce-scatter, all-gather) timed on the job's own
// ranks, inside a machine and across machines separately, and written as the [intra] and
// [network] of a machine profile (engine/plan/machine_file.h).
#pragma once
#include <optional>
#include <string>

#include "engine/plan/machine.h"

namespace zt {

class Backend;

struct MeasuredLinks {
  int machines = 1;     // hosts (ranks grouped by MPI's shared-memory split)
  int per_machine = 1;  // ranks on each; 0 when the hosts hold different numbers
  Link world;           // all the job's ranks
  // The ranks of each machine, every machine at once (none with one rank a machine), and the ranks
  // with the same local rank on every machine, all such groups at once: what a data-parallel group
  // of one GPU a machine gets from the network while every GPU uses it (none on one machine). Where
  // the world is that group (one machine; one rank a machine) it is the world's figures.
  std::optional<Link> intra, network;
};

// Collective over MPI_COMM_WORLD. `device`: time NCCL on that backend's device memory (a GPU job
// whose [comm] backend is NCCL); null: MPI in host memory, as the CPU backend moves it. Each figure
// is the best of a few runs (a busy host or a filter's queue slows single runs; the link's rate is
// the fastest) and, where groups run at once, the slowest group's.
MeasuredLinks measure_links(double timeout_s, Backend* device);

// "all-reduce 0.0232, reduce-scatter 0.0121, all-gather 0.0240 GB/s bus; 35 us a step"
std::string link_figures(const Link& l);

}  // namespace zt
