// The emulated device's SIMT execution: a block's threads are fibers (boost.context: a switch
// costs tens of nanoseconds, where ucontext's swapcontext makes a system call), run on one OS
// thread in a chosen order until each reaches a barrier, a warp collective or its end. Barriers
// release when every live thread has arrived; a warp collective completes when every lane of its
// mask has. Anything a GPU would hang on or leave undefined (a barrier some threads never reach,
// lanes that disagree on a collective, a cp.async destination outside shared memory, a write past
// the dynamic shared allocation) stops the kernel with a message naming it, the block and the
// threads. Blocks of a grid are spread over a pool of worker threads.
// One file over 600 lines on purpose: the scheduler, barriers, warp collectives and the shared-memory
// poisoning all act on one block's fiber state, whose invariants are kept in one place.
#include <boost/context/fiber.hpp>
#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend/cuda_emu/device.h"
#include "engine/backend/cuda_emu/half.h"
#include "engine/backend/cuda_emu/ptx.h"
#include "engine/backend/cuda_emu/simt.h"

extern "C" void* __tls_get_addr(void*);

namespace zt::emu {

thread_local ThreadView* current_thread = nullptr;

namespace ctx = boost::context;
constexpr unsigned char kPoison = 0xFF;  // NaN in fp32, bf16 and fp16 alike
constexpr size_t kCanaryBytes = 4096;    // past a launch's dynamic shared allocation, at least

// ---- the kernel module's shared memory: its thread-local block (static __shared__ variables and
// the dynamic arrays of each translation unit)
namespace {
struct SharedModule {
  size_t modid = 0, tls_bytes = 0;
  std::vector<std::pair<size_t, size_t>> dynamic;  // offset, bytes in the module's TLS block
  std::vector<std::pair<size_t, size_t>> statics;  // the rest: static __shared__ variables
};
std::mutex g_modules_mu;
std::map<const void*, SharedModule> g_modules;  // by module load address

void* tls_block(size_t modid) {
  struct {
    unsigned long module, offset;
  } index{modid, 0};
  return __tls_get_addr(&index);
}
struct PhdrQuery {
  const void* base;
  size_t modid = 0, tls_bytes = 0;
};
int find_module(dl_phdr_info* info, size_t, void* arg) {
  auto* q = static_cast<PhdrQuery*>(arg);
  if (reinterpret_cast<const void*>(info->dlpi_addr) != q->base) return 0;
  q->modid = info->dlpi_tls_modid;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_TLS) q->tls_bytes = info->dlpi_phdr[i].p_memsz;
  return 1;
}
const void* module_base(const void* p) {
  Dl_info di{};
  return dladdr(p, &di) ? di.dli_fbase : nullptr;
}
// called with g_modules_mu held
void rebuild_statics(SharedModule& m) {
  auto dyn = m.dynamic;
  std::sort(dyn.begin(), dyn.end());
  m.statics.clear();
  size_t at = 0;
  for (auto [off, n] : dyn) {
    if (off > at) m.statics.push_back({at, off - at});
    at = std::max(at, off + n);
  }
  if (m.tls_bytes > at) m.statics.push_back({at, m.tls_bytes - at});
}
}  // namespace

RegisterDynamicShared::RegisterDynamicShared(DynamicShared a) {
  const void* base = module_base(this);
  PhdrQuery q{base};
  dl_iterate_phdr(find_module, &q);
  if (!q.modid) return;
  auto* block = static_cast<char*>(tls_block(q.modid));
  std::lock_guard lock(g_modules_mu);
  SharedModule& m = g_modules[base];
  m.modid = q.modid;
  m.tls_bytes = q.tls_bytes;
  for (void* arr : a.arrays) m.dynamic.push_back({size_t(static_cast<char*>(arr) - block), a.bytes});
  rebuild_statics(m);
}

