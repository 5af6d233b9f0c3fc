// What the emulated device's parts share inside the runtime library (not seen by kernels): a
// kernel launch as the stream runs it, grid execution on the worker pool, device faults, symbol
// names, the kernel module's shared memory, and the scheduling order of a block's threads.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cuda_emu/launch.h"

namespace zt::emu {

// A launch as it runs: validated, with everything a block needs.
struct KernelRun {
  std::string name;       // demangled kernel name
  dim3 grid, block;
  size_t dynamic_shared;  // bytes the launch asked for
  DynamicShared arrays;   // the launching translation unit's dynamic shared arrays (the caller's copies)
  size_t array_offsets[2] = {};  // ... as offsets in the kernel module's thread-local block
  bool have_offsets = false;
  const void* kernel;
  std::function<void()> body;
};
// Runs every block of the grid on the worker pool (and the calling thread); returns "" or the
// first fault's message (the rest of the grid is abandoned, as a faulted GPU kernel).
std::string run_grid(const KernelRun& run);
// Finds where run.arrays lie in the kernel module's thread-local block (called on the launching
// thread, whose copies the launch names), so each worker uses its own copies.
void locate_dynamic_shared(KernelRun& run);

// How the threads of a block are ordered between barriers: in index order, reversed, or
// shuffled by a seed (the race check runs the op tests under two orders). ZTRAIN_EMU_SCHEDULE =
// forward | reverse | random[:SEED] | warps; the default is forward. In the first three, every
// warp reaches its next warp collective before any goes past it, which hides a missing barrier
// between warps that both sides of reach through the same collectives; `warps` runs each warp
// through all its collectives up to a barrier before the next warp starts.
enum class Order { Forward, Reverse, Random, Warps };
struct Schedule {
  Order order = Order::Forward;
  uint64_t seed = 1;
};
Schedule& schedule();

// The demangled name of the function at `fn` (from the module's symbol table; "?" if unknown).
std::string symbol_name(const void* fn);
// Writes a fault report to stderr (one line, prefixed "ztrain emulated device:").
void report(const std::string& line);
// What the calling OS thread is doing on the device, for the out-of-bounds report of the
// SIGSEGV handler: the running kernel's block and thread, or the stream work's name.
std::string current_activity();
void set_stream_activity(const char* what);
// Installs the SIGSEGV/SIGBUS handler that names guard-page faults (idempotent; also gives the
// calling thread an alternate signal stack, since faults may come from a fiber's small stack).
void install_fault_handler();
// The device allocation whose guard pages contain `addr`, described; "" when none does.
std::string describe_guard_fault(const void* addr);

}  // namespace zt::emu
