// The CUDA runtime API subset of the emulated device, with the documented semantics (CUDA
// Runtime API reference; "API synchronization behavior" for the copies):
// - device memory: one mapping per cudaMalloc with PROT_NONE guard pages on both sides, the
//   allocation flush against the upper guard at cudaMalloc's 256-byte alignment, so an access
//   past the end faults, and the fault handler names the allocation and the running kernel;
// - pinned host memory (cudaHostAlloc) the same way; copies from or to it are truly
//   asynchronous (the stream reads the source when it gets there), copies from pageable memory
//   stage the source at the call, copies to pageable memory return when done;
// - streams: a host thread and a queue each, so two streams are ordered only by events;
//   the legacy default stream (0) is one more such stream, without implicit synchronization;
// - events: each record is a marker the stream completes; waits and queries see the record
//   made before them; timing as on the GPU (DisableTiming events have no elapsed time);
// - kernel launches validated against an H100/H200's limits and the kernel's attributes; a
//   device fault is sticky: every later call returns cudaErrorLaunchFailure, as on the GPU.
// One file over 600 lines on purpose: the runtime's pieces (memory, streams, events, copies, the
// fault handler) share one device state and one lock order; split, their invariants would span files.
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "engine/backend/cuda_emu/device.h"
#include "engine/backend/cuda_emu/stream.h"

namespace zt::emu {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kDeviceBytes = 143771287552ull;  // an H200's 141 GB (what cudaMemGetInfo counts against)
constexpr size_t kSharedDefault = 48 * 1024, kSharedOptin = kMaxDynamicShared;

std::atomic<int> g_sticky{cudaSuccess};  // a device fault: every later call fails
thread_local cudaError_t tl_last = cudaSuccess;
thread_local int tl_device = 0;

cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess) tl_last = e;
  return e;
}
cudaError_t sticky() { return cudaError_t(g_sticky.load()); }

// ---- memory with guard pages
enum class Kind { Device, Pinned };
struct Allocation {
  char* map;  // the whole mapping: guard, pages, guard
  size_t map_bytes;
  char* user;
  size_t bytes;    // what was asked for
  size_t rounded;  // to 256 bytes, flush against the upper guard page; the slack holds kRedzone
  Kind kind;
};
constexpr unsigned char kRedzone = 0xCD;  // the slack past a device allocation, checked after kernels
std::mutex g_mem_mu;
std::map<const char*, Allocation> g_allocs;  // by user pointer
size_t g_device_bytes = 0;

cudaError_t allocate(void** p, size_t bytes, Kind kind) {
  if (!p) return set_error(cudaErrorInvalidValue);
  if (sticky()) return sticky();
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  const size_t pages = (rounded + kPage - 1) / kPage * kPage;
  {
    std::lock_guard lock(g_mem_mu);
    if (kind == Kind::Device && g_device_bytes + rounded > kDeviceBytes) return set_error(cudaErrorMemoryAllocation);
  }
  void* m =
      mmap(nullptr, pages + 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return set_error(cudaErrorMemoryAllocation);
  char* base = static_cast<char*>(m);
  mprotect(base, kPage, PROT_NONE);
  mprotect(base + kPage + pages, kPage, PROT_NONE);
  char* user = base + kPage + pages - rounded;
  if (kind == Kind::Device) std::memset(user, 0xA5, bytes);  // cudaMalloc'd memory is not zeroed
  std::memset(user + bytes, kRedzone, rounded - bytes);
  std::memset(base + kPage, kRedzone, size_t(user - (base + kPage)));  // the gap below, when there is one
  std::lock_guard lock(g_mem_mu);
  g_allocs[user] = {base, pages + 2 * kPage, user, bytes, rounded, kind};
  if (kind == Kind::Device) g_device_bytes += rounded;
  *p = user;
  return cudaSuccess;
}
cudaError_t release(void* p, Kind kind) {
  if (!p) return cudaSuccess;
  Allocation a;
  {
    std::lock_guard lock(g_mem_mu);
    auto it = g_allocs.find(static_cast<char*>(p));
    if (it == g_allocs.end() || it->second.kind != kind) {
      report(std::string(kind == Kind::Device ? "cudaFree" : "cudaFreeHost") + " of a pointer it did not allocate");
      return set_error(cudaErrorInvalidValue);
    }
    a = it->second;
    g_allocs.erase(it);
    if (kind == Kind::Device) g_device_bytes -= a.rounded;
  }
  munmap(a.map, a.map_bytes);
  return cudaSuccess;
}
// The allocation holding [p, p + n), if any.
const Allocation* find_alloc(const void* p, size_t n, bool* partial) {
  const char* c = static_cast<const char*>(p);
  auto it = g_allocs.upper_bound(c);
  *partial = false;
  if (it == g_allocs.begin()) return nullptr;
  --it;
  const Allocation& a = it->second;
  if (c < a.user || c >= a.user + a.bytes) return nullptr;
  if (c + n > a.user + a.bytes) *partial = true;
  return &a;
}

// ---- streams
struct Job {
  const char* what;
  std::function<void()> work;
  bool always = false;  // runs after a device fault too (event markers: their waiters must not hang)
};
}  // namespace
}  // namespace zt::emu

