// Low-rank adapters out and in (see lora_export.h).
#include "engine/hf/lora_export.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "engine/backend/backend.h"
#include "engine/checkpoint/checkpoint_files.h"
#include "engine/checkpoint/h5_file.h"
#include "engine/checkpoint/weights_fingerprint.h"
#include "engine/core/rng.h"
#include "engine/core/atomic_file.h"
#include "engine/core/status.h"
#include "engine/hf/hf_config.h"
#include "engine/hf/hf_weights.h"
#include "engine/hf/spec_loading.h"
#include "engine/model/registry.h"

namespace zt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kPeftPrefix = "base_model.model.";  // PEFT's names: the wrapper, then the model's
constexpr const char* kAdapterStem = "adapter_model";
constexpr const char* kAdapterConfig = "adapter_config.json";

// A checkpoint of adapters: its training state, run spec and file.
struct LoraCheckpoint {
  TrainState st;
  RunSpec spec;
  std::string h5;
};

LoraCheckpoint open_lora(const std::string& ckpt_dir) {
  LoraCheckpoint c;
  c.st = read_train_state(ckpt_dir);
  c.spec = parse_run_spec(c.st.spec_toml, ckpt_dir + " (its run spec)");
  if (c.st.lora_base.empty())
    user_error("export: {} holds a whole model, not low-rank adapters: --format hf exports it", ckpt_dir);
  c.h5 = (fs::path(ckpt_dir) / "checkpoint.h5").string();
  return c;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "model.layers.0.self_attn.q_proj" of "model.layers.0.self_attn.q_proj.lora_A.weight" ("" if neither factor)
std::string module_of(const std::string& name) {
  for (const char* f : {".lora_A.weight", ".lora_B.weight"})
    if (ends_with(name, f)) return name.substr(0, name.size() - std::string(f).size());
  return "";
}

// The module's path inside its block ("self_attn.q_proj"): what follows the layer index. PEFT's
// target_modules match a module whose name ends with it.
std::string in_block(const std::string& module) {
  size_t at = 0;
  while (at < module.size()) {
    const size_t dot = module.find('.', at);
    const std::string part = module.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
    if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit))
      return dot == std::string::npos ? "" : module.substr(dot + 1);
    if (dot == std::string::npos) break;
    at = dot + 1;
  }
  return module;
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) user_error("{}: cannot open", path);
  json j = json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object()) user_error("{}: not a JSON object", path);
  return j;
}

// The base a merge reads must be the one the adapters were trained on: its fingerprint (over its
// values as our layout holds them) equal to the checkpoint's. `w` null: the seed's weights.
void check_merge_base(const LoraCheckpoint& c, const ParamTable& table, const SafetensorsDir* w,
                      const std::string& base, const std::string& ckpt_dir) {
  FingerprintSums sums;
  std::vector<float> buf;
  const std::string& arch = c.spec.model.arch;
  for (const ParamInfo& p : table.params()) {
    const uint64_t name = name_hash(p.name);
    const HfName hf = hf_name(arch, p.name);
    const size_t n = p.stored_numel, cols = p.stored_shape.size() > 1 ? size_t(p.stored_shape[1]) : 1;
    if (w && hf.transposed) {  // GPT-2's Conv1D, Hugging Face's (in, out): whole (at most d_ff x d_model)
      std::vector<float> t(n);
      w->read(*find_tensor(*w, hf.name), 0, n, t.data());
      const size_t rows = size_t(p.stored_shape[0]);
      for (size_t g = 0; g < n; ++g)
        if (FingerprintSums::sampled(g)) sums.add(name, g, t[(g % cols) * rows + g / cols]);
      continue;
    }
    constexpr size_t kBlock = size_t(1) << 22;  // our (out, in) layout, a block at a time
    for (size_t off = 0; off < n; off += kBlock) {
      const size_t k = std::min(kBlock, n - off);
      buf.resize(k);
      if (w) w->read(*find_tensor(*w, hf.name), off, k, buf.data());  // a prefix of rows keeps the indices
      else table.init_range(uint64_t(c.spec.run.seed), p.offset + off, p.offset + off + k, buf.data());
      for (size_t i = 0; i < k; ++i)
        if (FingerprintSums::sampled(off + i)) sums.add(name, off + i, buf[i]);
    }
  }
  if (sums.value() != c.st.lora_base_fingerprint)
    user_error("export: the base {} is not the one {}'s adapters were trained on ({}, fingerprint {:016x}; this one's "
               "{:016x}): give that base with --base DIR", base, ckpt_dir, c.st.lora_base, c.st.lora_base_fingerprint,
               sums.value());
}

}  // namespace

