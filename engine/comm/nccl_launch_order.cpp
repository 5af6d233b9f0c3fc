// NCCL launch order across communicators (see nccl_launch_order.h).
#include "engine/comm/nccl_launch_order.h"

#include <nccl.h>

#include <cstdlib>
#include <mutex>

#include "engine/core/faults.h"
#include "engine/core/status.h"

namespace zt::nccl_order {

namespace {

constexpr int kImplicitSince = 22600;  // NCCL 2.26: NCCL_LAUNCH_ORDER_IMPLICIT

std::string version_name(int v) { return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100); }

Choice choose() {
  int version = 0;
  ncclGetVersion(&version);
  if (faults().nccl_unordered) return {Mode::Unordered, version, "test hook: NCCL collectives launched unordered"};
  const char* set = std::getenv("NCCL_LAUNCH_ORDER_IMPLICIT");
  if (version >= kImplicitSince && !set) {
    setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", /*overwrite=*/0);  // read by NCCL at its first launch
    return {Mode::Implicit, version, ""};
  }
  // NCCL reads it as an integer: any non-zero value turns it on
  if (version >= kImplicitSince && std::strtoll(set, nullptr, 0) != 0) return {Mode::Implicit, version, ""};
  const std::string why = version >= kImplicitSince ? "NCCL_LAUNCH_ORDER_IMPLICIT=" + std::string(set)
                                                    : "NCCL " + version_name(version) + " (before 2.26)";
  return {Mode::Serial, version,
          "with " + why + ", collectives of different groups run one after another on each GPU, in the order "
          "ztrain launches them (NCCL 2.26 or later, without NCCL_LAUNCH_ORDER_IMPLICIT=0, lets them overlap)"};
}

// The Serial mode's state: the end of the process's last collective and its communicator.
struct Last {
  std::mutex mu;
  cudaEvent_t done = nullptr;
  const void* comm = nullptr;
};
Last& last() {
  static Last l;
  return l;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeFailure(fmt::format("CUDA {} (NCCL launch order): {}", what, cudaGetErrorString(e)));
}

}  // namespace

const Choice& establish() {
  static const Choice choice = choose();
  return choice;
}

void before_launch(cudaStream_t stream, const void* comm) {
  if (establish().mode != Mode::Serial) return;
  Last& l = last();
  std::lock_guard lock(l.mu);
  if (l.done && l.comm != comm) check(cudaStreamWaitEvent(stream, l.done, 0), "stream wait");
}

void after_launch(cudaStream_t stream, const void* comm) {
  if (establish().mode != Mode::Serial) return;
  Last& l = last();
  std::lock_guard lock(l.mu);
  if (!l.done) check(cudaEventCreateWithFlags(&l.done, cudaEventDisableTiming), "event");
  check(cudaEventRecord(l.done, stream), "event record");
  l.comm = comm;
}

}  // namespace zt::nccl_order