// ---- threads, warps, blocks
namespace {
enum class State : uint8_t { Runnable, Barrier, Warp, Done };
struct CpCopy {
  void* dst;
  unsigned char data[16];
};
struct Thread {
  ThreadView view;  // what threadIdx & co. read
  int linear = 0, lane = 0, warp = 0;
  State state = State::Runnable;
  bool started = false;
  ctx::fiber fiber;  // the thread's context while it is suspended
  ctx::fiber back;   // the scheduler's context while the thread runs
  const char* waiting = nullptr;  // the collective it waits in
  unsigned waiting_mask = 0;
  std::vector<CpCopy> cp_open;              // cp.async not yet committed
  std::deque<std::vector<CpCopy>> cp_groups;  // committed, not yet waited for
};
struct Pending {
  const char* what;
  unsigned mask, arrived;
  void* slots[32];
  WarpComplete complete;
};
struct Warp {
  unsigned lanes = 0, exited = 0;  // masks of the lanes that exist and of those that exited
  std::vector<Pending> pending;
};
struct Block {
  const KernelRun* run = nullptr;
  uint3 idx{};
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  int done = 0, at_barrier = 0;
  std::string fault;  // set: the block is abandoned
  char* shared_lo = nullptr;
  char* shared_hi = nullptr;
};
thread_local Block* tl_block = nullptr;
thread_local Thread* tl_thread = nullptr;

// ZTRAIN_EMU_STATS=1: what the emulator executed, printed at exit (the speed figures in docs/measured.md)
struct Stats {
  std::atomic<uint64_t> kernels{0}, blocks{0}, threads{0}, switches{0}, collectives{0}, barriers{0};
  std::atomic<uint64_t> kernel_ns{0};
  ~Stats() {
    const char* v = std::getenv("ZTRAIN_EMU_STATS");
    if (!v || std::string(v) != "1" || !kernels) return;
    const double s = double(kernel_ns) * 1e-9;
    std::fprintf(
        stderr,
        "ztrain emulated device: %llu kernels, %llu blocks, %llu threads, %llu barriers, %llu warp collectives, "
        "%llu fiber switches in %.2f s of kernel time: %.0f kernels/s, %.2e threads/s, %.2e switches/s\n",
        (unsigned long long)kernels, (unsigned long long)blocks, (unsigned long long)threads,
        (unsigned long long)barriers, (unsigned long long)collectives, (unsigned long long)switches, s,
        double(kernels) / s, double(threads) / s, double(switches) / s);
  }
};
Stats g_stats;

std::string where(const Block& b) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "block (%u,%u,%u) of grid (%u,%u,%u) x (%u,%u,%u) threads", b.idx.x, b.idx.y, b.idx.z,
                b.run->grid.x, b.run->grid.y, b.run->grid.z, b.run->block.x, b.run->block.y, b.run->block.z);
  return "kernel " + b.run->name + ", " + buf;
}
// "0-31,64" for a list of thread indices
std::string ranges(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!s.empty()) s += ",";
    s += std::to_string(v[i]);
    if (j > i) s += "-" + std::to_string(v[j]);
    i = j + 1;
  }
  return s;
}
std::string hex(unsigned m) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", m);
  return buf;
}

// Suspends the calling fiber until the scheduler resumes it.
void yield() {
  Thread* t = tl_thread;
  t->back = std::move(t->back).resume();
}

[[noreturn]] void fault_here(const std::string& msg) {
  Block& b = *tl_block;
  Thread& t = *tl_thread;
  if (b.fault.empty()) {
    char buf[96];
    std::snprintf(buf, sizeof buf, ", thread (%u,%u,%u): ", t.view.thread_idx.x, t.view.thread_idx.y,
                  t.view.thread_idx.z);
    b.fault = where(b) + buf + msg;
  }
  t.state = State::Done;
  for (;;) yield();  // never resumed: the scheduler unwinds this fiber
}