struct CUstream_st {
  unsigned flags = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<zt::emu::Job> queue;
  uint64_t enqueued = 0, completed = 0;
  bool stop = false;
  std::thread thread;
  CUstream_st() {
    thread = std::thread([this] { run(); });
  }
  ~CUstream_st() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    thread.join();
  }
  void run() {
    zt::emu::install_fault_handler();
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;
      zt::emu::Job job = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      zt::emu::set_stream_activity(job.what);
      if (job.always || !zt::emu::g_sticky.load()) job.work();  // after a fault, only markers complete
      zt::emu::set_stream_activity(nullptr);
      job = {};
      lock.lock();
      ++completed;
      cv.notify_all();
    }
  }
  void push(const char* what, std::function<void()> work, bool always = false) {
    {
      std::lock_guard lock(mu);
      queue.push_back({what, std::move(work), always});
      ++enqueued;
    }
    cv.notify_all();
  }
  void drain() {
    std::unique_lock lock(mu);
    const uint64_t target = enqueued;
    cv.wait(lock, [&] { return completed >= target; });
  }
};

struct CUevent_st {
  unsigned flags = 0;
  struct Marker {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::chrono::steady_clock::time_point at;
    void complete() {
      {
        std::lock_guard lock(mu);
        done = true;
        at = std::chrono::steady_clock::now();
      }
      cv.notify_all();
    }
    void wait() {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return done; });
    }
  };
  std::mutex mu;
  std::shared_ptr<Marker> last;  // the newest record; null: never recorded
  std::shared_ptr<Marker> latest() {
    std::lock_guard lock(mu);
    return last;
  }
};

