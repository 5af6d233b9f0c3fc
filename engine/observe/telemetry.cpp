// Device telemetry (see telemetry.h).
#include "engine/observe/telemetry.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace zt {

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
}  // namespace

Telemetry::Telemetry(double every_s, bool gpus, int threads, std::function<void(const nlohmann::json&)> sink,
                     const std::string& focus_pci)
    : every_s_(every_s), threads_(std::max(1, threads)), sink_(std::move(sink)) {
  if (gpus) {
    nvml_ = std::make_unique<Nvml>();
    focus_ = nvml_->index_of_pci(focus_pci);
    if (nvml_->ok())
      status_ = fmt::format("NVML, {} GPU(s){}", nvml_->gpus(),
                            nvml_->gpm() ? ", GPM SM/tensor/DRAM activity" : " (no GPM metrics: before Hopper, or the driver)");
    else status_ = nvml_->why(), nvml_.reset();
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
  std::vector<std::string> reasons;
  double sm = 0, tensor = 0;
  int gpm = 0;
  for (const GpuSample& g : nvml_->sample()) {
    nlohmann::json row = {{"kind", "device"}, {"t", t}, {"device", fmt::format("gpu{}", g.index)}};
    auto put = [&](const char* key, double v) {
      if (v >= 0) row[key] = v;
    };
    put("util_gpu", g.util_gpu);
    put("util_mem", g.util_mem);
    put("sm_clock_mhz", double(g.sm_clock_mhz));
    put("mem_used_bytes", double(g.mem_used_bytes));
    put("power_w", g.power_w);
    put("temp_c", g.temp_c);
    put("sm_active", g.sm_active);
    put("sm_occupancy", g.sm_occupancy);
    put("tensor_active", g.tensor_active);
    put("dram_active", g.dram_active);
    row["clock_event_reasons"] = g.clock_event_reasons;
    reasons.insert(reasons.end(), g.clock_event_reasons.begin(), g.clock_event_reasons.end());
    if (g.sm_active >= 0 && (focus_ < 0 || g.index == focus_))
      sm += g.sm_active, tensor += std::max(0.0, g.tensor_active), ++gpm;
    sink_(row);
  }
  // mu_ is held by loop()
  signals_.throttle_reasons = std::move(reasons);
  signals_.sm_active = gpm ? sm / gpm : -1;
  signals_.tensor_active = gpm ? tensor / gpm : -1;
}

DeviceSignals Telemetry::signals() const {
  std::lock_guard lock(mu_);
  return signals_;
}

}  // namespace zt
