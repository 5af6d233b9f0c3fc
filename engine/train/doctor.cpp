// ztrain doctor (see doctor.h).
#include "engine/train/doctor.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <mpi.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "data/store/object_store.h"
#include "engine/backend/nvml.h"
#include "engine/checkpoint/remote.h"
#include "engine/comm/topology.h"
#include "engine/core/atomic_file.h"
#include "engine/core/byte_size.h"
#include "engine/core/plugin.h"
#include "engine/core/status.h"
#include "engine/config/data_options.h"
#include "engine/observe/throughput.h"
#include "engine/plan/layout_plan.h"
#include "engine/plan/machine_file.h"
#include "engine/plan/step_time.h"
#include "engine/train/link_probe.h"
#include "engine/train/trainer.h"

namespace zt {

namespace {

enum class Level { Pass, Warn, Fail };

struct Check {
  Level level;
  std::string name, detail, fix;
};

std::string gib(double b) { return fmt::format("{:.1f} GiB", b / 1073741824.0); }

void gpu_checks(const RunSpec* spec, std::vector<Check>& out) {
  const bool wants_gpu = spec && spec->run.device == DeviceChoice::Cuda;
  Nvml nvml;
  if (!nvml.ok()) {
    out.push_back({wants_gpu ? Level::Fail : Level::Pass, "gpu", "no GPU (" + nvml.why() + ")",
                   wants_gpu ? "[run] device = \"cuda\" needs an NVIDIA GPU and driver (or use \"cpu\")" : ""});
    return;
  }
  const int cuda = nvml.cuda_driver_version();
  out.push_back({Level::Pass, "driver",
                 fmt::format("NVIDIA {}, CUDA {}.{} (driver)", nvml.driver_version(), cuda / 1000, cuda % 1000 / 10), ""});
  for (size_t i = 0; i < nvml.gpus(); ++i) {
    const GpuInfo g = nvml.info(i);
    const bool old = g.cc_major >= 0 && g.cc_major < 8;
    out.push_back({old ? Level::Fail : Level::Pass, fmt::format("gpu{}", i),
                   fmt::format("{} (compute capability {}.{})", g.name, g.cc_major, g.cc_minor),
                   old ? "ztrain's CUDA backend needs compute capability 8.0 or newer (A100, H100, L4, RTX 30xx+)" : ""});
    const bool slow_pcie = g.pcie_gen > 0 && (g.pcie_gen < 4 || g.pcie_width < 16);
    out.push_back({slow_pcie ? Level::Warn : Level::Pass, fmt::format("gpu{} link", i),
                   fmt::format("PCIe gen {} x{}, {} NVLink links active", g.pcie_gen, g.pcie_width,
                               g.nvlinks_active < 0 ? 0 : g.nvlinks_active),
                   slow_pcie ? "a PCIe link below gen 4 x16 slows host copies and collectives: check the slot" : ""});
    if (g.ecc_enabled == 0)
      out.push_back({Level::Warn, fmt::format("gpu{} ecc", i), "ECC is off",
                     "data-center GPUs normally run with ECC on (nvidia-smi -e 1, then a reboot)"});
    for (const GpuSample& s : nvml.sample())
      if (s.index == int(i)) {
        std::string slowed;
        for (const auto& r : s.clock_event_reasons)
          if (r != "gpu_idle" && r != "applications_clocks" && r != "display_clocks") slowed += r + " ";
        out.push_back({slowed.empty() ? Level::Pass : Level::Warn, fmt::format("gpu{} clocks", i),
                       fmt::format("SM {} MHz, {:.0f} W, {:.0f} C{}", s.sm_clock_mhz, s.power_w, s.temp_c,
                                   slowed.empty() ? "" : ", held down: " + slowed),
                       slowed.empty() ? "" : "check cooling and the power limit (nvidia-smi -q -d PERFORMANCE)"});
      }
  }
  int (*nccl_version)(int*) = nullptr;
  void* nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (nccl) nccl_version = reinterpret_cast<int (*)(int*)>(dlsym(nccl, "ncclGetVersion"));
  int v = 0;
  if (nccl_version && nccl_version(&v) == 0)
    out.push_back({Level::Pass, "nccl", fmt::format("NCCL {}.{}.{}", v / 10000, v / 100 % 100, v % 100), ""});
  else
    out.push_back({Level::Warn, "nccl", "libnccl.so.2 not found",
                   "multi-GPU runs fall back to host-staged MPI ([comm] backend = \"mpi\"): install NCCL"});
  if (nccl) dlclose(nccl);
}

// Free space, and the write speed of 64 MiB written and fsynced, in `dir`.
void storage_check(const std::string& what, const std::string& dir, double want_free, std::vector<Check>& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  struct statvfs st {};
  if (ec || ::statvfs(dir.c_str(), &st) != 0) {
    out.push_back({Level::Fail, what, dir + ": cannot create or read it", "choose a writable directory"});
    return;
  }
  const double free_bytes = double(st.f_bavail) * double(st.f_frsize);
  const std::string probe = (fs::path(dir) / fmt::format(".ztrain-doctor-{}", ::getpid())).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  double mb_s = -1;
  if (fd >= 0) {
    std::vector<char> buf(size_t(4) << 20, 'z');
    const auto t0 = std::chrono::steady_clock::now();
    bool ok = true;
    for (int i = 0; i < 16 && ok; ++i) ok = ::write(fd, buf.data(), buf.size()) == ssize_t(buf.size());
    ok = ok && ::fsync(fd) == 0;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ::close(fd);
    if (ok) mb_s = 64.0 * 1.048576 / s;
  }
  ::unlink(probe.c_str());
  if (mb_s < 0) {
    out.push_back({Level::Fail, what, dir + ": not writable (or full)", "choose a writable directory with free space"});
    return;
  }
  const bool tight = want_free > 0 && free_bytes < want_free;
  out.push_back({tight ? Level::Warn : Level::Pass, what,
                 fmt::format("{}: {} free, writes at {:.0f} MB/s (64 MiB with fsync)", dir, gib(free_bytes), mb_s),
                 tight ? fmt::format("less free space than the {} it may need", gib(want_free)) : ""});
}

void source_check(const std::string& what, const std::string& uri, const data::StoreOptions& o,
                  std::vector<Check>& out) {
  try {
    auto store = data::open_store(uri, o);
    if (store->is_local()) {
      const bool ok = std::filesystem::exists(store->local_path("manifest.json"));
      out.push_back({ok ? Level::Pass : Level::Fail, what, uri + (ok ? ": manifest.json present" : ": no manifest.json"),
                     ok ? "" : "point it at a directory ztrain-tokenize shards wrote"});
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t n = store->size("manifest.json");
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    out.push_back({Level::Pass, what, fmt::format("{}: reachable, manifest.json {} bytes ({:.0f} ms)", store->describe(""),
                                                  n, ms), ""});
  } catch (const std::exception& e) {
    out.push_back({Level::Fail, what, e.what(), "check the URL, the credentials and the network (one HEAD failed)"});
  }
}

void host_checks(bool gpus, std::vector<Check>& out) {
  const double avail = double(make_cpu_backend(1)->memory_available());
  out.push_back({avail < 8.0 * 1073741824.0 ? Level::Warn : Level::Pass, "host memory",
                 fmt::format("{} available", gib(avail)),
                 avail < 8.0 * 1073741824.0 ? "little host memory for pinned buffers, checkpoints and the data cache" : ""});
  rlimit lim{};
  if (::getrlimit(RLIMIT_MEMLOCK, &lim) == 0) {
    const bool unlimited = lim.rlim_cur == RLIM_INFINITY;
    out.push_back({gpus && !unlimited ? Level::Warn : Level::Pass, "ulimit memlock",
                   unlimited ? "unlimited" : fmt::format("{:.0f} MiB", double(lim.rlim_cur) / 1048576.0),
                   gpus && !unlimited ? "pinned host buffers need locked memory: ulimit -l unlimited "
                                        "(Docker: --ulimit memlock=-1)"
                                      : ""});
  }
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    const bool low = lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < 4096;
    out.push_back({low ? Level::Warn : Level::Pass, "ulimit nofile", fmt::format("{}", (long long)lim.rlim_cur),
                   low ? "raise to 65536 (ulimit -n): shard caches, checkpoints and NCCL open many files" : ""});
  }
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string v(version, size_t(len));
  if (const size_t nl = v.find_first_of(",\n"); nl != std::string::npos) v.resize(nl);
  out.push_back({Level::Pass, "mpi", v, ""});
}

// The job's links, measured as its step moves data (train/link_probe.h): its ranks together, and
// inside and across machines apart where they can be told apart. Nothing on one rank.
std::optional<MeasuredLinks> links_check(const RunSpec* spec, std::vector<Check>& out) {
  if (!dist_active()) {
    out.push_back({Level::Pass, "collectives", "one rank (launch under mpirun -np N to measure the job's ranks)", ""});
    return std::nullopt;
  }
  // a GPU job on NCCL: NCCL between the GPUs' memory, as its step; else MPI in host memory. Every
  // rank must open its GPU, or none measures on one (a rank alone in a collective waits forever).
  int world = 1, local = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  // NCCL where the job's step uses it (attach_device_comms): a GPU job, a build with NCCL, [comm]
  // backend not "mpi"; its plugin loaded by every rank before any rank waits in its set-up
  std::unique_ptr<Backend> gpu;
  std::string why_not;
#ifdef ZTRAIN_HAVE_NCCL
  if (spec && spec->run.device == DeviceChoice::Cuda && spec->comm.backend != CommBackendChoice::Mpi) {
    try {
      gpu = make_backend(DeviceChoice::Cuda, 1, local);
      if (Plugin& nccl = load_plugin("libztrain_nccl.so", "ZTRAIN_NCCL_PLUGIN"); !nccl.error.empty())
        throw RuntimeFailure(nccl.error);
    } catch (const std::exception& e) {
      why_not = e.what();
      gpu.reset();
    }
    int all = gpu != nullptr;
    MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
      gpu.reset();
      out.push_back({Level::Fail, "collectives",
                     "NCCL between the GPUs not timed: " + (why_not.empty() ? "another rank could not set it up" : why_not),
                     "the GPU and NCCL lines above; the links below are MPI's in host memory"});
    }
  }
#endif
  MeasuredLinks links;
  try {
    links = measure_links(spec ? spec->comm.timeout_s : 600, gpu.get());
  } catch (const std::exception& e) {  // NCCL unavailable: the job would fail the same way
    out.push_back({Level::Fail, "collectives", e.what(), "see the NCCL lines above"});
    return std::nullopt;
  }
  const std::string path = gpu ? "NCCL in GPU memory" : "MPI in host memory";
  const std::string where = links.per_machine > 0 ? fmt::format("{} machine{} of {}", links.machines,
                                                                links.machines > 1 ? "s" : "", links.per_machine)
                                                  : fmt::format("{} machines, unevenly filled", links.machines);
  out.push_back({Level::Pass, "collectives", fmt::format("{} ranks ({}), {}, 16 MiB: {}", world, where,
                                                         path, link_figures(links.world)), ""});
  if (links.machines > 1 && links.per_machine > 1) {  // else they are the world's figures
    out.push_back({Level::Pass, "inside machines", link_figures(*links.intra), ""});
    out.push_back({Level::Pass, "across machines", link_figures(*links.network), ""});
  }
  return links;
}

// This machine as the planner prices it: the GPU's built-in profile (its `base`; the default
// calibration), or the CPU as measured here (the start-up GEMM probe, a memcpy's bandwidth; its own
// calibration of 1: the figures are what it achieves); the links as measured. A GPU job's device is
// its GPU; without a spec, a GPU if there is one. Nothing (an empty name) for a GPU with no profile.
struct MeasuredMachine {
  MachineProfile machine;
  std::string base;  // the built-in profile of the GPU; "" for the CPU
};
MeasuredMachine measured_machine(const RunSpec* spec, const MeasuredLinks& links) {
  MeasuredMachine out;
  MachineProfile& m = out.machine;
  Nvml nvml;
  // a GPU job's, or without a spec a GPU if every rank has one ("auto" runs on the CPU); the same
  // on every rank: only the CPU's branch has a collective
  int gpu = spec ? spec->run.device == DeviceChoice::Cuda : nvml.ok();
  if (!spec) MPI_Allreduce(MPI_IN_PLACE, &gpu, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (gpu) {
    if (!nvml.ok() || !machine_profile_for_gpu(nvml.info(0).name, m)) return {};  // no profile of this GPU
    out.base = m.name;
  } else {
    const RunSpec plain;
    const RunSpec& s = spec ? *spec : plain;
    auto cpu = make_cpu_backend(int(s.run.threads));
    std::vector<char> a(size_t(256) << 20, 1), b(a.size());
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), a.size());
    // read what was copied: a copy into a buffer nobody reads may be optimized away
    volatile char sink = b[b.size() / 2];
    (void)sink;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // the slowest rank's figures: the job goes at its pace, and every rank prices the same machine
    double figures[3] = {device_peak(s, *cpu).tflops, 2.0 * double(a.size()) / secs, double(cpu->memory_available())};
    MPI_Allreduce(MPI_IN_PLACE, figures, 3, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    m.gpu = {"CPU (measured)", figures[0], figures[0], figures[1], figures[2]};
    Calibration c = default_calibration();
    c.gemm = c.memory = c.vector = 1;
    c.attention.clear();
    c.source = "this machine, measured by ztrain doctor";
    m.calibration = c;
  }
  m.name = "measured";
  m.source = "ztrain doctor";
  if (links.per_machine == 0) {  // machines unevenly filled: the job's ranks together, both ways
    m.gpus_per_machine = links.most_on_one;
    m.intra = m.network = links.world;
    m.intra.name = m.network.name = links.world.name + " (machines unevenly filled)";
    return out;
  }
  m.gpus_per_machine = links.per_machine;
  m.intra = links.intra.value_or(links.network.value_or(links.world));
  m.network = links.network.value_or(m.intra);
  if (!links.intra) m.intra.name = "not measured (one rank a machine): as across machines";
  if (!links.network) m.network.name = "not measured (one machine): as inside it";
  return out;
}

// Whether this job's communication hides behind its compute on the measured network: the
// planner's step (its collectives and waits, engine/plan/step_time.h) priced on measured_machine.
void overlap_check(const RunSpec& spec, const MachineProfile& machine, std::vector<Check>& out) {
  if (dist_world_rank() != 0) return;  // one verdict for the job: every rank priced the same machine
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (machine.name.empty()) {
    out.push_back({Level::Warn, "communication", "not priced: ztrain has no machine profile of this GPU", ""});
    return;
  }
  const DeviceKind kind = spec.run.device == DeviceChoice::Cuda ? DeviceKind::CUDA : DeviceKind::CPU;
  const Calibration cal = machine.calibration.value_or(default_calibration());
  LayoutPlan p;
  try {
    p = plan_layout(spec, world, kind, &machine, &cal);
  } catch (const UserError& e) {
    out.push_back({Level::Warn, "communication", fmt::format("not planned: {}", e.what()), ""});
    return;
  }
  const double waiting = p.time.step_s > 0 ? p.time.exposed_s() / p.time.step_s : 0;
  const std::string layout = fmt::format("{}, micro_batch {}: predicted step {:.3g} ms on {}, "
                                         "collectives {:.3g} ms, {:.0f}% of the step waiting for them",
                                         p.layout(), p.micro_batch, p.time.step_s * 1e3,
                                         machine.gpu.name, p.time.comm_s * 1e3, 100 * waiting);
  if (waiting <= 0.1) {
    out.push_back({Level::Pass, "communication", layout + ": it hides behind the compute", ""});
    return;
  }
  out.push_back({Level::Warn, "communication",
                 layout + (p.time.stalls.empty() ? "" : "; most for " + p.time.stalls[0].what),
                 fmt::format("more tokens per micro-step on each GPU (micro_batch x seq_len = {} now: the compute per "
                             "byte moved grows with it), tensor parallelism inside a machine, {}or fewer ranks across "
                             "the slow link; `ztrain plan --search --machine` ranks the layouts",
                             int64_t(spec.train.micro_batch * spec.model.seq_len),
                             p.zero_stage > 0 && p.replicate == 1
                                 ? "hybrid sharding ([parallel] replicate = the machines: ZeRO's traffic stays inside "
                                   "each, one all-reduce a step crosses the network), "
                                 : "")});
}

// Writes the measured machine for `ztrain plan --machine FILE` (rank 0).
void machine_file_check(const MeasuredMachine& measured, const MeasuredLinks& links, const RunSpec* spec,
                        const std::string& path, std::vector<Check>& out) {
  if (measured.machine.name.empty()) {
    out.push_back({Level::Fail, "machine file", path + ": not written: ztrain has no profile of this GPU", ""});
    return;
  }
  // GPUs whose job moves data over NCCL, timed over MPI in host memory: figures of another path
  const bool gpu = !measured.base.empty();
  if (gpu && !links.on_device && (!spec || spec->comm.backend != CommBackendChoice::Mpi)) {
    out.push_back({Level::Fail, "machine file", path + ": not written: the links were timed over MPI in host memory, "
                                                       "not NCCL between the GPUs",
                   "give the GPU job's spec (ztrain doctor SPEC --write-machine FILE), on a build with NCCL"});
    return;
  }
  if (dist_world_rank() != 0) return;
  MachineProfile m = measured.machine;
  m.name = std::filesystem::path(path).stem().string();  // as the file reads back without a name
  const std::string text = machine_file_text(
      m, measured.base,
      fmt::format("A machine profile measured by `ztrain doctor`; use it with `ztrain plan SPEC --machine {}`.\n"
                  "{} GPUs (ranks) a machine; the GPU {}; inside: {}; across: {}", path, m.gpus_per_machine, measured.base.empty() ? "is this CPU as measured" : "is the built-in " + measured.base,
                  m.intra.name, m.network.name));
  try {
    write_file_atomic(path, text);
  } catch (const std::exception& e) {
    out.push_back({Level::Fail, "machine file", e.what(), "a directory you can write to"});
    return;
  }
  out.push_back({Level::Pass, "machine file", path + ": `ztrain plan SPEC --machine " + path + "` prices layouts on it", ""});
}

}  // namespace