namespace zt::emu {
namespace {
std::once_flag g_legacy_once;
CUstream_st* g_legacy = nullptr;
CUstream_st* stream_of(cudaStream_t s) {
  if (s) return s;
  std::call_once(g_legacy_once, [] { g_legacy = new CUstream_st(); });  // lives as long as the process
  return g_legacy;
}
thread_local const char* tl_activity = nullptr;

std::unordered_map<const void*, int> g_max_dynamic;  // kernel -> cudaFuncAttributeMaxDynamicSharedMemorySize
std::mutex g_attr_mu;

void fault(const std::string& msg) {
  report(msg);
  int expected = cudaSuccess;
  g_sticky.compare_exchange_strong(expected, cudaErrorLaunchFailure);
}
// Writes into the slack past a device allocation (up to its 256-byte rounding, where no guard
// page can be): "" or what kernel `name` overwrote.
std::string check_redzones(const std::string& name) {
  std::lock_guard lock(g_mem_mu);
  for (auto& [user, a] : g_allocs) {
    if (a.kind != Kind::Device) continue;
    // below: the nearest kBelow bytes of the gap under the allocation (the rest of it is far
    // enough to be a wild pointer rather than an index off by a little)
    constexpr size_t kBelow = 1024;
    const size_t gap = size_t(a.user - (a.map + kPage)), below = std::min(gap, kBelow);
    for (size_t i = 1; i <= below; ++i)
      if (static_cast<unsigned char>(a.user[-ptrdiff_t(i)]) != kRedzone) {
        char buf[256];
        std::snprintf(buf, sizeof buf, "kernel %s wrote at byte %zu before the start of the %zu-byte device "
                      "allocation at %p (found below it after the kernel)", name.c_str(), i, a.bytes,
                      static_cast<const void*>(a.user));
        std::memset(a.user - below, kRedzone, below);
        return buf;
      }
    for (size_t i = a.bytes; i < a.rounded; ++i)
      if (static_cast<unsigned char>(a.user[i]) != kRedzone) {
        char buf[256];
        std::snprintf(buf, sizeof buf, "kernel %s wrote at byte %zu past the end of the %zu-byte device allocation at %p "
                      "(found in its slack after the kernel; on a GPU a silent corruption or an illegal address)",
                      name.c_str(), i - a.bytes, a.bytes, static_cast<const void*>(a.user));
        std::memset(a.user + a.bytes, kRedzone, a.rounded - a.bytes);
        return buf;
      }
  }
  return "";
}
}  // namespace

void stream_enqueue(cudaStream_t s, const char* what, std::function<void()> work) {
  stream_of(s)->push(what, std::move(work));
}
void set_stream_activity(const char* what) { tl_activity = what; }

std::string device_reachable(const void* p, size_t bytes) {
  if (bytes == 0) return "";
  std::lock_guard lock(g_mem_mu);
  bool partial = false;
  const Allocation* a = find_alloc(p, bytes, &partial);
  char buf[160];
  if (!a) {
    std::snprintf(buf, sizeof buf, "%p is not device memory (nor pinned host memory)", p);
    return buf;
  }
  if (partial) {
    std::snprintf(buf, sizeof buf, "%zu bytes at %p pass the end of its %zu-byte allocation", bytes, p, a->bytes);
    return buf;
  }
  return "";
}

std::atomic<int> g_collectives_in_flight{0};
void collective_issued() { ++g_collectives_in_flight; }
void collective_finished() { --g_collectives_in_flight; }

void report(const std::string& line) {
  const std::string s = "ztrain emulated device: " + line + "\n";
  (void)!write(2, s.data(), s.size());
}

// ---- kernel launches
void launch_kernel(const LaunchRequest& r, std::function<void()> body) {
  if (sticky()) {
    set_error(sticky());
    return;
  }
  const dim3 g = r.grid, b = r.block;
  const uint64_t threads = uint64_t(b.x) * b.y * b.z;
  // CUDA C++ Programming Guide, "Compute Capabilities" (9.0): at most 1024 threads a block,
  // block dims 1024 x 1024 x 64, grid dims (2^31 - 1) x 65535 x 65535
  if (!threads || threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64 || !g.x || !g.y || !g.z || g.y > 65535 ||
      g.z > 65535 || g.x > 2147483647u) {
    report("launch of " + symbol_name(r.kernel) + " with an invalid configuration: grid (" + std::to_string(g.x) + "," +
           std::to_string(g.y) + "," + std::to_string(g.z) + "), block (" + std::to_string(b.x) + "," +
           std::to_string(b.y) + "," + std::to_string(b.z) + ")");
    set_error(cudaErrorInvalidConfiguration);
    return;
  }
  int allowed = int(kSharedDefault);
  {
    std::lock_guard lock(g_attr_mu);
    auto it = g_max_dynamic.find(r.kernel);
    if (it != g_max_dynamic.end()) allowed = std::max(allowed, it->second);
  }
  if (r.dynamic_shared > size_t(allowed)) {
    report("launch of " + symbol_name(r.kernel) + " asks " + std::to_string(r.dynamic_shared) +
           " bytes of dynamic shared memory; its cudaFuncAttributeMaxDynamicSharedMemorySize allows " +
           std::to_string(allowed));
    set_error(cudaErrorInvalidValue);
    return;
  }
  auto run = std::make_shared<KernelRun>();
  run->name = symbol_name(r.kernel);
  run->grid = g, run->block = b, run->dynamic_shared = r.dynamic_shared;
  run->arrays = r.arrays;
  run->kernel = r.kernel;
  run->body = std::move(body);
  locate_dynamic_shared(*run);
  stream_enqueue(r.stream, "kernel", [run] {
    std::string f = run_grid(*run);
    if (f.empty()) f = check_redzones(run->name);
    if (!f.empty()) fault(f);
  });
}

// ---- names of kernels: the module's symbol table (kernels have internal linkage, so they are
// not in the dynamic symbols dladdr reads)
namespace {
std::mutex g_sym_mu;
std::map<std::string, std::map<uint64_t, std::string>> g_symtabs;  // file -> value -> name
const std::map<uint64_t, std::string>& symtab(const std::string& file) {
  auto it = g_symtabs.find(file);
  if (it != g_symtabs.end()) return it->second;
  auto& out = g_symtabs[file];
  const int fd = open(file.c_str(), O_RDONLY);
  if (fd < 0) return out;
  struct stat st{};
  fstat(fd, &st);
  void* m = mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return out;
  const auto* base = static_cast<const char*>(m);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  if (size_t(st.st_size) >= sizeof(Elf64_Ehdr) && std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0) {
    const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; ++i) {
      if (sh[i].sh_type != SHT_SYMTAB) continue;
      const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + sh[i].sh_offset);
      const char* names = base + sh[sh[i].sh_link].sh_offset;
      for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k)
        if (ELF64_ST_TYPE(syms[k].st_info) == STT_FUNC && syms[k].st_value) out[syms[k].st_value] = names + syms[k].st_name;
    }
  }
  munmap(m, size_t(st.st_size));
  return out;
}
}  // namespace