std::string export_peft(const std::string& ckpt_dir, const std::string& out_dir, DType dtype) {
  const LoraCheckpoint c = open_lora(ckpt_dir);
  const H5File f(c.h5, H5File::Mode::Read);
  const ModelFamily& family = model_family(c.spec.model.arch);
  std::vector<TensorSource> tensors;
  std::vector<std::string> targets;
  bool transposed = false;
  for (const std::string& name : f.children("/params")) {
    const std::string ds = "/params/" + name, module = module_of(name);
    if (module.empty()) user_error("export: {}: {} is not an adapter's tensor", c.h5, name);
    tensors.push_back({kPeftPrefix + name, f.shape(ds), checkpoint_reader(f, ds)});
    if (std::find(targets.begin(), targets.end(), in_block(module)) == targets.end())
      targets.push_back(in_block(module));
    transposed |= family.hf_transposed(module + ".weight");  // GPT-2's Conv1D: PEFT's fan_in_fan_out
  }
  const RunSpec::Lora& l = c.spec.lora;
  const bool seeded = c.st.lora_base.rfind("seed ", 0) == 0;
  const json config = {
      {"peft_type", "LORA"}, {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", seeded ? json(nullptr) : json(c.st.lora_base)},
      {"r", l.rank}, {"lora_alpha", l.alpha}, {"lora_dropout", l.dropout}, {"target_modules", targets},
      {"fan_in_fan_out", transposed}, {"bias", "none"}, {"modules_to_save", nullptr},
      {"init_lora_weights", l.init == LoraInit::Gaussian ? json("gaussian") : json(true)},
      {"use_rslora", false}, {"use_dora", false}, {"inference_mode", true}, {"layers_to_transform", nullptr},
      {"layers_pattern", nullptr}, {"rank_pattern", json::object()}, {"alpha_pattern", json::object()},
      {"revision", nullptr}};
  const uint64_t bytes = export_into(
      out_dir, [](const std::string& n) { return weights_file_name(n, kAdapterStem) || n == kAdapterConfig; },
      [&](const std::string& building) {
        std::vector<std::string> files = write_safetensors(building, tensors, dtype, UINT64_MAX, kAdapterStem);
        write_file_atomic((fs::path(building) / kAdapterConfig).string(), config.dump(2) + "\n", /*durable=*/true);
        return files;
      });
  return fmt::format("{}: {} adapter tensors of {} (rank {}, alpha {:g}, on {}; step {}) as {} in "
                     "adapter_model.safetensors ({:.2f} MiB) with adapter_config.json, as PEFT writes them; base: {}",
                     out_dir, tensors.size(), c.spec.model.arch, l.rank, l.alpha, fmt::join(targets, ", "), c.st.step,
                     safetensors_dtype_name(dtype), double(bytes) / 1048576.0, c.st.lora_base);
}

std::string export_merged(const std::string& ckpt_dir, const std::string& out_dir, DType dtype, uint64_t max_file_bytes,
                          const std::string& base_dir) {
  const LoraCheckpoint c = open_lora(ckpt_dir);
  const H5File f(c.h5, H5File::Mode::Read);
  const std::string& arch = c.spec.model.arch;
  const bool seeded = base_dir.empty() && c.st.lora_base.rfind("seed ", 0) == 0;
  const std::string base = base_dir.empty() ? c.st.lora_base : base_dir;
  // The base model's tensors, by the model's own table (one rank: global = local shapes)
  std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  const std::unique_ptr<Model> model = make_model(c.spec.model, *cpu, 1, nullptr);
  const ParamTable& table = model->table();
  std::unique_ptr<SafetensorsDir> w;
  if (!seeded) {
    const std::string mismatch = hf_mismatch(base, arch, *model);
    if (!mismatch.empty()) user_error("export: the base {} does not fit {}'s model: {}", base, ckpt_dir, mismatch);
    w = std::make_unique<SafetensorsDir>(base);
  }
  check_merge_base(c, table, w.get(), base, ckpt_dir);
  // every adapter, whole (r x in and out x r: small), by its module
  struct Adapter {
    std::vector<float> A, B;
    int64_t in = 0, out = 0;
  };
  std::map<std::string, Adapter> adapters;
  const int64_t r = c.spec.lora.rank;
  for (const std::string& name : f.children("/params")) {
    Adapter& a = adapters[module_of(name)];
    const std::vector<int64_t> shape = f.shape("/params/" + name);
    std::vector<float>& v = ends_with(name, ".lora_A.weight") ? a.A : a.B;
    v.resize(size_t(shape[0] * shape[1]));
    f.read_block("/params/" + name, {0, 0}, {shape[0], shape[1]}, v.data());
    if (&v == &a.A) a.in = shape[1];
    else a.out = shape[0];
  }
  const float s = float(c.spec.lora.alpha / double(r));
  std::vector<TensorSource> tensors;
  size_t merged = 0;
  for (const ParamInfo& p : table.params()) {
    const HfName hf = hf_name(arch, p.name);
    TensorSource t;
    t.name = hf.name;
    t.shape = p.stored_shape;
    if (hf.transposed) std::swap(t.shape[0], t.shape[1]);
    const auto it = ends_with(p.name, ".weight") ? adapters.find(p.name.substr(0, p.name.size() - 7)) : adapters.end();
    const Adapter* a = it == adapters.end() ? nullptr : &it->second;
    merged += a != nullptr;
    const uint64_t seed = uint64_t(c.spec.run.seed);
    t.read = [&, p, hf, a, seed](uint64_t first, uint64_t n, float* out) {
      const int64_t rows = p.stored_shape[0], cols = p.stored_shape.size() > 1 ? p.stored_shape[1] : 1;
      if (w) {  // the base's file, in Hugging Face's layout (what is written)
        w->read(*find_tensor(*w, hf.name), first, n, out);
      } else {  // the seed's values, in ours: transposed ones whole
        std::vector<float> ours(hf.transposed ? size_t(p.stored_numel) : size_t(n));
        if (hf.transposed) {
          table.init_range(seed, p.offset, p.offset + p.stored_numel, ours.data());
          for (uint64_t k = 0; k < n; ++k) {
            const uint64_t e = first + k, i = e / uint64_t(rows), o = e % uint64_t(rows);
            out[k] = ours[size_t(o * uint64_t(cols) + i)];
          }
        } else {
          table.init_range(seed, p.offset + first, p.offset + first + n, out);
        }
      }
      if (!a) return;
      for (uint64_t k = 0; k < n; ++k) {  // + s (B A)[o, i]
        const uint64_t e = first + k;
        const uint64_t o = hf.transposed ? e % uint64_t(rows) : e / uint64_t(cols);
        const uint64_t i = hf.transposed ? e / uint64_t(rows) : e % uint64_t(cols);
        double d = 0;
        for (int64_t j = 0; j < r; ++j) d += double(a->B[size_t(o * uint64_t(r) + uint64_t(j))]) *
                                             double(a->A[size_t(uint64_t(j) * uint64_t(a->in) + i)]);
        out[k] += float(s * d);
      }
    };
    tensors.push_back(std::move(t));
  }
  if (merged != adapters.size())
    user_error("export: {} holds adapters of {} layers, but only {} of them are layers of its model", ckpt_dir,
               adapters.size(), merged);
  const HfWritten files = export_hf_model(out_dir, tensors, c.spec.model, dtype, max_file_bytes);
  return fmt::format("{}: {} tensors of {} (step {}): the base ({}) with the adapters of {} layers merged (W + {:g} B A), "
                     "as {} in {} file{} ({:.1f} MiB) with config.json", out_dir, tensors.size(), arch, c.st.step,
                     seeded ? c.st.lora_base : base, merged, s, safetensors_dtype_name(dtype), files.files,
                     files.files == 1 ? "" : "s", double(files.bytes) / 1048576.0);
}

namespace {

// adapter_config.json against [lora]: maths ztrain implements, the same rank and alpha
std::string peft_config_mismatch(const json& cfg, const std::string& at, const RunSpec::Lora& l) {
  if (cfg.value("peft_type", "") != "LORA") return fmt::format("{}: peft_type is not \"LORA\"", at);
  if (!cfg.contains("r") || !cfg["r"].is_number_integer() || cfg["r"].get<int64_t>() != l.rank)
    return fmt::format("{}: r = {}, but [lora] rank = {}", at, cfg.value("r", json(nullptr)).dump(), l.rank);
  if (!cfg.contains("lora_alpha") || !cfg["lora_alpha"].is_number() || cfg["lora_alpha"].get<double>() != l.alpha)
    return fmt::format("{}: lora_alpha = {}, but [lora] alpha = {:g}", at, cfg.value("lora_alpha", json(nullptr)).dump(),
                       l.alpha);
  for (const char* k : {"use_dora", "use_rslora"})  // other maths than B A x alpha / r
    if (cfg.contains(k) && !cfg[k].is_null() && cfg[k].get<bool>())
      return fmt::format("{}: {} = true, which ztrain does not implement", at, k);
  if (cfg.contains("rank_pattern") && !cfg["rank_pattern"].is_null() && !cfg["rank_pattern"].empty())
    return fmt::format("{}: rank_pattern gives some layers another rank, which ztrain does not implement", at);
  if (cfg.contains("alpha_pattern") && !cfg["alpha_pattern"].is_null() && !cfg["alpha_pattern"].empty())
    return fmt::format("{}: alpha_pattern gives some layers another alpha, which ztrain does not implement", at);
  return "";
}

// adapter_model.safetensors: exactly this run's adapters, in their shapes
std::string peft_tensors_mismatch(const std::string& dir, const RunSpec::Lora& l, const ParamTable& adapters) {
  const SafetensorsDir w(dir, kAdapterStem);
  std::vector<std::string> seen;
  for (const ParamInfo& p : adapters.params()) {
    const SafeTensor* t = w.find(kPeftPrefix + p.name);
    if (!t) return fmt::format("{}: no tensor {}{} ([lora] targets = \"{}\")", dir, kPeftPrefix, p.name, l.targets);
    if (t->shape != p.stored_shape)
      return fmt::format("{}: tensor {} has shape ({}), this run's is ({})", t->file, t->name, fmt::join(t->shape, ", "),
                         fmt::join(p.stored_shape, ", "));
    seen.push_back(t->name);
  }
  for (const auto& [name, t] : w.tensors())
    if (std::find(seen.begin(), seen.end(), name) == seen.end())
      return fmt::format("{}: tensor {} is not an adapter of this run ([lora] targets = \"{}\")", t.file, name,
                         l.targets);
  return "";
}

}  // namespace

std::string peft_mismatch(const std::string& dir, const RunSpec::Lora& l, const ParamTable& adapters) {
  const std::string at = (fs::path(dir) / kAdapterConfig).string();
  std::string why;
  try {
    why = peft_config_mismatch(read_json(at), at, l);
  } catch (const json::exception& e) {  // a field of another type than PEFT writes
    return fmt::format("{}: {}", at, e.what());
  }
  return why.empty() ? peft_tensors_mismatch(dir, l, adapters) : why;
}

void load_peft_adapters(const std::string& dir, ModelStates& store, const ParamTable& adapters) {
  const SafetensorsDir w(dir, kAdapterStem);
  std::vector<float> buf;
  for (const auto& run : store.global_runs()) {
    const ParamInfo& p = adapters.params()[size_t(run.param)];
    const SafeTensor* t = w.find(kPeftPrefix + p.name);
    ZT_CHECK(t != nullptr, "{}: {} vanished after the check", dir, p.name);
    buf.resize(run.n);
    w.read(*t, run.global_begin, run.n, buf.data());
    for (float v : buf)
      if (!std::isfinite(v)) user_error("{}: tensor {} holds a non-finite value", t->file, t->name);
    store.write_run(ModelStates::State::Master, run, 0, run.n, buf.data());
  }
}

}  // namespace zt