// ---- fiber stacks: reused per worker thread, a guard page below each (a stack overflow faults)
constexpr size_t kPage = 4096;
size_t stack_bytes() {
  static const size_t n = [] {
    const char* v = std::getenv("ZTRAIN_EMU_STACK_KB");
    return (v ? std::strtoul(v, nullptr, 10) : 256) * 1024;
  }();
  return n;
}
struct StackPool {
  std::vector<void*> free;  // stack tops
  ~StackPool() {
    for (void* top : free) munmap(static_cast<char*>(top) - stack_bytes() - kPage, stack_bytes() + kPage);
  }
};
thread_local StackPool tl_stacks;
struct PooledStack {
  ctx::stack_context allocate() {
    ctx::stack_context sc;
    sc.size = stack_bytes();
    if (!tl_stacks.free.empty()) {
      sc.sp = tl_stacks.free.back();
      tl_stacks.free.pop_back();
      return sc;
    }
    void* p = mmap(nullptr, stack_bytes() + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    mprotect(p, kPage, PROT_NONE);
    sc.sp = static_cast<char*>(p) + kPage + stack_bytes();
    return sc;
  }
  void deallocate(ctx::stack_context& sc) { tl_stacks.free.push_back(sc.sp); }
};

void thread_exit(Block& b, Thread& t) {
  Warp& w = b.warps[t.warp];
  w.exited |= 1u << t.lane;
  for (const Pending& p : w.pending)
    if (p.mask >> t.lane & 1)
      fault_here("exited while lanes of mask " + hex(p.mask) + " wait for it in " + p.what +
                 " (the GPU would hang or compute garbage)");
}

void resume(Block& b, Thread& t) {
  tl_thread = &t;
  current_thread = &t.view;
  if (!t.started) {
    t.started = true;
    t.fiber = ctx::fiber(std::allocator_arg, PooledStack{}, [&b, &t](ctx::fiber&& sched) {
      t.back = std::move(sched);
      b.run->body();
      thread_exit(b, t);
      t.state = State::Done;
      ++b.done;
      return std::move(t.back);
    });
  }
  t.fiber = std::move(t.fiber).resume();
  g_stats.switches.fetch_add(1, std::memory_order_relaxed);
  current_thread = nullptr;
  tl_thread = nullptr;
}

std::vector<int> thread_order(int n, const Block& b) {
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  const Schedule& s = schedule();
  if (s.order == Order::Reverse) std::reverse(order.begin(), order.end());
  if (s.order == Order::Random) {
    std::mt19937_64 g(s.seed * 0x9E3779B97F4A7C15ull + (uint64_t(b.idx.z) << 40) + (uint64_t(b.idx.y) << 20) + b.idx.x);
    std::shuffle(order.begin(), order.end(), g);
  }
  return order;
}

std::string deadlock(const Block& b) {
  std::vector<int> barrier, done;
  std::map<std::string, std::vector<int>> warp_ops;
  for (const Thread& t : b.threads) {
    if (t.state == State::Barrier) barrier.push_back(t.linear);
    else if (t.state == State::Done) done.push_back(t.linear);
    else if (t.state == State::Warp)
      warp_ops[std::string(t.waiting) + " (mask " + hex(t.waiting_mask) + ")"].push_back(t.linear);
  }
  std::string s = where(b) + ": deadlock (the GPU would hang):";
  if (!barrier.empty()) s += " threads " + ranges(barrier) + " wait at __syncthreads;";
  for (auto& [what, v] : warp_ops) s += " threads " + ranges(v) + " wait in " + what + ";";
  if (!done.empty()) s += " threads " + ranges(done) + " have exited;";
  s.pop_back();
  return s;
}

// shared memory: poison what the block may read before writing it
struct ModuleView {
  const SharedModule* m = nullptr;
  char* block = nullptr;
};
ModuleView shared_module(const void* kernel) {
  const void* base = module_base(kernel);
  std::lock_guard lock(g_modules_mu);
  auto it = g_modules.find(base);
  if (it == g_modules.end()) return {};
  return {&it->second, static_cast<char*>(tls_block(it->second.modid))};
}
// The watched window past the allocation: as large again as the allocation (so an index one tile
// too far lands in it) and at least kCanaryBytes.
size_t canary_end(const KernelRun& run) {
  return std::min(2 * run.dynamic_shared + kCanaryBytes, run.arrays.bytes);
}

void run_block(const KernelRun& run, uint3 idx, std::string& fault) {
  g_stats.blocks.fetch_add(1, std::memory_order_relaxed);
  g_stats.threads.fetch_add(uint64_t(run.block.x) * run.block.y * run.block.z, std::memory_order_relaxed);
  Block b;
  b.run = &run;
  b.idx = idx;
  const unsigned nx = run.block.x, ny = run.block.y, n = nx * ny * run.block.z;
  b.threads.resize(n);
  b.warps.resize((n + 31) / 32);
  for (unsigned i = 0; i < n; ++i) {
    Thread& t = b.threads[i];
    t.linear = int(i), t.lane = int(i % 32), t.warp = int(i / 32);
    t.view = {{i % nx, (i / nx) % ny, i / (nx * ny)}, idx, run.block, run.grid};
    b.warps[i / 32].lanes |= 1u << (i % 32);
  }
  const ModuleView mv = shared_module(run.kernel);
  if (mv.m) {
    for (auto [off, bytes] : mv.m->statics) std::memset(mv.block + off, kPoison, bytes);
    b.shared_lo = mv.block;
    b.shared_hi = mv.block + mv.m->tls_bytes;
  }
  // this worker's copies of the launching translation unit's dynamic shared arrays
  void* arrays[2] = {};
  if (mv.m && run.have_offsets)
    for (int k = 0; k < 2; ++k) arrays[k] = mv.block + run.array_offsets[k];
  for (void* arr : arrays)
    if (arr) std::memset(arr, kPoison, canary_end(run));
  tl_block = &b;
  const std::vector<int> order = thread_order(int(n), b);
  // one pass over threads [lo, hi) of `order`: each runnable one runs to its next wait
  auto pass = [&](size_t lo, size_t hi) {
    bool ran = false;
    for (size_t k = lo; k < hi && b.fault.empty(); ++k) {
      Thread& t = b.threads[size_t(order[k])];
      if (t.state != State::Runnable) continue;
      resume(b, t);
      ran = true;
    }
    return ran;
  };
  const bool by_warp = schedule().order == Order::Warps;
  while (b.fault.empty() && b.done < int(n)) {
    bool ran = false;
    if (by_warp) {  // each warp through all its warp collectives, up to a barrier, before the next
      for (size_t w0 = 0; w0 < n && b.fault.empty(); w0 += 32)
        while (pass(w0, std::min<size_t>(n, w0 + 32))) ran = true;
    } else {
      ran = pass(0, n);
    }
    if (ran || !b.fault.empty()) continue;
    const int live = int(n) - b.done;
    if (b.at_barrier == live) {  // every live thread is at the barrier: release it
      for (Thread& t : b.threads)
        if (t.state == State::Barrier) t.state = State::Runnable;
      b.at_barrier = 0;
      continue;
    }
    b.fault = deadlock(b);
  }
  if (b.fault.empty())  // writes past the dynamic allocation (a GPU may not fault on them at all)
    for (void* arr : arrays) {
      if (!arr) continue;
      const auto* p = static_cast<const unsigned char*>(arr);
      for (size_t i = run.dynamic_shared; i < canary_end(run); ++i)
        if (p[i] != kPoison) {
          b.fault = where(b) + ": wrote shared memory at byte " + std::to_string(i) +
                    " of its dynamic shared memory, past the " + std::to_string(run.dynamic_shared) +
                    " bytes the launch allocated";
          break;
        }
      if (!b.fault.empty()) break;
    }
  // abandoned fibers are unwound by their destructors (boost.context's forced_unwind)
  for (Thread& t : b.threads) {
    tl_thread = &t;
    current_thread = &t.view;
    t.fiber = {};
  }
  tl_thread = nullptr;
  current_thread = nullptr;
  tl_block = nullptr;
  if (!b.fault.empty() && fault.empty()) fault = b.fault;
}
}  // namespace

