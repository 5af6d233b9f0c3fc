// read_machine_profile (see machine_file.h).
#include "engine/plan/machine_file.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include <toml++/toml.h>

#include "engine/core/status.h"
#include "engine/plan/step_time.h"

namespace zt {

MachineProfile read_machine_profile(const std::string& path) {
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    user_error("{}:{}: {}", path, e.source().begin.line, e.description());
  }
  const toml::table* top = doc["machine"].as_table();
  MachineProfile m;
  if (top && (*top)["base"]) {
    const auto base = (*top)["base"].value<std::string>();
    const auto known = machine_profile_names();
    if (!base || std::find(known.begin(), known.end(), *base) == known.end())
      user_error("{}: [machine] base must be one of the built-in profiles ({})", path, machine_profile_list());
    m = machine_profile(*base);
    m.source = fmt::format("{} (on {})", path, *base);
  } else {
    m.source = path;
  }
  m.name = std::filesystem::path(path).stem().string();
  // section -> key -> what it sets, from a number; strings apart
  using Set = std::function<void(double)>;
  auto cal = [&]() -> Calibration& {  // a [calibration] starts from the default's fractions
    if (!m.calibration) {
      m.calibration = default_calibration();
      m.calibration->source = path;
    }
    return *m.calibration;
  };
  bool own_attention = false;
  auto attention = [&]() -> Calibration::Attention& {  // given: one figure for every shape
    if (!own_attention) cal().attention = {Calibration::Attention{}}, own_attention = true;
    return cal().attention[0];
  };
  const double GB = 1e9;
  std::map<std::string, std::map<std::string, Set>> numbers = {
      {"machine", {{"gpus_per_machine", [&](double v) { m.gpus_per_machine = int(v); }},
                   {"price_per_hour", [&](double v) { m.price_per_hour = v; }}}},
      {"gpu", {{"tflops", [&](double v) { m.gpu.tflops = v; }},
               {"vector_tflops", [&](double v) { m.gpu.vector_tflops = v; }},
               {"fp8_tflops", [&](double v) { m.gpu.fp8_tflops = v; }},
               {"memory_gb_per_s", [&](double v) { m.gpu.bytes_per_s = v * GB; }},
               {"memory_gb", [&](double v) { m.gpu.memory_bytes = v * GB; }}}},
      {"intra", {{"bus_gb_per_s", [&](double v) { m.intra.bytes_per_s = v * GB; }},
               {"reduce_scatter_gb_per_s", [&](double v) { m.intra.reduce_scatter_bytes_per_s = v * GB; }},
               {"all_gather_gb_per_s", [&](double v) { m.intra.all_gather_bytes_per_s = v * GB; }},
                 {"step_latency_us", [&](double v) { m.intra.step_latency_s = v * 1e-6; }}}},
      {"network", {{"bus_gb_per_s", [&](double v) { m.network.bytes_per_s = v * GB; }},
               {"reduce_scatter_gb_per_s", [&](double v) { m.network.reduce_scatter_bytes_per_s = v * GB; }},
               {"all_gather_gb_per_s", [&](double v) { m.network.all_gather_bytes_per_s = v * GB; }},
                   {"step_latency_us", [&](double v) { m.network.step_latency_s = v * 1e-6; }}}},
      // fractions of the [gpu] figures its ops reach (absent: the default calibration's)
      {"calibration", {{"gemm", [&](double v) { cal().gemm = v; }},
                       {"fp8_gemm", [&](double v) { cal().fp8_gemm = v; }},
                       {"attention_forward", [&](double v) { attention().forward = v; }},
                       {"attention_backward", [&](double v) { attention().backward = v; }},
                       {"memory", [&](double v) { cal().memory = v; }},
                       {"vector", [&](double v) { cal().vector = v; }}}},
  };
  std::map<std::string, std::string*> names = {
      {"machine", &m.name}, {"gpu", &m.gpu.name}, {"intra", &m.intra.name}, {"network", &m.network.name}};
  for (const auto& [sec, node] : doc) {
    const std::string section(sec.str());
    const int line = int(node.source().begin.line);
    if (!numbers.count(section))
      user_error("{}:{}: unknown section [{}] (machine, gpu, intra, network, calibration)", path, line, section);
    const toml::table* t = node.as_table();
    if (!t) user_error("{}:{}: [{}] must be a table", path, line, section);
    for (const auto& [k, v] : *t) {
      const std::string key(k.str());
      const int kline = int(v.source().begin.line);
      if ((key == "name" && names.count(section)) || (section == "machine" && key == "base")) {
        const auto s = v.value<std::string>();
        if (!s) user_error("{}:{}: [{}] {} must be a string", path, kline, section, key);
        if (key == "name") *names[section] = *s;
        continue;
      }
      const auto it = numbers[section].find(key);
      if (it == numbers[section].end()) {
        std::string known = "name";
        for (const auto& [n, _] : numbers[section]) known += ", " + n;
        user_error("{}:{}: unknown key [{}] {} (known: {})", path, kline, section, key, known);
      }
      const auto x = v.value<double>();
      if (!x || !std::isfinite(*x) || *x < 0 || (key != "price_per_hour" && key != "step_latency_us" && *x <= 0))
        user_error("{}:{}: [{}] {} must be a positive number", path, kline, section, key);
      if (key == "gpus_per_machine" && (*x != std::floor(*x) || *x > 1024))
        user_error("{}:{}: [machine] gpus_per_machine must be a whole number up to 1024", path, kline);
      // a fraction of a peak above 1 would price the step faster than the hardware (MFU > 100%);
      // a figure so large it overflows once scaled is no figure
      if (section == "calibration" && *x > 1)
        user_error("{}:{}: [calibration] {} must be a fraction in (0, 1] of the [gpu] figure, got {}", path, kline, key, *x);
      if (*x > 1e12) user_error("{}:{}: [{}] {} = {} is out of range", path, kline, section, key, *x);
      it->second(*x);
    }
  }
  // an attention figure given for one direction only stands for both
  if (m.calibration && !m.calibration->attention.empty()) {
    Calibration::Attention& a = m.calibration->attention[0];
    if (a.forward <= 0) a.forward = a.backward;
    if (a.backward <= 0) a.backward = a.forward;
  }
  if (m.gpu.tflops <= 0 || m.gpu.vector_tflops <= 0 || m.gpu.bytes_per_s <= 0 || m.intra.bytes_per_s <= 0 ||
      m.network.bytes_per_s <= 0)
    user_error("{}: a machine needs [gpu] tflops, vector_tflops and memory_gb_per_s, and [intra] and [network] "
               "bus_gb_per_s (or [machine] base = a built-in profile: {})", path, machine_profile_list());
  return m;
}