std::string symbol_name(const void* fn) {
  Dl_info di{};
  if (!dladdr(fn, &di) || !di.dli_fname) return "?";
  std::string mangled;
  if (di.dli_sname && di.dli_saddr == fn) mangled = di.dli_sname;
  else {
    std::lock_guard lock(g_sym_mu);
    const auto& t = symtab(di.dli_fname);
    auto it = t.find(uint64_t(static_cast<const char*>(fn) - static_cast<const char*>(di.dli_fbase)));
    if (it == t.end()) return "?";
    mangled = it->second;
  }
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string name = status == 0 && d ? d : mangled;
  std::free(d);
  // the name with its template arguments: without the return type and the parameter list
  if (!name.empty() && name.back() == ')') {
    int depth = 0;
    for (size_t i = name.size(); i-- > 0;) {
      depth += name[i] == ')' ? 1 : name[i] == '(' ? -1 : 0;
      if (depth == 0) {
        name.resize(i);
        break;
      }
    }
  }
  if (name.rfind("void ", 0) == 0) name.erase(0, 5);
  return name;
}

// ---- faults in guard pages
std::string describe_guard_fault(const void* addr) {
  const char* c = static_cast<const char*>(addr);
  std::unique_lock lock(g_mem_mu, std::try_to_lock);  // never block in a signal handler
  if (!lock.owns_lock()) return "";
  for (const auto& [user, a] : g_allocs) {
    const char* lo = a.map;
    const char* hi = a.map + a.map_bytes;
    if (c < lo || c >= hi) continue;
    char buf[256];
    const bool after = c >= a.user + a.rounded;
    const long long off = after ? (long long)(c - (a.user + a.bytes)) : (long long)(a.user - c);
    std::snprintf(buf, sizeof buf, "out-of-bounds access at %p, %lld bytes %s the %zu-byte %s allocation at %p", addr,
                  after ? off : off, after ? "past the end of" : "before", a.bytes,
                  a.kind == Kind::Device ? "device" : "pinned host", static_cast<const void*>(a.user));
    return buf;
  }
  return "";
}