// ---- the device functions kernels call
void syncthreads() {
  g_stats.barriers.fetch_add(1, std::memory_order_relaxed);
  Thread& t = *tl_thread;
  t.state = State::Barrier;
  ++tl_block->at_barrier;
  yield();
}

void warp_collective(const char* what, unsigned mask, void* slot, WarpComplete complete) {
  Block& b = *tl_block;
  Thread& t = *tl_thread;
  Warp& w = b.warps[t.warp];
  const unsigned me = 1u << t.lane;
  if (!(mask & me))
    fault_here(std::string(what) + " with mask " + hex(mask) + ", which does not include the calling lane " +
               std::to_string(t.lane));
  if (mask & ~w.lanes)
    fault_here(std::string(what) + " with mask " + hex(mask) + " names lanes that do not exist in warp " +
               std::to_string(t.warp) + " (lanes " + hex(w.lanes) + ")");
  if (mask & w.exited)
    fault_here(std::string(what) + " with mask " + hex(mask) + " waits for lanes that have exited (" +
               hex(mask & w.exited) + ")");
  Pending* p = nullptr;
  for (Pending& q : w.pending)
    if (q.mask & mask) {
      if (q.mask != mask || std::strcmp(q.what, what) != 0 || q.complete != complete)  // same op, same type
        fault_here(std::string(what) + " with mask " + hex(mask) + " while lanes " + hex(q.arrived) + " wait in " +
                   q.what + " with mask " + hex(q.mask));
      p = &q;
    }
  if (!p) {
    w.pending.push_back(Pending{what, mask, 0, {}, complete});
    p = &w.pending.back();
  }
  p->slots[t.lane] = slot;
  p->arrived |= me;
  if (p->arrived != mask) {
    t.state = State::Warp;
    t.waiting = what;
    t.waiting_mask = mask;
    yield();
    return;
  }
  p->complete(p->slots, mask);
  g_stats.collectives.fetch_add(1, std::memory_order_relaxed);
  for (int l = 0; l < 32; ++l)
    if ((mask >> l & 1) && l != t.lane) b.threads[t.warp * 32 + l].state = State::Runnable;
  w.pending.erase(w.pending.begin() + (p - w.pending.data()));
}