std::string machine_file_text(const MachineProfile& m, const std::string& base, const std::string& comment) {
  std::string t;
  for (size_t at = 0; at < comment.size();) {
    const size_t nl = std::min(comment.find('\n', at), comment.size());
    t += "# ";
    for (const char c : comment.substr(at, nl - at)) t += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
    t += "\n";
    at = nl + 1;
  }
  auto quoted = [](const std::string& s) {  // a TOML basic string: quotes, backslashes and controls escaped
    std::string q = "\"";
    for (const char c : s) {
      if (c == '"' || c == '\\') q += std::string("\\") + c;
      else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) q += fmt::format("\\u{:04X}", int(static_cast<unsigned char>(c)));
      else q += c;
    }
    return q + "\"";
  };
  auto num = [](double v) { return fmt::format("{:.6g}", v); };  // measured figures: 6 digits are more than they hold
  t += "[machine]\n";
  if (!base.empty()) t += "base = " + quoted(base) + "\n";
  t += "name = " + quoted(m.name) + "\ngpus_per_machine = " + std::to_string(m.gpus_per_machine) + "\n";
  if (m.price_per_hour > 0) t += "price_per_hour = " + num(m.price_per_hour) + "\n";
  if (base.empty())
    t += fmt::format("[gpu]\nname = {}\ntflops = {}\nvector_tflops = {}\nmemory_gb_per_s = {}\nmemory_gb = {}\n",
                     quoted(m.gpu.name), num(m.gpu.tflops), num(m.gpu.vector_tflops), num(m.gpu.bytes_per_s / 1e9),
                     num(m.gpu.memory_bytes / 1e9));
  if (base.empty() && m.gpu.fp8_tflops > 0) t += "fp8_tflops = " + num(m.gpu.fp8_tflops) + "\n";
  for (const auto& [section, l] : {std::pair<const char*, const Link&>{"intra", m.intra}, {"network", m.network}}) {
    t += fmt::format("[{}]\nname = {}\nbus_gb_per_s = {}\nstep_latency_us = {}\n", section, quoted(l.name),
                     num(l.bytes_per_s / 1e9), num(l.step_latency_s * 1e6));
    if (l.reduce_scatter_bytes_per_s > 0) t += "reduce_scatter_gb_per_s = " + num(l.reduce_scatter_bytes_per_s / 1e9) + "\n";
    if (l.all_gather_bytes_per_s > 0) t += "all_gather_gb_per_s = " + num(l.all_gather_bytes_per_s / 1e9) + "\n";
  }
  if (m.calibration) {
    const Calibration& c = *m.calibration;
    // one attention figure a direction (a file's [calibration] has no shapes): none measured is as the GEMMs
    const Calibration::Attention a = c.attention.empty() ? Calibration::Attention{0, 0, c.gemm, c.gemm}
                                                         : c.attention.front();
    t += fmt::format("[calibration]\ngemm = {}\nattention_forward = {}\nattention_backward = {}\nmemory = {}\n"
                     "vector = {}\n", num(c.gemm), num(a.forward), num(a.backward), num(c.memory), num(c.vector));
    if (c.fp8_gemm > 0) t += "fp8_gemm = " + num(c.fp8_gemm) + "\n";
  }
  return t;
}

}  // namespace zt
