// What a collective costs on a link: the ring algorithm's alpha-beta model in nccl-tests' terms.
// nccl-tests reports algbw = S / t and busbw = algbw x factor, factor 2(n-1)/n for all-reduce,
// (n-1)/n for all-gather and reduce-scatter (S the whole gathered buffer), 1 for broadcast: busbw
// is what each rank's link carries, the same figure whatever n. So t = S x factor / busbw, plus a
// latency of the link's step latency times the steps: the ring's (2(n-1) for all-reduce, n-1 for
// the others) or, fewer on large groups, a tree's (2 log2 n for all-reduce, log2 n for the others):
// NCCL picks a tree (all-reduce) or PAT (all-gather, reduce-scatter, NCCL 2.23+) where the
// latency would dominate, so a ring's 2(n-1) steps never stand for 512 ranks.
#pragma once
#include <string>

#include "engine/plan/machine.h"

namespace zt {

enum class CollectiveKind { AllReduce, ReduceScatter, AllGather, Broadcast };
const char* collective_name(CollectiveKind k);  // "all-reduce", ...

// nccl-tests' bus-bandwidth factor of `kind` over n ranks.
double bus_factor(CollectiveKind kind, int n);

// The latency steps of `kind` over n ranks: the ring's or the tree's, whichever is fewer.
int collective_steps(CollectiveKind kind, int n);

// The bus bandwidth `link` moves `kind` at (its own figure where measured, else the all-reduce's).
double link_bus_bandwidth(const Link& link, CollectiveKind kind);

// Seconds for `kind` over n ranks on `link`; `bytes`: nccl-tests' size S (the whole buffer: the
// all-gather's output, the reduce-scatter's input). 0 for one rank.
double collective_seconds(CollectiveKind kind, double bytes, int n, const Link& link);

// Where a group of `size` ranks whose members are `stride` ranks apart (tensor groups: stride 1;
// data-parallel groups: stride = tensor degree) runs on machines of `m.gpus_per_machine` GPUs,
// ranks filling machines in order: inside one machine (m.intra), or across machines, where its
// ring crosses the network through the NICs of its members on each machine (k members: k x the
// per-GPU network bandwidth, at most the machine's own link). A group that fits a machine is
// inside one only if every such group of the `world` ranks is: 3 tensor ranks on 8-GPU
// machines put ranks 6-8 across two, and the job goes at its slowest group's pace.
Link group_link(int size, int stride, const MachineProfile& m, int world = 0);

}  // namespace zt