void syncwarp(unsigned mask) {
  int slot = 0;
  warp_collective("__syncwarp", mask, &slot, [](void* const*, unsigned) {});
}

int lane_id() { return tl_thread->lane; }

void kernel_fault(const char* message) { fault_here(message); }

bool is_shared(const void* p, size_t bytes) {
  const Block* b = tl_block;
  const char* c = static_cast<const char*>(p);
  return b && c >= b->shared_lo && c + bytes <= b->shared_hi;
}

// ---- mma.sync m16n8k16 (layouts: ptx.h)
namespace {
struct MmaSlot {
  const uint32_t* a;
  uint32_t b[2];
  float c[4];
  float* d;
  MmaType type;
};
float half16(uint16_t bits, MmaType t) {
  return t == MmaType::BF16 ? bf16_bits_to_float(bits) : half_bits_to_float(bits);
}
void mma_complete(void* const* slots, unsigned) {
  float A[16][16], B[16][8], C[16][8];
  const MmaType type = static_cast<MmaSlot*>(slots[0])->type;
  for (int lane = 0; lane < 32; ++lane) {
    const auto* s = static_cast<MmaSlot*>(slots[lane]);
    if (s->type != type) kernel_fault("mma.sync: lanes disagree on the input type");
    const int g = lane >> 2, q = lane % 4;
    for (int i = 0; i < 8; ++i) {  // a_i: register i / 2, half i % 2
      const uint16_t bits = uint16_t(s->a[i / 2] >> (16 * (i % 2)));
      const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8, col = q * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      A[row][col] = half16(bits, type);
    }
    for (int i = 0; i < 4; ++i) {
      const uint16_t bits = uint16_t(s->b[i / 2] >> (16 * (i % 2)));
      B[q * 2 + (i & 1) + (i >= 2 ? 8 : 0)][g] = half16(bits, type);
    }
    for (int i = 0; i < 4; ++i) C[i < 2 ? g : g + 8][q * 2 + (i & 1)] = s->c[i];
  }
  for (int lane = 0; lane < 32; ++lane) {
    auto* s = static_cast<MmaSlot*>(slots[lane]);
    const int g = lane >> 2, q = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = i < 2 ? g : g + 8, col = q * 2 + (i & 1);
      float acc = 0;
      for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
      s->d[i] = acc + C[row][col];
    }
  }
}
}  // namespace

void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, MmaType t) {
  MmaSlot s{a, {b0, b1}, {d[0], d[1], d[2], d[3]}, d, t};
  warp_collective("mma.sync.aligned.m16n8k16", 0xffffffffu, &s, mma_complete);
}

// ---- cp.async (semantics: ptx.h)
void cp_async_16(void* dst, const void* src, int src_size) {
  if (!is_shared(dst, 16)) fault_here("cp.async destination is not in shared memory");
  if (reinterpret_cast<uintptr_t>(dst) % 16 || reinterpret_cast<uintptr_t>(src) % 16)
    fault_here("cp.async with a 16-byte copy needs 16-byte aligned addresses");
  if (src_size < 0 || src_size > 16) fault_here("cp.async src_size outside 0..16");
  CpCopy c;
  c.dst = dst;
  std::memset(c.data, 0, 16);
  if (src_size) std::memcpy(c.data, src, size_t(src_size));
  std::memset(dst, kPoison, 16);  // in flight: not readable until the wait
  tl_thread->cp_open.push_back(c);
}
void cp_async_commit_group() {
  Thread& t = *tl_thread;
  t.cp_groups.push_back(std::move(t.cp_open));
  t.cp_open.clear();
}
void cp_async_wait_group(int n) {
  Thread& t = *tl_thread;
  while (int(t.cp_groups.size()) > n) {
    for (const CpCopy& c : t.cp_groups.front()) std::memcpy(c.dst, c.data, 16);
    t.cp_groups.pop_front();
  }
}