int run_doctor(const RunSpec* spec, const std::string& write_machine) {
  std::vector<Check> checks;
  gpu_checks(spec, checks);
  host_checks(Nvml().ok() || (spec && spec->run.device == DeviceChoice::Cuda), checks);  // GPUs pin host memory
  if (const auto links = links_check(spec, checks); links && (spec || !write_machine.empty())) {
    const MeasuredMachine measured = measured_machine(spec, *links);
    if (spec) overlap_check(*spec, measured.machine, checks);
    if (!write_machine.empty()) machine_file_check(measured, *links, spec, write_machine, checks);
  } else if (!write_machine.empty()) {
    checks.push_back({Level::Fail, "machine file", write_machine + ": not written: no links measured",
                      "run under mpirun with 2 or more ranks, as the job will"});
  }
  if (spec) {
    const data::DataOptions d = data_options(*spec);
    bool remote_data = false;
    for (const auto& s : spec->data.sources) {  // [data] train / val are sources too
      const bool one = spec->data.sources.size() <= 2 && (s.name == "train" || s.name == "val");
      source_check(one ? "data " + s.name : fmt::format("data {} '{}'", s.split, s.name), s.uri, d.store, checks);
      remote_data |= s.uri.find("://") != std::string::npos && s.uri.rfind("file://", 0) != 0;
    }
    if (remote_data) storage_check("cache_dir", spec->data.cache_dir, double(d.cache_limit), checks);
    storage_check("out_dir", spec->run.out_dir, 0, checks);
    if (!spec->checkpoint.dir.empty()) {
      if (is_remote_dir(spec->checkpoint.dir)) {
        try {
          auto store = open_checkpoint_store(*spec, d.store, spec->checkpoint.dir);
          (void)store->list("");
          checks.push_back({Level::Pass, "checkpoint dir", spec->checkpoint.dir + ": reachable (listed)", ""});
        } catch (const std::exception& e) {
          checks.push_back({Level::Fail, "checkpoint dir", e.what(), "check the URL, the credentials and the network"});
        }
      }
      storage_check("checkpoint local", local_checkpoint_root(*spec), 0, checks);
    }
  }
  // rank 0 prints everything; other ranks only what is not a pass, with their rank
  const int rank = dist_world_rank();
  int failed = 0;
  for (const Check& c : checks) {
    failed += c.level == Level::Fail;
    if (rank != 0 && c.level == Level::Pass) continue;
    std::printf("%s%-5s %-17s %s%s\n", rank ? fmt::format("rank {}: ", rank).c_str() : "",
                c.level == Level::Pass ? "PASS" : c.level == Level::Warn ? "WARN" : "FAIL", c.name.c_str(),
                c.detail.c_str(), c.fix.empty() ? "" : ("\n" + std::string(24, ' ') + "fix: " + c.fix).c_str());
  }
  std::fflush(stdout);
  return failed ? 1 : 0;
}

}  // namespace zt
