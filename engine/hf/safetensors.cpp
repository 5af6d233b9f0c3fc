// safetensors reading and writing (see safetensors.h).
#include "engine/hf/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/core/atomic_file.h"
#include "engine/core/status.h"
#include "engine/core/user_path.h"

namespace zt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
constexpr uint64_t kMaxHeader = uint64_t(100) << 20;  // as Hugging Face's reader: 100 MB
constexpr uint64_t kBlock = uint64_t(16) << 20;       // elements converted per block

bool dtype_of(const std::string& s, DType* out) {
  if (s == "F32") *out = DType::F32;
  else if (s == "BF16") *out = DType::BF16;
  else if (s == "F16") *out = DType::F16;
  else return false;
  return true;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}
}  // namespace

uint64_t SafeTensor::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= uint64_t(d);
  return n;
}

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
  }
  return "?";
}

std::vector<SafeTensor> parse_safetensors_header(const std::string& header, uint64_t data_size,
                                                 const std::string& file) {
  json h;
  try {
    h = json::parse(header);
  } catch (const json::exception& e) {
    user_error("{}: the safetensors header is not JSON ({})", file, e.what());
  }
  if (!h.is_object()) user_error("{}: the safetensors header is not a JSON object", file);
  std::vector<SafeTensor> out;
  for (const auto& [name, v] : h.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) user_error("{}: __metadata__ is not an object", file);
      for (const auto& [k, m] : v.items())
        if (!m.is_string()) user_error("{}: __metadata__ value {} is not a string", file, k);
      continue;
    }
    if (!v.is_object()) user_error("{}: tensor {}: not an object", file, name);
    SafeTensor t;
    t.name = name;
    t.file = file;
    const auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) user_error("{}: tensor {}: no dtype", file, name);
    if (!dtype_of(dt->get<std::string>(), &t.dtype))
      user_error("{}: tensor {}: dtype {} is not supported (F32, BF16, F16)", file, name, dt->get<std::string>());
    const auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array() || sh->size() > 8) user_error("{}: tensor {}: no shape (an array)", file, name);
    long double elems = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 40))
        user_error("{}: tensor {}: shape {} is not a list of sizes", file, name, sh->dump());
      t.shape.push_back(int64_t(d.get<uint64_t>()));
      elems *= (long double)(d.get<uint64_t>());
    }
    const auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      user_error("{}: tensor {}: data_offsets is not [begin, end]", file, name);
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    if (t.begin > t.end || t.end > data_size)
      user_error("{}: tensor {}: data_offsets [{}, {}] outside the {} data bytes", file, name, t.begin, t.end, data_size);
    if (elems * (long double)(dtype_size(t.dtype)) != (long double)(t.end - t.begin))
      user_error("{}: tensor {}: {} bytes for shape {} of {} ({} bytes expected)", file, name, t.end - t.begin,
                 sh->dump(), dt->get<std::string>(), double(elems) * double(dtype_size(t.dtype)));
    out.push_back(std::move(t));
  }
  // No two tensors may share bytes (a crafted file could alias them).
  std::vector<const SafeTensor*> by_offset;
  for (const auto& t : out)
    if (t.begin < t.end) by_offset.push_back(&t);  // empty tensors hold no bytes
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->begin < by_offset[i - 1]->end)
      user_error("{}: tensors {} and {} overlap", file, by_offset[i - 1]->name, by_offset[i]->name);
  return out;
}

std::vector<SafeTensor> parse_safetensors_bytes(const uint8_t* data, size_t size, const std::string& file) {
  if (size < 8) user_error("{}: {} bytes is too short for a safetensors file", file, size);
  const uint64_t n = read_u64_le(data);
  if (n > kMaxHeader || n > size - 8)
    user_error("{}: header length {} exceeds the file ({} bytes) or 100 MB", file, n, size);
  auto out = parse_safetensors_header(std::string(reinterpret_cast<const char*>(data) + 8, size_t(n)), size - 8 - n,
                                      file);
  for (auto& t : out) t.data_start = 8 + n;
  return out;
}