// ---- ldmatrix (layouts: ptx.h)
namespace {
struct LdmatrixSlot {
  const void* row;
  uint32_t* d;
  int num;
  bool trans;
};
void ldmatrix_complete(void* const* slots, unsigned) {
  const auto* first = static_cast<LdmatrixSlot*>(slots[0]);
  uint16_t m[4][8][8];  // [matrix][row][column]
  for (int lane = 0; lane < 32; ++lane) {
    const auto* s = static_cast<LdmatrixSlot*>(slots[lane]);
    if (s->num != first->num || s->trans != first->trans)
      kernel_fault("ldmatrix: lanes disagree on the number of matrices or .trans");
    if (lane >= 8 * first->num) continue;  // addresses past the matrices loaded are not used
    if (!is_shared(s->row, 16))
      kernel_fault(("ldmatrix: lane " + std::to_string(lane) + "'s row address is not in shared memory").c_str());
    if (reinterpret_cast<uintptr_t>(s->row) % 16)
      kernel_fault(("ldmatrix: lane " + std::to_string(lane) + "'s row address is not 16-byte aligned").c_str());
    std::memcpy(m[lane / 8][lane % 8], s->row, 16);
  }
  for (int lane = 0; lane < 32; ++lane) {
    const auto* s = static_cast<LdmatrixSlot*>(slots[lane]);
    const int r = lane / 4, c = 2 * (lane % 4);
    for (int i = 0; i < first->num; ++i) {
      const uint16_t lo = first->trans ? m[i][c][r] : m[i][r][c], hi = first->trans ? m[i][c + 1][r] : m[i][r][c + 1];
      s->d[i] = uint32_t(lo) | uint32_t(hi) << 16;
    }
  }
}
}  // namespace

void ldmatrix_m8n8(uint32_t* d, int num, bool trans, const void* row) {
  if (num != 1 && num != 2 && num != 4) fault_here("ldmatrix with a number of matrices other than 1, 2, 4");
  LdmatrixSlot s{row, d, num, trans};
  warp_collective("ldmatrix.sync.aligned.m8n8", 0xffffffffu, &s, ldmatrix_complete);
}

