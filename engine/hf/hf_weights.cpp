// Hugging Face weights in and out (see hf_weights.h).
#include "engine/hf/hf_weights.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_files.h"
#include "engine/checkpoint/h5_file.h"
#include "engine/hf/spec_loading.h"
#include "engine/core/atomic_file.h"
#include "engine/core/status.h"
#include "engine/hf/hf_config.h"
#include "engine/hf/safetensors.h"
#include "engine/model/registry.h"

namespace zt {

namespace fs = std::filesystem;

namespace {
std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", s[i]);
  return out + ")";
}

// Tensors Hugging Face files may hold that are not parameters (buffers older transformers saved),
// and the tied head some writers store although it is the embedding.
bool ignorable(const std::string& name, bool tied) {
  auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends(".attn.bias") || ends(".attn.masked_bias") || ends("rotary_emb.inv_freq") ||
         (tied && name == "lm_head.weight");
}


// The directory an export replaces: --out itself through any symlink (the swap replaces what the
// link points to). UserError for what cannot be swapped whole: the root, a mount point, a
// directory whose parent is read-only, or a run's or a checkpoint's directory (the swap would
// take their files away).
std::string swappable_dir(const std::string& given) {
  std::error_code ec;
  const fs::path out = fs::weakly_canonical(fs::absolute(given), ec);
  if (ec || out == out.root_path())
    user_error("export: --out {}: not a directory an export can replace{}", given, ec ? ": " + ec.message() : "");
  if (out == fs::weakly_canonical(fs::current_path(), ec))
    user_error("export: --out {}: the current directory, which the new export would replace under you: run the "
               "export from outside it", given);
  if (fs::is_directory(out, ec))
    for (const auto& e : fs::directory_iterator(out)) {
      const std::string n = e.path().filename().string();
      if (n == ".lock" || n == ".checkpoint.lock" || n == "checkpoint.h5" || n == "metrics.jsonl" || n == "latest" ||
          n.rfind("step_", 0) == 0)
        user_error("export: --out {}: holds {}, a file of a run or a checkpoint, which the export would replace; give "
                   "the export a directory of its own", given, n);
    }
  const fs::path parent = out.parent_path();
  struct stat here {}, above {};
  if (::stat(out.c_str(), &here) == 0 && ::stat(parent.c_str(), &above) == 0 && here.st_dev != above.st_dev)
    user_error("export: --out {}: a mount point, which cannot be swapped for the new export (built beside it): give a "
               "directory inside it", given);
  if (::access(parent.c_str(), W_OK) != 0)
    user_error("export: --out {}: the export is built beside it, in {}, which is not writable: {}", given,
               parent.string(), std::strerror(errno));
  return out.string();
}

}  // namespace

const SafeTensor* find_tensor(const SafetensorsDir& w, const std::string& name) {
  if (const SafeTensor* t = w.find(name)) return t;
  const std::string prefix = "transformer.";
  return name.compare(0, prefix.size(), prefix) == 0 ? w.find(name.substr(prefix.size())) : nullptr;
}

std::function<void(uint64_t, uint64_t, float*)> checkpoint_reader(const H5File& f, const std::string& ds) {
  const std::vector<int64_t> shape = f.shape(ds);
  const int64_t cols = shape.size() == 2 ? shape[1] : 1;
  return [&f, ds, shape, cols](uint64_t first, uint64_t n, float* out) {  // the rows covering [first, first + n)
    if (shape.size() == 1) {
      f.read_block(ds, {int64_t(first)}, {int64_t(n)}, out);
      return;
    }
    const int64_t r0 = int64_t(first) / cols, r1 = (int64_t(first + n) + cols - 1) / cols;
    std::vector<float> rows(size_t((r1 - r0) * cols));
    f.read_block(ds, {r0, 0}, {r1 - r0, cols}, rows.data());
    std::copy_n(rows.begin() + (int64_t(first) - r0 * cols), n, out);
  };
}

