// NVML through dlopen (see nvml.h). The part of NVML's C API used here is declared locally: the
// ABI is stable and nvml.h is not needed to build.
#include "engine/backend/nvml.h"

#include <dlfcn.h>

#include <utility>

namespace zt {

struct Nvml::Api {
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
  int (*handle)(unsigned, void**) = nullptr;
  int (*utilization)(void*, Utilization*) = nullptr;
  int (*clock)(void*, int, unsigned*) = nullptr;
  int (*memory)(void*, Memory*) = nullptr;
  int (*power)(void*, unsigned*) = nullptr;
  int (*temperature)(void*, int, unsigned*) = nullptr;
  int (*reasons)(void*, unsigned long long*) = nullptr;
  int (*name)(void*, char*, unsigned) = nullptr;
  int (*cc)(void*, int*, int*) = nullptr;
  int (*pcie_gen)(void*, unsigned*) = nullptr;
  int (*pcie_width)(void*, unsigned*) = nullptr;
  int (*nvlink_state)(void*, unsigned, int*) = nullptr;
  int (*ecc)(void*, int*, int*) = nullptr;
  int (*driver)(char*, unsigned) = nullptr;
  int (*cuda_driver)(int*) = nullptr;
  // GPM (nvml.h: nvmlGpmSample_t is an opaque pointer; metric ids from nvmlGpmMetricId_t)
  struct GpmSupport {
    unsigned version, supported;
  };
  struct GpmMetric {
    unsigned id;
    int status;
    double value;  // percent
    const char *short_name, *long_name, *unit;
  };
  static constexpr int kGpmMetrics = 4;  // numMetrics: the metrics asked for
  struct GpmMetricsGet {
    unsigned version, count;
    void *sample1, *sample2;
    GpmMetric metrics[98];  // NVML_GPM_METRIC_MAX: the header's full size, whatever NVML touches
  };
  int (*by_pci)(const char*, void**) = nullptr;
  int (*gpm_support)(void*, GpmSupport*) = nullptr;
  int (*gpm_alloc)(void**) = nullptr;
  int (*gpm_free)(void*) = nullptr;
  int (*gpm_get)(void*, void*) = nullptr;
  int (*gpm_metrics)(GpmMetricsGet*) = nullptr;
};

namespace {
// NVML's clock-event reason bits (nvml.h) by name
std::vector<std::string> reason_names(unsigned long long r) {
  static const std::pair<unsigned long long, const char*> bits[] = {
      {0x1, "gpu_idle"},    {0x2, "applications_clocks"}, {0x4, "sw_power_cap"}, {0x8, "hw_slowdown"},
      {0x10, "sync_boost"}, {0x20, "sw_thermal"},         {0x40, "hw_thermal"},  {0x80, "hw_power_brake"},
      {0x100, "display_clocks"}};
  std::vector<std::string> out;
  for (auto [bit, name] : bits)
    if (r & bit) out.push_back(name);
  return out;
}
template <typename F>
void bind(void* lib, F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(lib, name));
}
}  // namespace