// ---- wmma (semantics: include/mma.h)
namespace wmma_impl {
namespace {
struct Perm {
  int where[3][256];  // kind -> element -> lane * 8 + index
  Perm() {
    for (int k = 0; k < 3; ++k) {
      std::iota(where[k], where[k] + 256, 0);
      std::mt19937 g(0x5CA4B1u + unsigned(k));
      std::shuffle(where[k], where[k] + 256, g);
    }
  }
};
const Perm& perm() {
  static const Perm p;
  return p;
}
size_t type_bytes(int type) { return type == 0 ? 4 : 2; }
float load_elem(const void* p, int type) {
  if (type == 0) return *static_cast<const float*>(p);
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return type == 1 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
}
struct LoadSlot {
  int kind;
  void* x;
  int type;
  const void* p;
  unsigned ldm;
  bool col;
};
void check_same(void* const* slots, const char* what) {
  const auto* s0 = static_cast<LoadSlot*>(slots[0]);
  for (int l = 1; l < 32; ++l) {
    const auto* s = static_cast<LoadSlot*>(slots[l]);
    if (s->p != s0->p || s->ldm != s0->ldm || s->col != s0->col || s->kind != s0->kind || s->type != s0->type)
      kernel_fault((std::string(what) + ": lanes pass different pointers, ldm or layouts").c_str());
  }
  if (reinterpret_cast<uintptr_t>(s0->p) % 32)
    kernel_fault((std::string(what) + ": the pointer is not 256-bit aligned").c_str());
  if (s0->ldm % (16 / type_bytes(s0->type)))
    kernel_fault((std::string(what) + ": ldm is not a multiple of 16 bytes").c_str());
}
}  // namespace

int owner(int kind, int element) { return perm().where[kind][element]; }

void load(int kind, void* x, int type, const void* p, unsigned ldm, bool col) {
  LoadSlot s{kind, x, type, p, ldm, col};
  warp_collective("wmma::load_matrix_sync", 0xffffffffu, &s, [](void* const* slots, unsigned) {
    check_same(slots, "wmma::load_matrix_sync");
    const auto* s0 = static_cast<LoadSlot*>(slots[0]);
    const size_t es = type_bytes(s0->type);
    for (int e = 0; e < 256; ++e) {
      const int r = e / 16, c = e % 16, w = owner(s0->kind, e);
      const size_t off = s0->col ? size_t(c) * s0->ldm + r : size_t(r) * s0->ldm + c;
      const auto* src = static_cast<const char*>(s0->p) + off * es;
      std::memcpy(static_cast<char*>(static_cast<LoadSlot*>(slots[w / 8])->x) + (w % 8) * es, src, es);
    }
  });
}

void store(void* p, const float* x, unsigned ldm, bool col) {
  LoadSlot s{2, const_cast<float*>(x), 0, p, ldm, col};
  warp_collective("wmma::store_matrix_sync", 0xffffffffu, &s, [](void* const* slots, unsigned) {
    check_same(slots, "wmma::store_matrix_sync");
    const auto* s0 = static_cast<LoadSlot*>(slots[0]);
    for (int e = 0; e < 256; ++e) {
      const int r = e / 16, c = e % 16, w = owner(2, e);
      const size_t off = s0->col ? size_t(c) * s0->ldm + r : size_t(r) * s0->ldm + c;
      static_cast<float*>(const_cast<void*>(s0->p))[off] = static_cast<const float*>(static_cast<LoadSlot*>(slots[w / 8])->x)[w % 8];
    }
  });
}

void mma(float* d, const void* a, const void* b, const float* c, int type) {
  struct Slot {
    float* d;
    const void *a, *b;
    const float* c;
    int type;
  } s{d, a, b, c, type};
  warp_collective("wmma::mma_sync", 0xffffffffu, &s, [](void* const* slots, unsigned) {
    float A[16][16], B[16][16], C[16][16];
    const int type = static_cast<Slot*>(slots[0])->type;
    const size_t es = type_bytes(type);
    for (int e = 0; e < 256; ++e) {
      const int wa = owner(0, e), wb = owner(1, e), wc = owner(2, e);
      A[e / 16][e % 16] =
          load_elem(static_cast<const char*>(static_cast<Slot*>(slots[wa / 8])->a) + (wa % 8) * es, type);
      B[e / 16][e % 16] = load_elem(static_cast<const char*>(static_cast<Slot*>(slots[wb / 8])->b) + (wb % 8) * es, type);
      C[e / 16][e % 16] = static_cast<Slot*>(slots[wc / 8])->c[wc % 8];
    }
    for (int e = 0; e < 256; ++e) {
      const int r = e / 16, col = e % 16, w = owner(2, e);
      float acc = 0;
      for (int k = 0; k < 16; ++k) acc += A[r][k] * B[k][col];
      static_cast<Slot*>(slots[w / 8])->d[w % 8] = acc + C[r][col];
    }
  });
}
}  // namespace wmma_impl

// ---- the schedule and the worker pool
Schedule& schedule() {
  static Schedule s = [] {
    Schedule r;
    const char* v = std::getenv("ZTRAIN_EMU_SCHEDULE");
    const std::string s = v ? v : "forward";
    if (s == "reverse") r.order = Order::Reverse;
    else if (s == "warps") r.order = Order::Warps;
    else if (s.rfind("random", 0) == 0) {
      r.order = Order::Random;
      if (s.size() > 7) r.seed = std::strtoull(s.c_str() + 7, nullptr, 10);
    }
    return r;
  }();
  return s;
}

