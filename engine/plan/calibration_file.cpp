// read_calibration (see calibration_file.h).
#include "engine/plan/calibration_file.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/core/status.h"

namespace zt {

Calibration read_calibration(const std::string& path) {
  std::ifstream in(path);
  if (!in) user_error("--calibration {}: cannot open it", path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) user_error("--calibration {}: not a JSON object", path);
  auto number = [&](const nlohmann::json& o, const char* key, const std::string& where) {
    if (!o.contains(key) || !o[key].is_number() || o[key].get<double>() <= 0)
      user_error("--calibration {}: {}{} must be a positive number", path, where, key);
    return o[key].get<double>();
  };
  // the GPU it was measured on: its datasheet HBM bandwidth turns the measured copies into a fraction
  const std::string gpu = j.contains("gpu") && j["gpu"].is_string() ? j["gpu"].get<std::string>() : "";
  MachineProfile measured;
  if (!machine_profile_for_gpu(gpu, measured))
    user_error("--calibration {}: \"gpu\": '{}' is not a GPU ztrain has a profile of", path, gpu);
  const DeviceSpec* spec = &measured.gpu;
  const double peak = number(j, "peak_bf16_tflops_spec", "");
  Calibration c;
  if (!j.contains("gemm_shapes") || !j["gemm_shapes"].is_array() || j["gemm_shapes"].empty())
    user_error("--calibration {}: gemm_shapes must list the GEMMs measured", path);
  double sum = 0;
  for (const auto& g : j["gemm_shapes"]) sum += number(g, "tflops", "gemm_shapes[].");
  c.gemm = sum / double(j["gemm_shapes"].size()) / peak;
  if (j.contains("attention") && j["attention"].is_array())
    for (const auto& a : j["attention"]) {
      if (!a.is_object() || a.value("precision", "") != "bf16") continue;
      c.attention.push_back({int(number(a, "head_size", "attention[].")), int(number(a, "T", "attention[].")),
                             number(a, "fwd_tflops", "attention[].") / peak,
                             number(a, "bwd_tflops", "attention[].") / peak});
    }
  if (c.attention.empty()) user_error("--calibration {}: attention lists no bf16 shape", path);
  c.memory = number(j, "memory_gb_per_s", "") * 1e9 / spec->bytes_per_s;
  // fractions above 1 would price steps faster than the datasheet allows (MFU > 100%)
  auto fraction = [&](double f, const char* what) {
    if (!(f > 0 && f <= 1))
      user_error("--calibration {}: {} is {:.3g} of the {} datasheet's figure: a measurement above the peak", path,
                 what, f, measured.gpu.name);
  };
  fraction(c.gemm, "gemm_shapes' mean TFLOP/s");
  fraction(c.memory, "memory_gb_per_s");
  for (const auto& a : c.attention) fraction(std::max(a.forward, a.backward), "an attention shape's TFLOP/s");
  c.vector = c.memory;
  // the FP8 linear layers' forward per shape (tools/gpu_check.sh's fp8 stage), its casts included:
  // each operand read twice in bf16 (amax, cast) and written once in FP8, at the measured bandwidth,
  // is taken out; the rest is the FP8 GEMM, a fraction of the GPU's FP8 peak. Where the stage also
  // timed the forward with the weight cast beforehand (fp8_fwd_weight_copy_ms, as training runs it
  // at ZeRO 0-2), that time is used: only the input's cast is modelled and taken out.
  if (j.contains("fp8_linear") && j["fp8_linear"].is_array() && measured.gpu.fp8_tflops > 0) {
    double sum = 0;
    int n = 0;
    for (const auto& r : j["fp8_linear"]) {
      const double N = number(r, "N", "fp8_linear[]."), C = number(r, "C", "fp8_linear[]."),
                   OC = number(r, "OC", "fp8_linear[].");
      const bool copy = r.contains("fp8_fwd_weight_copy_ms");
      const double ms = number(r, copy ? "fp8_fwd_weight_copy_ms" : "fp8_fwd_ms", "fp8_linear[].");
      const double cast = N * C + (copy ? 0.0 : OC * C);  // elements cast in the timed call
      const double casts_s = cast * 5.0 / (c.memory * spec->bytes_per_s), gemm_s = ms / 1e3 - casts_s;
      if (gemm_s <= 0) continue;  // a shape whose casts take all its time tells nothing of the GEMM
      sum += 2.0 * N * C * OC / gemm_s / (measured.gpu.fp8_tflops * 1e12), ++n;
    }
    if (n > 0) c.fp8_gemm = sum / n, fraction(c.fp8_gemm, "fp8_linear's mean GEMM TFLOP/s");
  }
  c.source = path + " (" + gpu.substr(0, gpu.find(',')) + ")";
  return c;
}

}  // namespace zt
