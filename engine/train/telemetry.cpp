// Device telemetry (see telemetry.h).
#include "engine/train/telemetry.h"

#include <dlfcn.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace zt {

// The part of NVML's C API used here, declared locally (the ABI is stable; nvml.h is not needed).
struct Telemetry::Nvml {
  using Device = void*;
  struct Utilization {
    unsigned gpu, memory;
  };
  struct Memory {
    unsigned long long total, free, used;
  };
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*count)(unsigned*) = nullptr;
  int (*handle)(unsigned, Device*) = nullptr;
  int (*utilization)(Device, Utilization*) = nullptr;
  int (*clock)(Device, int, unsigned*) = nullptr;
  int (*memory)(Device, Memory*) = nullptr;
  int (*power)(Device, unsigned*) = nullptr;
  int (*temperature)(Device, int, unsigned*) = nullptr;
  int (*reasons)(Device, unsigned long long*) = nullptr;
  std::vector<Device> devices;

  bool load(std::string& why) {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return why = "no libnvidia-ml.so.1 (no NVIDIA driver)", false;
    auto sym = [&](const char* name) { return dlsym(lib, name); };
    init = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
    shutdown = reinterpret_cast<int (*)()>(sym("nvmlShutdown"));
    count = reinterpret_cast<int (*)(unsigned*)>(sym("nvmlDeviceGetCount_v2"));
    handle = reinterpret_cast<int (*)(unsigned, Device*)>(sym("nvmlDeviceGetHandleByIndex_v2"));
    utilization = reinterpret_cast<int (*)(Device, Utilization*)>(sym("nvmlDeviceGetUtilizationRates"));
    clock = reinterpret_cast<int (*)(Device, int, unsigned*)>(sym("nvmlDeviceGetClockInfo"));
    memory = reinterpret_cast<int (*)(Device, Memory*)>(sym("nvmlDeviceGetMemoryInfo"));
    power = reinterpret_cast<int (*)(Device, unsigned*)>(sym("nvmlDeviceGetPowerUsage"));
    temperature = reinterpret_cast<int (*)(Device, int, unsigned*)>(sym("nvmlDeviceGetTemperature"));
    reasons = reinterpret_cast<int (*)(Device, unsigned long long*)>(sym("nvmlDeviceGetCurrentClocksEventReasons"));
    if (!reasons)
      reasons = reinterpret_cast<int (*)(Device, unsigned long long*)>(sym("nvmlDeviceGetCurrentClocksThrottleReasons"));
    if (!init || !count || !handle || init() != 0) return why = "NVML did not initialize", false;
    unsigned n = 0;
    if (count(&n) != 0 || n == 0) return why = "NVML sees no GPU", false;
    for (unsigned i = 0; i < n; ++i) {
      Device d = nullptr;
      if (handle(i, &d) == 0) devices.push_back(d);
    }
    return true;
  }
  ~Nvml() {
    if (shutdown && !devices.empty()) shutdown();
    if (lib) dlclose(lib);
  }
};

namespace {
double wall_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double process_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}
long long rss_bytes() {
  long long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  const bool ok = std::fscanf(f, "%lld %lld", &pages, &resident) == 2;
  std::fclose(f);
  return ok ? resident * sysconf(_SC_PAGESIZE) : -1;
}
// NVML's clock-event reason bits (nvml.h) by name
std::vector<std::string> reason_names(unsigned long long r) {
  static const std::pair<unsigned long long, const char*> bits[] = {
      {0x1, "gpu_idle"},      {0x2, "applications_clocks"}, {0x4, "sw_power_cap"},  {0x8, "hw_slowdown"},
      {0x10, "sync_boost"},   {0x20, "sw_thermal"},         {0x40, "hw_thermal"},   {0x80, "hw_power_brake"},
      {0x100, "display_clocks"}};
  std::vector<std::string> out;
  for (auto [bit, name] : bits)
    if (r & bit) out.push_back(name);
  return out;
}
}  // namespace

Telemetry::Telemetry(double every_s, bool gpus, int threads, std::function<void(const nlohmann::json&)> sink)
    : every_s_(every_s), threads_(std::max(1, threads)), sink_(std::move(sink)) {
  if (gpus) {
    nvml_ = std::make_unique<Nvml>();
    std::string why;
    if (nvml_->load(why)) status_ = fmt::format("NVML, {} GPU(s)", nvml_->devices.size());
    else status_ = why, nvml_.reset();
  } else {
    status_ = fmt::format("process CPU utilization over {} threads and resident memory", threads_);
  }
  last_cpu_s_ = process_cpu_s(), last_wall_s_ = wall_s();
  thread_ = std::thread([this] { loop(); });
}

Telemetry::~Telemetry() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Telemetry::loop() {
  const double start = wall_s();
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::duration<double>(every_s_), [this] { return stop_; })) {
    const double t = wall_s() - start;
    try {
      if (nvml_) sample_gpus(t);
      else sample_cpu(t);
    } catch (...) {  // telemetry must never end a run
    }
  }
}

void Telemetry::sample_cpu(double t) {
  const double cpu = process_cpu_s(), wall = wall_s();
  const double util = (cpu - last_cpu_s_) / std::max(1e-9, (wall - last_wall_s_) * threads_);
  last_cpu_s_ = cpu, last_wall_s_ = wall;
  sink_({{"kind", "device"}, {"t", t}, {"device", "cpu"}, {"cpu_util", util}, {"rss_bytes", rss_bytes()}});
}

void Telemetry::sample_gpus(double t) {
  Nvml& n = *nvml_;
  std::vector<std::string> reasons;
  for (size_t i = 0; i < n.devices.size(); ++i) {
    nlohmann::json row = {{"kind", "device"}, {"t", t}, {"device", fmt::format("gpu{}", i)}};
    Nvml::Utilization u{};
    if (n.utilization && n.utilization(n.devices[i], &u) == 0) row["util_gpu"] = u.gpu / 100.0, row["util_mem"] = u.memory / 100.0;
    unsigned v = 0;
    if (n.clock && n.clock(n.devices[i], 1 /* NVML_CLOCK_SM */, &v) == 0) row["sm_clock_mhz"] = v;
    Nvml::Memory m{};
    if (n.memory && n.memory(n.devices[i], &m) == 0) row["mem_used_bytes"] = m.used;
    if (n.power && n.power(n.devices[i], &v) == 0) row["power_w"] = v / 1000.0;
    if (n.temperature && n.temperature(n.devices[i], 0 /* NVML_TEMPERATURE_GPU */, &v) == 0) row["temp_c"] = v;
    unsigned long long r = 0;
    if (n.reasons && n.reasons(n.devices[i], &r) == 0) {
      row["clock_event_reasons"] = reason_names(r);
      reasons.insert(reasons.end(), row["clock_event_reasons"].begin(), row["clock_event_reasons"].end());
    }
    sink_(row);
  }
  reasons_ = std::move(reasons);  // mu_ is held by loop()
}

std::vector<std::string> Telemetry::throttle_reasons() const {
  std::lock_guard lock(mu_);
  return reasons_;
}

}  // namespace zt
