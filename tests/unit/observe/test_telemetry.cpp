// NVML telemetry against tests/fake_nvml (a stand-in libnvidia-ml.so.1 found through
// LD_LIBRARY_PATH): the dlopen bindings, GPM's two-sample windows, the "device" rows and the
// signals the verdict reads. Hidden tag: ctest runs it with the stand-in on the library path
// (test `telemetry_nvml_stand_in`); on a real GPU machine the GPU check reads the real NVML.
#include <catch2/catch.hpp>

#include <chrono>
#include <mutex>
#include <thread>

#include "engine/backend/nvml.h"
#include "engine/observe/telemetry.h"

using namespace zt;

TEST_CASE("telemetry: NVML and GPM rows from the stand-in libnvidia-ml", "[.nvml]") {
  Nvml nvml;
  REQUIRE(nvml.ok());
  REQUIRE(nvml.gpus() == 2);
  REQUIRE(nvml.gpm());
  const auto first = nvml.sample();
  REQUIRE(first.size() == 2);
  CHECK(first[0].sm_active == -1);  // one sample opens the window, it measures nothing yet
  CHECK(first[0].util_gpu == Approx(1.0));
  CHECK(first[0].sm_clock_mhz == 1980);
  CHECK(first[1].mem_used_bytes == 2ll << 30);
  CHECK(first[1].clock_event_reasons == std::vector<std::string>{"hw_thermal"});
  for (int k = 0; k < 2; ++k) {  // each later sample: the window since the previous one
    const auto next = nvml.sample();
    CHECK(next[0].sm_active == Approx(0.40));
    CHECK(next[0].sm_occupancy == Approx(0.25));
    CHECK(next[0].tensor_active == Approx(0.20));
    CHECK(next[0].dram_active == Approx(0.55));
    CHECK(next[1].sm_active == -1);  // GPU 1 has no GPM
  }

  std::mutex mu;
  std::vector<nlohmann::json> rows;
  DeviceSignals signals;
  std::string status;
  {
    Telemetry t(0.02, /*gpus=*/true, 1, [&](const nlohmann::json& r) {
      std::lock_guard lock(mu);
      rows.push_back(r);
    });
    status = t.status();
    for (int i = 0; i < 200; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::lock_guard lock(mu);
      if (rows.size() >= 6) break;
    }
    signals = t.signals();
  }
  CHECK(status.find("GPM") != std::string::npos);
  REQUIRE(rows.size() >= 6);
  bool gpm_row = false;
  for (const auto& r : rows) {
    CHECK(r["kind"] == "device");
    if (r["device"] == "gpu1") CHECK(!r.contains("sm_active"));
    if (r["device"] == "gpu0" && r.contains("sm_active")) {
      gpm_row = true;
      CHECK(r["sm_active"].get<double>() == Approx(0.40));
    }
  }
  CHECK(gpm_row);
  CHECK(signals.sm_active == Approx(0.40));  // the mean over the GPUs that have GPM
  CHECK(signals.tensor_active == Approx(0.20));
  CHECK(signals.throttle_reasons == std::vector<std::string>{"hw_thermal"});
  CHECK(nvml.index_of_pci("00000000:41:00.0") == 1);
  CHECK(nvml.index_of_pci("00000000:99:00.0") == -1);
  {  // this rank's GPU is GPU 1, which has no GPM: the verdict gets no SM activity
    Telemetry t(0.02, true, 1, [](const nlohmann::json&) {}, "00000000:41:00.0");
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    CHECK(t.signals().sm_active == -1);
  }
}