namespace {
struct sigaction g_prev_segv, g_prev_bus;
void on_fault(int sig, siginfo_t* info, void* uctx) {
  std::string what = describe_guard_fault(info->si_addr);
  const std::string act = current_activity();
  if (what.empty() && act.empty() && !tl_activity) {  // not the device's: the previous handler
    struct sigaction& prev = sig == SIGSEGV ? g_prev_segv : g_prev_bus;
    sigaction(sig, &prev, nullptr);
    return;  // the fault repeats under the previous handler
  }
  if (what.empty()) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "invalid memory access at %p (a fiber stack overflow or a wild pointer)", info->si_addr);
    what = buf;
  }
  report(what + " in " + (!act.empty() ? act : std::string("stream work: ") + (tl_activity ? tl_activity : "?")) +
         "; on a GPU: an illegal address error");
  _exit(1);
}
}  // namespace

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa{};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_prev_segv);
    sigaction(SIGBUS, &sa, &g_prev_bus);
  });
  thread_local bool have_stack = false;
  if (!have_stack) {
    have_stack = true;
    stack_t ss{};
    ss.ss_size = 64 * 1024;
    ss.ss_sp = std::malloc(ss.ss_size);
    sigaltstack(&ss, nullptr);
  }
}

}  // namespace zt::emu

using namespace zt::emu;

// ---- the API
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (d != 0) return set_error(cudaErrorInvalidDevice);
  tl_device = d;
  install_fault_handler();
  return sticky();
}
cudaError_t cudaGetDevice(int* d) {
  *d = tl_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return set_error(cudaErrorInvalidDevice);
  *p = cudaDeviceProp{};
  // ZTRAIN_EMU_GPU=a100 (tests): the device says it is an A100 (compute capability 8.0: no FP8
  // tensor cores); the emulator runs the same either way
  static const bool a100 = [] {
    const char* v = std::getenv("ZTRAIN_EMU_GPU");
    return v && std::string(v) == "a100";
  }();
  std::snprintf(p->name, sizeof p->name, a100 ? "NVIDIA A100-SXM4-80GB (emulated)" : "NVIDIA H200 (emulated)");
  p->totalGlobalMem = kDeviceBytes;
  p->sharedMemPerBlock = kSharedDefault;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
  p->major = a100 ? 8 : 9, p->minor = 0;
  p->multiProcessorCount = a100 ? 108 : 132;
  p->sharedMemPerBlockOptin = kSharedOptin;
  p->sharedMemPerMultiprocessor = 233472;
  p->regsPerMultiprocessor = 65536;
  p->maxThreadsPerMultiProcessor = 2048;
  p->l2CacheSize = 50 * 1024 * 1024;
  p->memoryBusWidth = 6144;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, d) != cudaSuccess) return set_error(cudaErrorInvalidDevice);
  switch (a) {
    case cudaDevAttrMaxSharedMemoryPerBlock: *v = int(p.sharedMemPerBlock); break;
    case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = int(p.sharedMemPerBlockOptin); break;
    default: return set_error(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int d) {
  if (d != 0) return set_error(cudaErrorInvalidDevice);
  std::snprintf(id, size_t(len), "0000:00:00.0");
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t bytes) { return allocate(p, bytes, Kind::Device); }
namespace {
// cudaFree and the pinned allocation calls synchronize the device: not while NCCL runs.
bool no_collectives_in_flight(const char* api) {
  const int n = zt::emu::g_collectives_in_flight.load();
  if (n == 0 || sticky()) return true;  // after a fault, streams skip work: the count stays up
  fault(std::string(api) + " while " + std::to_string(n) + " NCCL collective(s) are in flight: on a GPU it " +
        "synchronizes the device, which can deadlock the job (synchronize the communicators' streams first)");
  return false;
}
}  // namespace
cudaError_t cudaFree(void* p) {
  if (p && !no_collectives_in_flight("cudaFree")) return sticky();
  cudaDeviceSynchronize();  // cudaFree synchronizes with the device
  return release(p, Kind::Device);
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
  if (!no_collectives_in_flight("cudaHostAlloc")) return sticky();
  return allocate(p, bytes, Kind::Pinned);
}
cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }
cudaError_t cudaFreeHost(void* p) {
  if (p && !no_collectives_in_flight("cudaFreeHost")) return sticky();
  cudaDeviceSynchronize();
  return release(p, Kind::Pinned);
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  std::lock_guard lock(g_mem_mu);
  *total = kDeviceBytes;
  *free_bytes = kDeviceBytes - g_device_bytes;
  return sticky();
}

