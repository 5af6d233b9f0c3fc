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
  int most_on_one = 1;  // ranks on the fullest machine
  bool on_device = false;  // timed over NCCL in device memory (else MPI in host memory)
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

// A link from measured times on n ranks (the arithmetic of measure_links): the step latency and the
// all-reduce's bus bandwidth from all-reduces of `small` and `large` bytes taking `t_small` and
// `t_large` seconds (t = steps x latency + S x factor / bandwidth, nccl-tests' terms, solved for
// both), then the reduce-scatter's and all-gather's bandwidths from their times for `large` bytes
// past that latency (at least half of each time counts as moving data: a latency that a noisy small
// run made too large does not make a bandwidth infinite).
Link link_from_times(int n, double small, double t_small, double large, double t_large, double t_reduce_scatter,
                     double t_all_gather);

}  // namespace zt