namespace {
struct Grid {
  const KernelRun* run;
  long total;
  std::atomic<long> next{0};
  long finished = 0;  // under the pool's mutex
  int helpers = 0;    // workers inside help(): the grid outlives them
  std::vector<long> order;  // the blocks' order when the schedule is not forward
  std::string fault;
};
struct Pool {
  std::mutex mu;
  std::condition_variable work, done;
  std::deque<Grid*> grids;  // with blocks left to take
  std::vector<std::thread> workers;
  bool stop = false;
  Pool() {
    const char* v = std::getenv("ZTRAIN_EMU_THREADS");
    unsigned n = v ? unsigned(std::atoi(v)) : std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
    for (unsigned i = 1; i < n; ++i) workers.emplace_back([this] { loop(); });  // the caller is one more
  }
  ~Pool() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    work.notify_all();
    for (auto& w : workers) w.join();
  }
  // Runs blocks of g until none is left to take.
  void help(Grid& g) {
    install_fault_handler();
    for (;;) {
      const long n = g.next.fetch_add(1);
      if (n >= g.total) return;
      const long i = g.order.empty() ? n : g.order[size_t(n)];  // blocks in the schedule's order too
      std::string fault;
      {
        std::lock_guard lock(mu);
        fault = g.fault;
      }
      if (fault.empty()) {
        const dim3 gd = g.run->grid;
        const uint3 idx{unsigned(i % gd.x), unsigned((i / gd.x) % gd.y), unsigned(i / (long(gd.x) * gd.y))};
        run_block(*g.run, idx, fault);
      }
      std::lock_guard lock(mu);
      if (!fault.empty() && g.fault.empty()) g.fault = fault;
      if (++g.finished == g.total) done.notify_all();
    }
  }
  void loop() {
    std::unique_lock lock(mu);
    for (;;) {
      work.wait(lock, [&] { return stop || !grids.empty(); });
      if (stop) return;
      Grid* g = grids.front();
      if (g->next.load() >= g->total) {
        grids.pop_front();
        continue;
      }
      ++g->helpers;
      lock.unlock();
      help(*g);
      lock.lock();
      if (--g->helpers == 0) done.notify_all();
    }
  }
};
Pool& pool() {
  static Pool p;
  return p;
}
}  // namespace

void locate_dynamic_shared(KernelRun& run) {
  const ModuleView mv = shared_module(run.kernel);
  if (!mv.m) return;
  for (int k = 0; k < 2; ++k) {
    const char* a = static_cast<const char*>(run.arrays.arrays[k]);
    if (a < mv.block || a + run.arrays.bytes > mv.block + mv.m->tls_bytes) return;  // not this module's
    run.array_offsets[k] = size_t(a - mv.block);
  }
  run.have_offsets = true;
}

std::string run_grid(const KernelRun& run) {
  const auto t0 = std::chrono::steady_clock::now();
  struct Count {
    std::chrono::steady_clock::time_point t0;
    ~Count() {
      g_stats.kernels.fetch_add(1, std::memory_order_relaxed);
      g_stats.kernel_ns.fetch_add(uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::steady_clock::now() - t0).count()), std::memory_order_relaxed);
    }
  } count{t0};
  Grid g;
  g.run = &run;
  g.total = long(run.grid.x) * run.grid.y * run.grid.z;
  if (schedule().order != Order::Forward) {  // blocks taken in another order as well as threads
    g.order.resize(size_t(g.total));
    std::iota(g.order.begin(), g.order.end(), 0L);
    if (schedule().order == Order::Reverse) std::reverse(g.order.begin(), g.order.end());
    else std::shuffle(g.order.begin(), g.order.end(), std::mt19937_64(schedule().seed));
  }
  Pool& p = pool();
  {
    std::lock_guard lock(p.mu);
    p.grids.push_back(&g);
  }
  p.work.notify_all();
  p.help(g);
  std::unique_lock lock(p.mu);
  p.done.wait(lock, [&] { return g.finished == g.total && g.helpers == 0; });
  for (auto it = p.grids.begin(); it != p.grids.end(); ++it)
    if (*it == &g) {
      p.grids.erase(it);
      break;
    }
  return g.fault;
}

std::string current_activity() {
  const Block* b = tl_block;
  const Thread* t = tl_thread;
  if (!b) return "";
  std::string s = where(*b);
  if (t) {
    char buf[64];
    std::snprintf(buf, sizeof buf, ", thread (%u,%u,%u)", t->view.thread_idx.x, t->view.thread_idx.y,
                  t->view.thread_idx.z);
    s += buf;
  }
  return s;
}

}  // namespace zt::emu
