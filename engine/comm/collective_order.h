// The one global order of collectives, and its check (docs/parallelism.md, "Collective order").
//
// Tensor- and data-parallel communicators run their collectives concurrently (NCCL: each on its
// own stream). NCCL documents that this can deadlock unless every rank issues them in one
// consistent order, so ztrain's rule is: every rank issues the same sequence of (group, op,
// bytes), from its one host thread, in program order, never depending on timing. With
// ZTRAIN_CHECK_COLLECTIVE_ORDER=1 (the default in debug builds) each rank hashes the sequence it
// issued in a step and the ranks compare the hashes at the step's end; a difference ends the job
// naming the first collective that differs, the rank and the step.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/comm.h"

namespace zt {

class CollectiveOrder {
 public:
  // world: the communicator the ranks compare their hashes over (host doubles).
  CollectiveOrder(Comm& world, int world_rank);
  // The collectives issued from here on belong to `step` (those between steps, to the next).
  void begin_step(int64_t step);
  // Compares this step's sequence over the ranks; RuntimeFailure naming the first difference.
  void end_step();

  // The wrapper's side: one collective issued on `group` ("tp", "dp").
  struct Entry {
    int group;  // index into kGroups
    int op;     // index into kOps
    uint64_t bytes;
  };
  void record(const Entry& e);
  int64_t step() const { return step_; }
  int world_rank() const { return world_rank_; }

  // The swap of ZTRAIN_FAULT_SWAP_COLLECTIVES, shared by the wrappers of one process: a
  // collective's launch held back until the next collective of another group.
  struct Held {
    std::function<void()> launch;
    const void* by = nullptr;  // the wrapper that holds it
    bool done = false;         // swapped (once per process)
  } held;

  static constexpr const char* kGroups[] = {"world", "tp", "dp", "shard", "replica"};
  static constexpr const char* kOps[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                         "all_reduce(double)", "barrier"};

 private:
  std::string describe(const Entry& e) const;
  Comm& world_;
  int world_rank_;
  int64_t step_ = 0;
  std::vector<Entry> entries_;
  uint64_t hash_ = 1469598103934665603ull;  // FNV-1a over the entries
};

// `inner` with every collective recorded in `order` as issued on group `group` ("tp", "dp").
// ZTRAIN_FAULT_SWAP_COLLECTIVES (the check's test) makes one rank issue a collective after the
// next one of another group in one step.
std::unique_ptr<Comm> make_order_checked_comm(std::unique_ptr<Comm> inner, const char* group,
                                              std::shared_ptr<CollectiveOrder> order);

}  // namespace zt