SafetensorsDir::SafetensorsDir(const std::string& dir, const std::string& stem) : dir_(dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::is_directory(d, ec)) user_error("{}: not a directory (expected a Hugging Face model directory)", dir);
  const fs::path single = d / (stem + ".safetensors"), index = d / (stem + ".safetensors.index.json");
  auto present = [&](const fs::path& p) { return fs::symlink_status(p, ec).type() != fs::file_type::not_found; };
  if (present(index)) {
    check_input_file(index.string(), "");
    std::ifstream f(index);
    json j;
    try {
      j = json::parse(f);
    } catch (const json::exception& e) {
      user_error("{}: not JSON ({})", index.string(), e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      user_error("{}: no weight_map object", index.string());
    std::vector<std::string> files;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
        user_error("{}: weight_map[{}] is not a file name in the directory", index.string(), name);
      if (std::find(files.begin(), files.end(), file.get<std::string>()) == files.end())
        files.push_back(file.get<std::string>());
    }
    for (const auto& f2 : files) add_file((d / f2).string());
    for (const auto& [name, file] : j["weight_map"].items()) {
      const SafeTensor* t = find(name);
      if (!t || fs::path(t->file).filename() != file.get<std::string>())
        user_error("{}: tensor {} is not in {}", index.string(), name, file.get<std::string>());
    }
  } else if (present(single)) {
    add_file(single.string());
  } else {
    user_error("{}: no {}.safetensors or {}.safetensors.index.json", dir, stem, stem);
  }
}

void SafetensorsDir::add_file(const std::string& path) {
  check_input_file(path, "");  // a symlink loop or /dev/zero is named, not read for ever
  std::ifstream f(path, std::ios::binary);
  if (!f) user_error("{}: cannot open", path);
  uint8_t len[8];
  if (!f.read(reinterpret_cast<char*>(len), 8)) user_error("{}: too short for a safetensors file", path);
  const uint64_t n = read_u64_le(len);
  const uint64_t size = fs::file_size(path);
  if (n > kMaxHeader || n > size - 8)
    user_error("{}: header length {} exceeds the file ({} bytes) or 100 MB", path, n, size);
  std::string header(size_t(n), '\0');
  if (!f.read(header.data(), std::streamsize(n))) user_error("{}: cannot read its header", path);
  for (SafeTensor& t : parse_safetensors_header(header, size - 8 - n, path)) {
    t.data_start = 8 + n;
    if (tensors_.count(t.name)) user_error("{}: tensor {} is also in {}", path, t.name, tensors_[t.name].file);
    tensors_[t.name] = std::move(t);
  }
}

const SafeTensor* SafetensorsDir::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void SafetensorsDir::read(const SafeTensor& t, uint64_t first, uint64_t n, float* out) const {
  ZT_CHECK(first + n <= t.numel(), "{}: read [{}, {}) beyond {} elements", t.name, first, first + n, t.numel());
  std::ifstream f(t.file, std::ios::binary);
  if (!f) user_error("{}: cannot open", t.file);
  const size_t es = dtype_size(t.dtype);
  std::vector<char> raw;
  for (uint64_t done = 0; done < n;) {
    const uint64_t k = std::min(kBlock, n - done);
    raw.resize(size_t(k * es));
    f.seekg(std::streamoff(t.data_start + t.begin + (first + done) * es));
    if (!f.read(raw.data(), std::streamsize(raw.size())))
      user_error("{}: tensor {}: cannot read its bytes (the file is shorter than its header says)", t.file, t.name);
    convert_host(out + done, DType::F32, raw.data(), t.dtype, int64_t(k));
    done += k;
  }
}

