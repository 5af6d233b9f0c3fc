// TensorBoard event files (see tensorboard.h).
#include "engine/observe/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "engine/core/atomic_file.h"
#include "engine/core/status.h"

namespace zt {

namespace {

const std::array<uint32_t, 256>& crc32c_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (c & 1 ? 0x82F63B78u : 0u);  // Castagnoli, reflected
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// ---- protobuf wire format: the few field kinds an Event uses
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}
void key(std::string& out, int field, int wire) { varint(out, uint64_t(field) << 3 | uint64_t(wire)); }
void bytes_field(std::string& out, int field, std::string_view v) {
  key(out, field, 2);
  varint(out, v.size());
  out.append(v);
}
void double_field(std::string& out, int field, double v) {
  key(out, field, 1);
  char b[8];
  std::memcpy(b, &v, 8);  // little-endian hosts
  out.append(b, 8);
}
void float_field(std::string& out, int field, float v) {
  key(out, field, 5);
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event{wall_time, step, summary = Summary{value = values}}: `values` already encoded Value fields.
std::string summary_event(int64_t step, const std::string& values) {
  std::string e;
  double_field(e, 1, now_s());
  key(e, 2, 0);
  varint(e, uint64_t(step));
  bytes_field(e, 5, values);
  return e;
}

// Summary.Value{tag, simple_value} as a repeated field 1 of Summary.
void scalar_value(std::string& values, const std::string& tag, double v) {
  std::string value;
  bytes_field(value, 1, tag);
  float_field(value, 2, float(v));
  bytes_field(values, 1, value);
}

// Every number of `j` under `prefix`, nested objects joined with "/".
void flatten(const nlohmann::json& j, const std::string& prefix, std::vector<std::pair<std::string, double>>& out) {
  for (const auto& [k, v] : j.items()) {
    const std::string tag = prefix + "/" + k;
    if (v.is_object()) flatten(v, tag, out);
    else if (v.is_number() && k != "step") out.push_back({tag, v.get<double>()});
  }
}

// The first occurrence of `field` in the encoded message `m`: its value (varint) or its bytes
// (length-delimited), by the wire type found; false when absent or unreadable.
bool find_field(std::string_view m, int field, uint64_t* value, std::string_view* bytes) {
  size_t i = 0;
  const auto read_varint = [&](uint64_t& v) {
    v = 0;
    for (int shift = 0; i < m.size() && shift < 64; shift += 7) {
      const uint8_t b = uint8_t(m[i++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  while (i < m.size()) {
    uint64_t k = 0, v = 0;
    if (!read_varint(k)) return false;
    const bool wanted = int(k >> 3) == field;
    switch (k & 7) {
      case 0:
        if (!read_varint(v)) return false;
        if (wanted && value) return *value = v, true;
        break;
      case 1: i += 8; break;
      case 5: i += 4; break;
      case 2:
        if (!read_varint(v) || v > m.size() - i) return false;
        if (wanted && bytes) return *bytes = m.substr(i, size_t(v)), true;
        i += size_t(v);
        break;
      default: return false;
    }
  }
  return false;
}

// Whether an encoded Event belongs to a training step after `step`: a summary at the step axis
// (its first tag not "... vs tokens") with a later step.
bool after_step(std::string_view event, int64_t step) {
  uint64_t s = 0;
  std::string_view summary, value, tag;
  if (!find_field(event, 2, &s, nullptr) || int64_t(s) <= step) return false;
  if (!find_field(event, 5, nullptr, &summary) || !find_field(summary, 1, nullptr, &value) ||
      !find_field(value, 1, nullptr, &tag))
    return false;
  const std::string_view suffix = " vs tokens";
  return !(tag.size() >= suffix.size() && tag.substr(tag.size() - suffix.size()) == suffix);
}

// The records of a TFRecord file up to the first one that is cut or fails its CRC (a crash may
// leave the last one partial): the framed bytes of each, with its Event.
std::vector<std::pair<std::string, std::string>> read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::pair<std::string, std::string>> out;
  size_t i = 0;
  while (all.size() - i >= 12) {
    uint64_t n;
    uint32_t crc;
    std::memcpy(&n, all.data() + i, 8);
    std::memcpy(&crc, all.data() + i + 8, 4);
    if (crc != masked_crc32c(all.data() + i, 8) || n > all.size() - i - 16) break;
    uint32_t data_crc;
    std::memcpy(&data_crc, all.data() + i + 12 + n, 4);
    if (data_crc != masked_crc32c(all.data() + i + 12, size_t(n))) break;
    out.push_back({all.substr(i, size_t(16 + n)), all.substr(i + 12, size_t(n))});
    i += size_t(16 + n);
  }
  return out;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto& t = crc32c_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = t[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, const std::string& run, int64_t resumed_step,
                                     const std::string& spec_toml)
    : spec_toml_(spec_toml) {
  namespace fs = std::filesystem;
  std::string suffix = "." + run;  // the run's name as a file-name suffix: letters, digits, - and _
  for (char& c : suffix)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  if (resumed_step > 0)
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("events.out.tfevents.", 0) != 0 || !entry.is_regular_file() || name.size() < suffix.size() ||
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        continue;
      // Records are in the order the rows came: everything from the first row after the
      // checkpoint on (its scalars and their twins against tokens) goes.
      std::string kept;
      for (const auto& [framed, event] : read_records(entry.path().string())) {
        if (after_step(event, resumed_step)) break;
        kept += framed;
      }
      write_file_atomic(entry.path().string(), kept);
    }
  char host[256] = "host";
  ::gethostname(host, sizeof host - 1);
  path_ = (fs::path(dir) / fmt::format("events.out.tfevents.{}.{}.{}{}", int64_t(now_s()), host, ::getpid(), suffix))
              .string();
  f_ = std::fopen(path_.c_str(), "ab");
  if (!f_) throw RuntimeFailure(fmt::format("{}: cannot create: {}", path_, std::strerror(errno)));
  std::string version;
  double_field(version, 1, now_s());
  bytes_field(version, 3, "brain.Event:2");
  record(version);
  std::fflush(f_);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::record(std::string_view event) {
  std::string framed(12, '\0');
  const uint64_t n = event.size();
  std::memcpy(framed.data(), &n, 8);
  const uint32_t length_crc = masked_crc32c(framed.data(), 8), data_crc = masked_crc32c(event.data(), event.size());
  std::memcpy(framed.data() + 8, &length_crc, 4);
  framed.append(event);
  framed.append(reinterpret_cast<const char*>(&data_crc), 4);
  if (std::fwrite(framed.data(), 1, framed.size(), f_) != framed.size())
    throw RuntimeFailure(fmt::format("{}: write failed: {}", path_, std::strerror(errno)));
}

void TensorBoardWriter::write(const nlohmann::json& row) {
  const std::string kind = row.contains("kind") && row["kind"].is_string() ? row["kind"].get<std::string>() : "run";
  if (row.contains("step") && row["step"].is_number_integer()) step_ = row["step"].get<int64_t>();
  if (kind == "train" && row.contains("tokens_by_source") && row["tokens_by_source"].is_object()) {
    double tokens = 0;
    for (const auto& [source, n] : row["tokens_by_source"].items())
      if (n.is_number()) tokens += n.get<double>();
    tokens_ = tokens;
  }
  std::vector<std::pair<std::string, double>> scalars;
  flatten(row, kind, scalars);
  if (!spec_written_) {  // the resolved spec, as the text plugin reads it: a string tensor
    std::string tensor, metadata, plugin, value, values;
    key(tensor, 1, 0);
    varint(tensor, 7);                 // dtype DT_STRING
    bytes_field(tensor, 2, "");        // tensor_shape: a scalar
    bytes_field(tensor, 8, spec_toml_);  // string_val
    bytes_field(plugin, 1, "text");    // PluginData.plugin_name
    bytes_field(metadata, 1, plugin);  // SummaryMetadata.plugin_data
    bytes_field(value, 1, "config");
    bytes_field(value, 9, metadata);
    bytes_field(value, 8, tensor);
    bytes_field(values, 1, value);
    record(summary_event(step_, values));
    spec_written_ = true;
  }
  if (!scalars.empty()) {
    std::string by_step, by_tokens;
    for (const auto& [tag, v] : scalars) {
      scalar_value(by_step, tag, v);
      scalar_value(by_tokens, tag + " vs tokens", v);
    }
    record(summary_event(step_, by_step));
    record(summary_event(int64_t(tokens_), by_tokens));
  }
  if (std::fflush(f_) != 0) throw RuntimeFailure(fmt::format("{}: write failed: {}", path_, std::strerror(errno)));
}

}  // namespace zt