namespace {
std::mutex g_streams_mu;
std::vector<CUstream_st*> g_streams;  // every live stream (cudaDeviceSynchronize drains them)

// Checks one side of a copy: device pointers must lie inside one device allocation.
bool check_side(const void* p, size_t n, bool device, const char* api, const char* side) {
  std::lock_guard lock(g_mem_mu);
  bool partial = false;
  const Allocation* a = find_alloc(p, n, &partial);
  if (device && (!a || a->kind != Kind::Device)) {
    report(std::string(api) + ": the " + side + " " + std::to_string(uintptr_t(p)) + " is not device memory");
    return false;
  }
  if (a && partial) {
    report(std::string(api) + ": " + std::to_string(n) + " bytes at the " + side + " run past the end of its " +
           std::to_string(a->bytes) + "-byte allocation");
    return false;
  }
  return true;
}
bool is_pinned(const void* p) {
  std::lock_guard lock(g_mem_mu);
  bool partial = false;
  const Allocation* a = find_alloc(p, 1, &partial);
  return a && a->kind == Kind::Pinned;
}
bool is_device(const void* p) {
  std::lock_guard lock(g_mem_mu);
  bool partial = false;
  const Allocation* a = find_alloc(p, 1, &partial);
  return a && a->kind == Kind::Device;
}
}  // namespace