bool weights_file_name(const std::string& n, const std::string& stem) {
  return n == stem + ".safetensors" || n == stem + ".safetensors.index.json" ||
         (n.rfind(stem + "-", 0) == 0 && n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0);
}

std::vector<std::string> write_safetensors(const std::string& dir, const std::vector<TensorSource>& tensors,
                                           DType dtype, uint64_t max_file_bytes, const std::string& stem) {
  fs::create_directories(dir);
  // A previous export's weights must not survive beside these (a loader would take the old index
  // or the old single file): they go first.
  for (const auto& e : fs::directory_iterator(dir)) {
    if (weights_file_name(e.path().filename().string(), stem)) fs::remove(e.path());
  }
  const size_t es = dtype_size(dtype);
  auto bytes_of = [&](const TensorSource& t) {
    uint64_t n = es;
    for (int64_t d : t.shape) n *= uint64_t(d);
    return n;
  };
  // Files: tensors in order, a new file when the next tensor would pass the limit.
  std::vector<std::vector<size_t>> files(1);
  uint64_t in_file = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t b = bytes_of(tensors[i]);
    if (!files.back().empty() && in_file + b > max_file_bytes) {
      files.emplace_back();
      in_file = 0;
    }
    files.back().push_back(i);
    in_file += b;
  }
  const size_t nf = files.size();
  std::vector<std::string> names;
  json weight_map = json::object();
  uint64_t total = 0;
  for (size_t fi = 0; fi < nf; ++fi) {
    const std::string name =
        nf == 1 ? stem + ".safetensors" : fmt::format("{}-{:05d}-of-{:05d}.safetensors", stem, fi + 1, nf);
    json h = json::object();
    h["__metadata__"] = {{"format", "pt"}};
    uint64_t off = 0;
    for (size_t i : files[fi]) {
      const uint64_t b = bytes_of(tensors[i]);
      h[tensors[i].name] = {{"dtype", safetensors_dtype_name(dtype)}, {"shape", tensors[i].shape},
                            {"data_offsets", {off, off + b}}};
      weight_map[tensors[i].name] = name;
      off += b;
    }
    total += off;
    std::string header = h.dump();
    header.append((8 - header.size() % 8) % 8, ' ');  // the data section 8-byte aligned, as HF writes
    const std::string path = (fs::path(dir) / name).string(), tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) throw RuntimeFailure(fmt::format("{}: cannot create ({})", tmp, std::strerror(errno)));
    bool ok = true;
    uint8_t len[8];
    for (int k = 0; k < 8; ++k) len[k] = uint8_t(uint64_t(header.size()) >> (8 * k));
    ok &= std::fwrite(len, 1, 8, f) == 8;
    ok &= std::fwrite(header.data(), 1, header.size(), f) == header.size();
    std::vector<float> block;
    std::vector<char> raw;
    for (size_t i : files[fi]) {
      const uint64_t n = bytes_of(tensors[i]) / es;
      for (uint64_t done = 0; done < n && ok;) {
        const uint64_t k = std::min(kBlock, n - done);
        block.resize(size_t(k));
        tensors[i].read(done, k, block.data());
        raw.resize(size_t(k * es));
        convert_host(raw.data(), dtype, block.data(), DType::F32, int64_t(k));
        ok &= std::fwrite(raw.data(), 1, raw.size(), f) == raw.size();
        done += k;
      }
    }
    ok &= std::fclose(f) == 0;
    if (!ok) {
      const int err = errno;
      fs::remove(tmp);
      throw RuntimeFailure(fmt::format("{}: write failed ({})", tmp, std::strerror(err)));
    }
    fs::rename(tmp, path);
    names.push_back(path);
  }
  if (nf > 1) {
    const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file_atomic((fs::path(dir) / (stem + ".safetensors.index.json")).string(), index.dump(2) + "\n");
    names.push_back((fs::path(dir) / (stem + ".safetensors.index.json")).string());
  }
  return names;
}

}  // namespace zt