Nvml::Nvml() : api_(std::make_unique<Api>()) {
  Api& a = *api_;
  a.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!a.lib) {
    why_ = "no libnvidia-ml.so.1 (no NVIDIA driver)";
    return;
  }
  bind(a.lib, a.init, "nvmlInit_v2");
  bind(a.lib, a.shutdown, "nvmlShutdown");
  bind(a.lib, a.count, "nvmlDeviceGetCount_v2");
  bind(a.lib, a.handle, "nvmlDeviceGetHandleByIndex_v2");
  bind(a.lib, a.utilization, "nvmlDeviceGetUtilizationRates");
  bind(a.lib, a.clock, "nvmlDeviceGetClockInfo");
  bind(a.lib, a.memory, "nvmlDeviceGetMemoryInfo");
  bind(a.lib, a.power, "nvmlDeviceGetPowerUsage");
  bind(a.lib, a.temperature, "nvmlDeviceGetTemperature");
  bind(a.lib, a.reasons, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!a.reasons) bind(a.lib, a.reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
  bind(a.lib, a.name, "nvmlDeviceGetName");
  bind(a.lib, a.cc, "nvmlDeviceGetCudaComputeCapability");
  bind(a.lib, a.pcie_gen, "nvmlDeviceGetCurrPcieLinkGeneration");
  bind(a.lib, a.pcie_width, "nvmlDeviceGetCurrPcieLinkWidth");
  bind(a.lib, a.nvlink_state, "nvmlDeviceGetNvLinkState");
  bind(a.lib, a.ecc, "nvmlDeviceGetEccMode");
  bind(a.lib, a.driver, "nvmlSystemGetDriverVersion");
  bind(a.lib, a.cuda_driver, "nvmlSystemGetCudaDriverVersion_v2");
  bind(a.lib, a.by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
  bind(a.lib, a.gpm_support, "nvmlGpmQueryDeviceSupport");
  bind(a.lib, a.gpm_alloc, "nvmlGpmSampleAlloc");
  bind(a.lib, a.gpm_free, "nvmlGpmSampleFree");
  bind(a.lib, a.gpm_get, "nvmlGpmSampleGet");
  bind(a.lib, a.gpm_metrics, "nvmlGpmMetricsGet");
  if (!a.init || !a.count || !a.handle || a.init() != 0) {
    why_ = "NVML did not initialize";
    return;
  }
  unsigned n = 0;
  if (a.count(&n) != 0 || n == 0) {
    why_ = "NVML sees no GPU";
    return;
  }
  for (unsigned i = 0; i < n; ++i) {
    void* d = nullptr;
    if (a.handle(i, &d) == 0) devices_.push_back(d);
  }
  // GPM: two sample buffers per supported device (the previous one and the next)
  const bool gpm_api = a.gpm_support && a.gpm_alloc && a.gpm_free && a.gpm_get && a.gpm_metrics;
  bool any = false;
  for (void* d : devices_) {
    void *prev = nullptr, *next = nullptr;
    Api::GpmSupport sup{1 /* NVML_GPM_SUPPORT_VERSION */, 0};
    if (gpm_api && a.gpm_support(d, &sup) == 0 && sup.supported && a.gpm_alloc(&prev) == 0) {
      if (a.gpm_alloc(&next) != 0) a.gpm_free(prev), prev = nullptr;
    }
    gpm_.push_back(prev), gpm_spare_.push_back(next);
    any = any || prev;
  }
  if (!any) gpm_.clear(), gpm_spare_.clear();
  gpm_started_.assign(gpm_.size(), false);
}

Nvml::~Nvml() {
  for (std::vector<void*>* v : {&gpm_, &gpm_spare_})
    for (void* g : *v)
      if (g) api_->gpm_free(g);
  if (api_->shutdown && !devices_.empty()) api_->shutdown();
  if (api_->lib) dlclose(api_->lib);
}

std::vector<GpuSample> Nvml::sample() {
  const Api& a = *api_;
  std::vector<GpuSample> out;
  for (size_t i = 0; i < devices_.size(); ++i) {
    void* d = devices_[i];
    GpuSample s;
    s.index = int(i);
    Api::Utilization u{};
    if (a.utilization && a.utilization(d, &u) == 0) s.util_gpu = u.gpu / 100.0, s.util_mem = u.memory / 100.0;
    unsigned v = 0;
    if (a.clock && a.clock(d, 1 /* NVML_CLOCK_SM */, &v) == 0) s.sm_clock_mhz = v;
    Api::Memory m{};
    if (a.memory && a.memory(d, &m) == 0) s.mem_used_bytes = (long long)m.used;
    if (a.power && a.power(d, &v) == 0) s.power_w = v / 1000.0;
    if (a.temperature && a.temperature(d, 0 /* NVML_TEMPERATURE_GPU */, &v) == 0) s.temp_c = v;
    unsigned long long r = 0;
    if (a.reasons && a.reasons(d, &r) == 0) s.clock_event_reasons = reason_names(r);
    if (i < gpm_.size() && gpm_[i]) read_gpm(i, s);
    out.push_back(std::move(s));
  }
  return out;
}

void Nvml::read_gpm(size_t i, GpuSample& s) {
  // GPM metrics are rates between two samples: take the next one, compare it with the previous
  // (once there is one), and keep it as the previous for the next call.
  const Api& a = *api_;
  if (a.gpm_get(devices_[i], gpm_spare_[i]) != 0) return;
  if (gpm_started_[i]) {
    auto owned = std::make_unique<Api::GpmMetricsGet>();  // ~4 KB: on the heap
    Api::GpmMetricsGet& q = *owned;
    q.version = 1;  // NVML_GPM_METRICS_GET_VERSION
    q.count = Api::kGpmMetrics;
    q.sample1 = gpm_[i], q.sample2 = gpm_spare_[i];
    // NVML_GPM_METRIC_SM_UTIL, _SM_OCCUPANCY, _ANY_TENSOR_UTIL, _DRAM_BW_UTIL (percent)
    const unsigned ids[Api::kGpmMetrics] = {2, 3, 5, 10};
    double* into[Api::kGpmMetrics] = {&s.sm_active, &s.sm_occupancy, &s.tensor_active, &s.dram_active};
    for (int k = 0; k < Api::kGpmMetrics; ++k) q.metrics[k].id = ids[k];
    if (a.gpm_metrics(&q) == 0)
      for (int k = 0; k < Api::kGpmMetrics; ++k)
        if (q.metrics[k].status == 0) *into[k] = q.metrics[k].value / 100.0;
  }
  gpm_started_[i] = true;
  std::swap(gpm_[i], gpm_spare_[i]);
}

int Nvml::index_of_pci(const std::string& bus_id) const {
  void* d = nullptr;
  if (bus_id.empty() || !api_->by_pci || api_->by_pci(bus_id.c_str(), &d) != 0) return -1;
  for (size_t i = 0; i < devices_.size(); ++i)
    if (devices_[i] == d) return int(i);
  return -1;
}

GpuInfo Nvml::info(size_t gpu) const {
  const Api& a = *api_;
  void* d = devices_.at(gpu);
  GpuInfo g;
  char buf[96] = {};
  if (a.name && a.name(d, buf, sizeof buf) == 0) g.name = buf;
  if (a.cc) a.cc(d, &g.cc_major, &g.cc_minor);
  unsigned v = 0;
  if (a.pcie_gen && a.pcie_gen(d, &v) == 0) g.pcie_gen = int(v);
  if (a.pcie_width && a.pcie_width(d, &v) == 0) g.pcie_width = int(v);
  if (a.nvlink_state) {
    int state = 0, active = 0;
    bool any = false;
    for (unsigned link = 0; link < 18; ++link)
      if (a.nvlink_state(d, link, &state) == 0) any = true, active += state == 1;
    if (any) g.nvlinks_active = active;
  }
  int current = 0, pending = 0;
  if (a.ecc && a.ecc(d, &current, &pending) == 0) g.ecc_enabled = current;
  return g;
}

std::string Nvml::driver_version() const {
  char buf[96] = {};
  return api_->driver && api_->driver(buf, sizeof buf) == 0 ? std::string(buf) : std::string();
}

int Nvml::cuda_driver_version() const {
  int v = -1;
  return api_->cuda_driver && api_->cuda_driver(&v) == 0 ? v : -1;
}

}  // namespace zt