namespace {
// A copy as the stream runs it. ZTRAIN_EMU_COPY_DELAY_MS=M makes every copy take M ms with its
// destination poisoned meanwhile (0xFF), so work on another stream that is not ordered after the
// copy (by an event) reads poison or stale data: a missing cudaStreamWaitEvent shows at once.
void copy_in_flight(void* dst, const void* src, size_t n) {
  static const int delay_ms = [] {
    const char* v = std::getenv("ZTRAIN_EMU_COPY_DELAY_MS");
    return v ? std::atoi(v) : 0;
  }();
  if (delay_ms > 0) {
    std::vector<char> src_now(static_cast<const char*>(src), static_cast<const char*>(src) + n);
    std::memset(dst, 0xFF, n);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    std::memcpy(dst, src_now.data(), n);
    return;
  }
  std::memcpy(dst, src, n);
}
}  // namespace

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
  if (sticky()) return sticky();
  if (n == 0) return cudaSuccess;
  if (kind == cudaMemcpyDefault)
    kind = is_device(src) ? (is_device(dst) ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                          : (is_device(dst) ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  if (!check_side(src, n, src_dev, "cudaMemcpyAsync", "source") || !check_side(dst, n, dst_dev, "cudaMemcpyAsync", "destination"))
    return set_error(cudaErrorInvalidValue);
  CUstream_st* st = stream_of(s);
  if (!src_dev && !dst_dev) {  // host to host: synchronous, after the stream's earlier work
    st->drain();
    std::memcpy(dst, src, n);
    return sticky();
  }
  if (!src_dev && !is_pinned(src)) {  // pageable source: staged now, the caller may reuse it at once
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
    st->push("cudaMemcpyAsync", [dst, staged] { copy_in_flight(dst, staged->data(), staged->size()); });
    return cudaSuccess;
  }
  st->push("cudaMemcpyAsync", [dst, src, n] { copy_in_flight(dst, src, n); });
  if (!dst_dev && !is_pinned(dst)) st->drain();  // to pageable memory: returns when the copy is done
  return sticky();
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, nullptr);
  if (e != cudaSuccess) return e;
  stream_of(nullptr)->drain();
  return sticky();
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t s) {
  if (sticky()) return sticky();
  if (!check_side(p, n, true, "cudaMemsetAsync", "destination")) return set_error(cudaErrorInvalidValue);
  stream_of(s)->push("cudaMemsetAsync", [p, value, n] { std::memset(p, value, n); });
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t n) {
  const cudaError_t e = cudaMemsetAsync(p, value, n, nullptr);
  if (e != cudaSuccess) return e;
  stream_of(nullptr)->drain();
  return sticky();
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  auto* st = new CUstream_st();
  st->flags = flags;
  std::lock_guard lock(g_streams_mu);
  g_streams.push_back(st);
  *s = st;
  return sticky();
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s) return set_error(cudaErrorInvalidResourceHandle);
  s->drain();  // work already enqueued completes first, as documented
  {
    std::lock_guard lock(g_streams_mu);
    g_streams.erase(std::remove(g_streams.begin(), g_streams.end(), s), g_streams.end());
  }
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  stream_of(s)->drain();
  return sticky();
}
cudaError_t cudaDeviceSynchronize() {
  {
    // held across the drains: a cudaStreamDestroy on another thread waits (no stream work takes it)
    std::lock_guard lock(g_streams_mu);
    for (CUstream_st* s : g_streams) s->drain();
  }
  stream_of(nullptr)->drain();
  return sticky();
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  *e = new CUevent_st();
  (*e)->flags = flags;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;  // markers still queued are shared: the stream completes them harmlessly
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!e) return set_error(cudaErrorInvalidResourceHandle);
  auto m = std::make_shared<CUevent_st::Marker>();
  {
    std::lock_guard lock(e->mu);
    e->last = m;
  }
  stream_of(s)->push("cudaEventRecord", [m] { m->complete(); }, /*always=*/true);
  return sticky();
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (auto m = e->latest()) m->wait();
  return sticky();
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  auto m = e->latest();
  if (!m) return cudaSuccess;
  std::lock_guard lock(m->mu);
  return m->done ? sticky() : cudaErrorNotReady;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if ((start->flags | end->flags) & cudaEventDisableTiming) return set_error(cudaErrorInvalidResourceHandle);
  auto a = start->latest(), b = end->latest();
  if (!a || !b) return set_error(cudaErrorInvalidResourceHandle);
  if (a == b) {  // one event: no time between
    std::lock_guard lock(a->mu);
    if (!a->done) return cudaErrorNotReady;
    *ms = 0;
    return sticky();
  }
  std::scoped_lock lock(a->mu, b->mu);
  if (!a->done || !b->done) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  if (!e) return set_error(cudaErrorInvalidResourceHandle);
  auto m = e->latest();  // the record made before this call; later records do not matter
  if (!m) return sticky();
  stream_of(s)->push("cudaStreamWaitEvent", [m] { m->wait(); }, /*always=*/true);
  return sticky();
}

cudaError_t cudaGetLastError() {
  if (sticky()) return sticky();
  const cudaError_t e = tl_last;
  tl_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return sticky() ? sticky() : tl_last; }
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure (emulated device: see the fault above)";
    default: return "unknown error";
  }
}
cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;  // carveout: a hint
  if (value < 0 || size_t(value) > kSharedOptin) return set_error(cudaErrorInvalidValue);
  std::lock_guard lock(g_attr_mu);
  g_max_dynamic[kernel] = value;
  return cudaSuccess;
}