uint64_t export_into(const std::string& out_dir, const std::function<bool(const std::string& name)>& replaced,
                     const std::function<std::vector<std::string>(const std::string& building)>& write) {
  // Built beside out_dir and swapped in whole: any failure (a full disk) leaves the previous
  // export as it was. What else the user keeps there (a tokenizer, a README) comes along.
  const std::string out = swappable_dir(out_dir);
  const std::string building = fmt::format("{}.building-{}", out, ::getpid());
  struct Discard {  // the unfinished build, on any exit but success
    std::string path;
    ~Discard() {
      std::error_code ec;
      if (!path.empty()) fs::remove_all(path, ec);
    }
  } discard{building};
  fs::remove_all(building);
  fs::create_directories(building);
  if (fs::is_directory(out))
    for (const auto& e : fs::directory_iterator(out)) {
      const std::string n = e.path().filename().string();
      if (replaced(n)) continue;
      std::error_code ec;
      if (e.is_regular_file(ec) && !e.is_symlink(ec)) fs::create_hard_link(e.path(), fs::path(building) / n, ec);
      else ec = std::make_error_code(std::errc::not_supported);
      if (ec) fs::copy(e.path(), fs::path(building) / n, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    }
  const std::vector<std::string> files = write(building);
  uint64_t bytes = 0;
  for (const auto& p : files) bytes += fs::file_size(p), fsync_path(p);
  fsync_path(building);
  replace_dir_atomic(building, out);
  discard.path.clear();
  return bytes;
}

HfWritten export_hf_model(const std::string& out_dir, const std::vector<TensorSource>& tensors, const RunSpec::Model& m,
                          DType dtype, uint64_t max_file_bytes) {
  const std::string config = hf_config_json(m, dtype);
  HfWritten out;
  out.bytes = export_into(
      out_dir, [](const std::string& n) { return weights_file_name(n) || n == "config.json"; },
      [&](const std::string& building) {
        const std::vector<std::string> files = write_safetensors(building, tensors, dtype, max_file_bytes);
        write_file_atomic((fs::path(building) / "config.json").string(), config, /*durable=*/true);
        out.files = files.size();
        return files;
      });
  return out;
}

std::string export_hf(const std::string& ckpt_dir, const std::string& out_dir, DType dtype, uint64_t max_file_bytes) {
  const TrainState st = read_train_state(ckpt_dir);
  const RunSpec spec = parse_run_spec(st.spec_toml, ckpt_dir + " (its run spec)");
  const std::string& arch = spec.model.arch;
  const std::string h5 = (fs::path(ckpt_dir) / "checkpoint.h5").string();
  const H5File f(h5, H5File::Mode::Read);
  std::vector<TensorSource> tensors;
  // in the order the model holds them (the checkpoint lists them alphabetically)
  std::vector<std::string> names = f.children("/params");
  for (const std::string& name : names) {
    const std::string ds = "/params/" + name;
    const std::vector<int64_t> shape = f.shape(ds);
    const HfName hf = hf_name(arch, name);
    TensorSource t;
    t.name = hf.name;
    t.shape = hf.transposed ? std::vector<int64_t>{shape[1], shape[0]} : shape;
    if (hf.transposed) {  // GPT-2's Conv1D: (in, out); read whole (at most d_ff x d_model)
      t.read = [&f, ds, shape](uint64_t first, uint64_t n, float* out) {
        std::vector<float> whole(size_t(shape[0] * shape[1]));
        f.read_block(ds, {0, 0}, {shape[0], shape[1]}, whole.data());
        for (uint64_t k = 0; k < n; ++k) {
          const uint64_t e = first + k, i = e / uint64_t(shape[0]), o = e % uint64_t(shape[0]);
          out[k] = whole[size_t(o * uint64_t(shape[1]) + i)];
        }
      };
    } else {
      t.read = checkpoint_reader(f, ds);
    }
    tensors.push_back(std::move(t));
  }
  if (!st.lora_base.empty())
    user_error("export: {} holds low-rank adapters (trained on the frozen weights of {}): --format peft writes them "
               "as PEFT reads them, --format hf --merge-lora the model with them merged", ckpt_dir, st.lora_base);
  const HfWritten files = export_hf_model(out_dir, tensors, spec.model, dtype, max_file_bytes);
  const std::string config = hf_config_json(spec.model, dtype);
  const uint64_t bytes = files.bytes;
  // the class the family's published files name: the spelling config.json follows (docs/models.md)
  const std::string hf_class = nlohmann::json::parse(config).value("architectures", nlohmann::json::array({""}))[0];
  return fmt::format("{}: {} tensors of {} (step {}) as {} in {} file{} ({:.1f} MiB) with config.json as {}'s "
                     "published files spell it", out_dir, tensors.size(), arch, st.step,
                     safetensors_dtype_name(dtype), files.files, files.files == 1 ? "" : "s",
                     double(bytes) / 1048576.0, hf_class);
}

std::string hf_mismatch(const std::string& dir, const std::string& arch, const Model& model) {
  const SafetensorsDir w(dir);
  const bool tied = !std::any_of(model.params().begin(), model.params().end(),
                                 [](const ParamInfo& p) { return p.name == "lm_head.weight"; });
  if (tied) {  // a head the file says is its own would be dropped for the embedding: refused
    std::ifstream f(fs::path(dir) / "config.json");
    const auto cfg = nlohmann::json::parse(f, nullptr, false);
    if (!cfg.is_discarded() && cfg.is_object() && cfg.contains("tie_word_embeddings") &&
        cfg["tie_word_embeddings"].is_boolean() && !cfg["tie_word_embeddings"].get<bool>() && w.find("lm_head.weight"))
      return fmt::format("{}/config.json: tie_word_embeddings = false with its own lm_head.weight, but this {} model "
                         "ties its head to the embedding: an untied head is not supported", dir, arch);
  }
  std::vector<std::string> seen;
  for (const ParamInfo& p : model.params()) {
    const HfName hf = hf_name(arch, p.name);
    const SafeTensor* t = find_tensor(w, hf.name);
    if (!t) return fmt::format("{}: no tensor {} (this model has it, shape {})", dir, hf.name, shape_str(p.stored_shape));
    std::vector<int64_t> want = p.stored_shape;
    if (hf.transposed) std::swap(want[0], want[1]);
    const bool prefix_ok = model_family(arch).hf_row_prefix(p.name) && t->shape.size() == 2 && t->shape[0] >= want[0] &&
                           t->shape[1] == want[1];
    if (t->shape != want && !prefix_ok)
      return fmt::format("{}: tensor {} has shape {}, this model's is {}", t->file, hf.name, shape_str(t->shape),
                         shape_str(want));
    seen.push_back(t->name);
  }
  for (const auto& [name, t] : w.tensors())
    if (std::find(seen.begin(), seen.end(), name) == seen.end() && !ignorable(name, tied))
      return fmt::format("{}: tensor {} is not in this model", t.file, name);
  return "";
}

void load_hf_weights(const std::string& dir, const std::string& arch, ModelStates& store, const Model& model) {
  const SafetensorsDir w(dir);
  std::vector<float> buf, whole;
  int whole_of = -1;  // the parameter `whole` holds (transposed tensors are read whole once)
  for (const auto& run : store.global_runs()) {
    const ParamInfo& p = model.params()[size_t(run.param)];
    if (run.global_begin >= p.stored_numel) continue;  // padding rows stay zero
    const size_t n = std::min(run.n, p.stored_numel - run.global_begin);
    const HfName hf = hf_name(arch, p.name);
    const SafeTensor* t = find_tensor(w, hf.name);
    ZT_CHECK(t != nullptr, "{}: {} vanished after the check", dir, hf.name);
    buf.resize(n);
    if (!hf.transposed) {
      w.read(*t, run.global_begin, n, buf.data());  // row-major: a prefix of rows keeps indices
    } else {
      if (whole_of != run.param) {
        whole.resize(size_t(t->numel()));
        w.read(*t, 0, t->numel(), whole.data());
        whole_of = run.param;
      }
      const size_t out = size_t(p.stored_shape[0]), in = size_t(p.stored_shape[1]);  // ours: (out, in)
      for (size_t k = 0; k < n; ++k) {
        const size_t g = run.global_begin + k, o = g / in, i = g % in;
        buf[k] = whole[i * out + o];
      }
    }
    for (float v : buf)
      if (!std::isfinite(v)) user_error("{}: tensor {} holds a non-finite value", t->file, hf.name);
    store.write_run(ModelStates::State::Master, run, 0, n, buf.data());
  }
}

}  // namespace zt
