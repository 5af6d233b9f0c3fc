// Run spec loading: TOML -> RunSpec via the schema table, --set overrides and validation (the
// resolved dump and the reference are spec_dump.cpp's). Every failure is a UserError naming the
// file (or --set), the key and the line.
#include "engine/config/spec.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "engine/config/model_keys.h"
#include "engine/config/spec_mixture.h"
#include "engine/config/spec_schema.h"
#include "engine/core/byte_size.h"
#include "engine/core/redact.h"
#include "engine/core/status.h"

namespace zt {

namespace {

constexpr int64_t kMaxInt = (int64_t(1) << 31) - 1;  // dims and counts stay within int32

void reject_deep_keys(const std::string& text, const std::string& source);  // below

const char* type_name(const toml::node& v) {
  switch (v.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    default: return "a date/time";
  }
}


const SpecKey* find_key(const std::string& section, const std::string& key) {
  for (const auto& k : spec_schema())
    if (section == k.section && key == k.key) return &k;
  return nullptr;
}

std::vector<std::string> section_names() {
  std::vector<std::string> out;
  for (const auto& k : spec_schema())
    if (out.empty() || out.back() != k.section) out.push_back(k.section);
  return out;
}

// "unknown key" with the nearest key of the section, or the same key in another section.
[[noreturn]] void unknown_key(const std::string& where, const std::string& section,
                              const std::string& key) {
  std::vector<std::string> in_section;
  for (const auto& k : spec_schema())
    if (section == k.section) in_section.push_back(k.key);
  std::string hint;
  std::string near = nearest_name(key, in_section);
  if (!near.empty()) hint = fmt::format(" (did you mean '{}'?)", near);
  else
    for (const auto& k : spec_schema())
      if (key == k.key) hint = fmt::format(" (did you mean [{}] {}?)", k.section, k.key);
  user_error("{}: unknown key [{}] {}{}", where, section, key, hint);
}

[[noreturn]] void unknown_section(const std::string& where, const std::string& section) {
  std::string near = nearest_name(section, section_names());
  user_error("{}: unknown section [{}]{}", where, section,
             near.empty() ? std::string() : fmt::format(" (did you mean [{}]?)", near));
}

// Whether --set takes a bare word as k's value ("run.device=cuda").
bool takes_words(const SpecKey& k) {
  RunSpec probe;
  const SpecField f = k.field(probe);
  return std::holds_alternative<std::string*>(f) || std::holds_alternative<SpecChoice>(f);
}

struct Loader {
  const ModelKeyRules& rules;
  RunSpec spec;
  std::map<std::string, std::string> bad_choice;  // "section.key" -> its message, for validate()
  std::map<std::string, std::string> where;  // "section.key" -> "file:line" or "--set"

  void assign(const SpecKey& k, const toml::node& v, const std::string& loc) {
    const std::string name = full_name(k);
    std::visit(
        [&](auto field) {
          using T = std::remove_pointer_t<decltype(field)>;
          if constexpr (std::is_same_v<T, SpecChoice>) {
            if (!v.is_string()) user_error("{}: {} must be a string, got {}", loc, name, type_name(v));
            const std::string value = v.as_string()->get();
            const auto names = key_choices(k);
            const auto it = std::find(names.begin(), names.end(), value);
            const std::string key = std::string(k.section) + "." + k.key;
            if (it == names.end()) {  // refused in validate() unless a later --set replaces it
              const std::string near = nearest_name(value, names);
              bad_choice[key] = fmt::format("{}: {}: '{}' is not one of {}{}", loc, name, value, choices_text(k),
                                            near.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", near));
              return;
            }
            bad_choice.erase(key);
            field.set(field.field, int(it - names.begin()));
          } else if constexpr (std::is_same_v<T, int64_t>) {
            if (!v.is_integer())
              user_error("{}: {} must be an integer, got {}", loc, name, type_name(v));
            *field = v.as_integer()->get();
          } else if constexpr (std::is_same_v<T, double>) {
            if (v.is_integer()) *field = double(v.as_integer()->get());
            else if (v.is_floating_point()) *field = v.as_floating_point()->get();
            else user_error("{}: {} must be a number, got {}", loc, name, type_name(v));
          } else if constexpr (std::is_same_v<T, bool>) {
            if (!v.is_boolean()) user_error("{}: {} must be true or false, got {}", loc, name, type_name(v));
            *field = v.as_boolean()->get();
          } else if (v.is_array() && name == "[lora] targets") {  // a list of roles, as PEFT's target_modules
            std::string joined;
            for (const toml::node& e : *v.as_array()) {
              if (!e.is_string()) user_error("{}: {} must be a list of strings, got {}", loc, name, type_name(e));
              joined += (joined.empty() ? "" : ",") + e.as_string()->get();
            }
            *field = joined;
          } else {
            if (!v.is_string()) user_error("{}: {} must be a string, got {}", loc, name, type_name(v));
            *field = v.as_string()->get();
          }
        },
        k.field(spec));
    where[std::string(k.section) + "." + k.key] = loc;
  }

  void load_table(const toml::table& tbl, const std::string& source) {
    for (const auto& [sec_key, sec_node] : tbl) {
      const std::string section(sec_key.str());
      const std::string loc = fmt::format("{}:{}", source, sec_node.source().begin.line);
      bool known = false;
      for (const auto& s : section_names()) known |= (s == section);
      if (!known) unknown_section(loc, section);
      const toml::table* t = sec_node.as_table();
      if (!t) user_error("{}: [{}] must be a table, got {}", loc, section, type_name(sec_node));
      for (const auto& [key, node] : *t) {
        const std::string kloc = fmt::format("{}:{}", source, node.source().begin.line);
        if (section == "data" && key.str() == "sources") {
          read_data_sources(node, source, spec.data);
          continue;
        }
        if (section == "data" && key.str() == "stages") {
          read_data_stages(node, source, spec.data);
          continue;
        }
        const SpecKey* k = find_key(section, std::string(key.str()));
        if (!k) unknown_key(kloc, section, std::string(key.str()));
        assign(*k, node, kloc);
      }
    }
  }

  void apply_override(const std::string& text) {
    const auto eq = text.find('=');
    if (eq == std::string::npos)
      user_error("--set {}: expected section.key=value", text);
    // spaces around '=' are allowed, as in the file ("model.n_layer = 2")
    const auto trim = [](std::string s) {
      const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
      return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
    };
    const std::string name = trim(text.substr(0, eq)), value = trim(text.substr(eq + 1));
    const auto dot = name.find('.');
    if (dot == std::string::npos)
      user_error("--set {}: expected section.key=value (no section in '{}')", text, name);
    const std::string section = name.substr(0, dot), key = name.substr(dot + 1);
    const std::string loc = "--set " + name;
    bool known = false;
    for (const auto& s : section_names()) known |= (s == section);
    if (!known) unknown_section(loc, section);
    if (section == "data" && (key == "sources" || key == "stages"))
      user_error("{}: [[data.{}]] is a list of tables: edit it in the spec file", loc, key);
    const SpecKey* k = find_key(section, key);
    if (!k) unknown_key(loc, section, key);
    // The value is read as TOML (so 3e-4, 12, "x" work); a bare word is taken as a string.
    toml::table parsed;
    bool parsed_ok = true;
    reject_deep_keys("v = " + value, loc);
    try {
      parsed = toml::parse("v = " + value);
    } catch (const toml::parse_error&) {
      parsed_ok = false;
    }
    if (parsed_ok && parsed.contains("v") && parsed["v"].node()) {
      const toml::node& v = *parsed["v"].node();
      if (takes_words(*k) && !v.is_string()) {
        toml::value<std::string> raw(value);
        assign(*k, raw, loc);
      } else {
        assign(*k, v, loc);
      }
    } else if (takes_words(*k)) {
      toml::value<std::string> raw(value);
      assign(*k, raw, loc);
    } else {
      user_error("{}: cannot read '{}' as a value for {}", loc, value, full_name(*k));
    }
  }

  std::string at(const char* section, const char* key) const {
    auto it = where.find(std::string(section) + "." + key);
    return it != where.end() ? it->second : spec.source + " (default)";
  }

  void check(bool ok, const char* section, const char* key, const std::string& msg) const {
    if (!ok) user_error("{}: [{}] {}: {}", at(section, key), section, key, msg);
  }

  // [model] init_from: the keys its config.json determines. A key the spec also gives must agree
  // (seq_len: at most the model's positions).
  void apply_hf_config() {
    const std::string dir = spec.model.init_from;
    for (const HfModelKey& k : rules.read_hf_config(dir)) {
      const SpecKey* sk = find_key("model", k.key);
      const std::string name = "model." + k.key, from = fmt::format("{}/config.json: {}", dir, k.field);
      const SpecField f = sk->field(spec);
      const bool given = where.count(name) > 0;
      auto str = [](const auto& v) { return fmt::format("{}", v); };
      std::visit(
          [&](auto field) {
            using T = std::remove_pointer_t<decltype(field)>;
            if constexpr (std::is_same_v<T, SpecChoice>) {
              ZT_CHECK(false, "config.json sets [model] {}, a key with choices", k.key);
            } else if constexpr (std::is_same_v<T, double>) {
              const double v = std::holds_alternative<double>(k.value) ? std::get<double>(k.value)
                                                                       : double(std::get<int64_t>(k.value));
              if (given && *field != v)
                user_error("{}: [model] {} = {} disagrees with {} = {}", where[name], k.key, str(*field), from, str(v));
              *field = v;
            } else {
              const T v = std::get<T>(k.value);
              if (given && k.upper_bound) {
                if constexpr (std::is_same_v<T, int64_t>)
                  if (*field > v)
                    user_error("{}: [model] {} = {} exceeds {} = {}", where[name], k.key, *field, from, v);
                return;
              }
              if (given && *field != v)
                user_error("{}: [model] {} = {} disagrees with {} = {}", where[name], k.key, str(*field), from, str(v));
              *field = v;
            }
          },
          f);
      if (!given) where[name] = from;
    }
  }

  // The whole spec, section by section (each function checks its own section's relations; the
  // table's ranges and choices come first, for every key alike).
  void validate() {
    // a value outside a key's choices, in the file or a --set, that no later --set replaced
    if (!bad_choice.empty()) user_error("{}", bad_choice.begin()->second);
    if (!spec.model.init_from.empty()) apply_hf_config();
    for (const auto& k : spec_schema())
      if (k.required && !where.count(std::string(k.section) + "." + k.key))
        user_error("{}: missing required key {} ({})", spec.source, full_name(k), k.help);
    validate_table();
    validate_run();
    validate_model();
    validate_train();
    validate_optim();
    resolve_data_mixture(spec, at("data", "train"), at("data", "val"), at("train", "max_steps"));
    validate_precision();
    validate_offload();
    validate_parallel();
    validate_lora();
    check_size(spec.data.cache_limit, "data", "cache_limit", "200GB, 512MiB, 1000000");
    validate_sizes();
    validate_checkpoint();
  }

  // Every numeric key within its one range (spec_schema.h), printed the same way whatever the
  // value; an integer key is also an int32 size. An optional key unset is not checked. (A key
  // with choices was checked as it was read.)
  void validate_table() {
    for (const auto& k : spec_schema()) {
      const SpecField f = k.field(spec);
      if (k.zero_unset && !where.count(std::string(k.section) + "." + k.key)) continue;
      if (auto* p = std::get_if<double*>(&f))
        check(std::isfinite(**p), k.section, k.key, fmt::format("{} is not a finite number", **p));
      if (!has_range(k)) continue;
      const SpecRange range = key_range(k);
      if (auto* p = std::get_if<int64_t*>(&f)) {
        check(range.contains(double(**p)), k.section, k.key, fmt::format("must be {}, got {}", range_text(range), **p));
        check(**p <= kMaxInt, k.section, k.key,
              fmt::format("must be at most {} (the sizes an integer key sets are 32-bit), got {}", kMaxInt, **p));
      }
      if (auto* p = std::get_if<double*>(&f))
        check(range.contains(**p), k.section, k.key, fmt::format("must be {}, got {}", range_text(range), **p));
    }
  }

  // A size key ("40GB", "512MiB") that parses, when given.
  void check_size(const std::string& value, const char* section, const char* key, const char* examples) {
    try {
      parse_byte_size(value, key);
    } catch (const UserError&) {
      check(false, section, key, fmt::format("'{}' is not a size (examples: {})", value, examples));
    }
  }

  void validate_run() {
    auto& r = spec.run;
    check(!r.out_dir.empty(), "run", "out_dir", "must not be empty");
    check(r.telemetry_s == 0 || r.telemetry_s >= 0.05, "run", "telemetry_s",
          fmt::format("must be 0 (off) or at least 0.05, got {}", r.telemetry_s));
    if (!r.device_memory_limit.empty()) check_size(r.device_memory_limit, "run", "device_memory_limit", "40GB, 512MiB");
  }

  void validate_model() {
    auto& m = spec.model;
    check(rules.has_family(m.arch), "model", "arch",
          fmt::format("'{}' is not a supported architecture (supported: {})", m.arch, rules.family_names()));
    check(m.head_dim > 0 || m.d_model % m.n_head == 0, "model", "d_model",
          fmt::format("d_model = {} is not divisible by n_head = {}", m.d_model, m.n_head));
    check(m.head_dim <= kMaxInt / m.n_head, "model", "head_dim",
          fmt::format("n_head x head_dim = {} x {} is too large", m.n_head, m.head_dim));
    if (m.n_kv_head == 0) m.n_kv_head = m.n_head;
    check(m.n_kv_head >= 1 && m.n_head % m.n_kv_head == 0, "model", "n_kv_head",
          fmt::format("n_head = {} is not a multiple of n_kv_head = {}", m.n_head, m.n_kv_head));
    // the family's defaults (d_ff, tie_embeddings) and its checks of the keys it gives a meaning
    rules.resolve(m, ModelKeyChecks{[&](bool ok, const char* key, const std::string& why) { check(ok, "model", key, why); },
                                    [&](const char* key) { return where.count(std::string("model.") + key) > 0; }});
    // a default derived from other keys is a dimension too (the models hold int32 sizes)
    check(m.d_ff >= 1 && m.d_ff <= kMaxInt, "model", "d_ff", fmt::format("{} is out of range [1, {}]", m.d_ff, kMaxInt));
  }

  void validate_train() {
    auto& t = spec.train;
    check(t.global_batch % t.micro_batch == 0, "train", "global_batch",
          fmt::format("global_batch = {} is not a multiple of micro_batch = {}", t.global_batch,
                      t.micro_batch));
    check(t.spike_policy != SpikePolicy::Rollback || t.rollback_after < t.max_skipped_steps, "train", "rollback_after",
          fmt::format("= {} must be below max_skipped_steps = {}, which would end the run first", t.rollback_after,
                      t.max_skipped_steps));
  }

  void validate_optim() {
    auto& o = spec.optim;
    check(o.min_lr >= 0 && o.min_lr <= o.lr, "optim", "min_lr",
          fmt::format("must be in [0, lr = {}], got {}", o.lr, o.min_lr));
  }

  void validate_precision() {
    auto& pr = spec.precision;
    check(pr.initial_scale >= pr.min_scale, "precision", "initial_scale",
          fmt::format("must be >= min_scale = {}, got {}", pr.min_scale, pr.initial_scale));
  }

  void validate_offload() {
    auto& off = spec.offload;
    check(off.params != OffloadTier::Nvme || off.optimizer == OffloadTier::Nvme, "offload", "params",
          "params = \"nvme\" needs optimizer = \"nvme\" (the compute shards are written by the streamed AdamW)");
    check(off.params == OffloadTier::None || spec.parallel.zero_stage == 3, "offload", "params",
          fmt::format("parameter offload needs ZeRO-3 ([parallel] zero_stage = 3), got zero_stage = {}",
                      spec.parallel.zero_stage));
    check(off.params == OffloadTier::None || off.optimizer != OffloadTier::None, "offload", "params",
          "parameter offload needs optimizer offload too (optimizer = \"cpu\" or \"nvme\"): the compute copy "
          "is written by the host's AdamW");
    check(off.optimizer != OffloadTier::Nvme || !off.nvme_path.empty(), "offload", "nvme_path",
          "optimizer = \"nvme\" needs a directory on a local SSD");
    if (!off.pinned_limit.empty()) check_size(off.pinned_limit, "offload", "pinned_limit", "64GB, 512MiB");
  }

  // [lora]: targets become the family's roles, comma-separated in block order ("all" expanded), so
  // that the model reads them as they are; what the adapters do not support yet is refused.
  void validate_lora() {
    auto& l = spec.lora;
    if (!l.enabled() && l.targets.empty()) return;  // no adapters, nothing named
    const std::vector<std::string> roles = rules.lora_roles(spec.model.arch);
    if (l.targets.empty()) l.targets = rules.lora_default_targets(spec.model.arch);
    std::vector<std::string> named;
    for (size_t a = 0; a <= l.targets.size();) {
      size_t b = l.targets.find(',', a);
      if (b == std::string::npos) b = l.targets.size();
      std::string t = l.targets.substr(a, b - a);
      t.erase(0, t.find_first_not_of(" \t"));
      t.erase(t.find_last_not_of(" \t") + 1);
      if (!t.empty()) named.push_back(t);
      a = b + 1;
    }
    std::string known;
    for (const std::string& r : roles) known += (known.empty() ? "\"" : ", \"") + r + "\"";
    std::string resolved;
    for (const std::string& r : roles) {
      bool wanted = false;
      for (const std::string& t : named) wanted |= t == r || t == "all";
      if (wanted) resolved += (resolved.empty() ? "" : ",") + r;
    }
    for (const std::string& t : named)
      check(t == "all" || std::find(roles.begin(), roles.end(), t) != roles.end(), "lora", "targets",
            fmt::format("'{}' is not a linear layer of {} (its roles: {}, or \"all\")", t, spec.model.arch, known));
    check(!resolved.empty() || !l.enabled(), "lora", "targets",
          fmt::format("names no layer (the roles of {}: {}, or \"all\")", spec.model.arch, known));
    l.targets = resolved;
    check(l.enabled() || l.init_from.empty(), "lora", "init_from", "adapters to start from need [lora] rank > 0");
    if (!l.enabled()) return;
    check(spec.offload.optimizer == OffloadTier::None && spec.offload.params == OffloadTier::None, "lora", "rank",
          "adapters with [offload] are not implemented yet (the adapters' states are small; the frozen base "
          "shards with ZeRO-3)");
  }

  void validate_parallel() {
    const auto& m = spec.model;
    auto& p = spec.parallel;
    check(m.n_head % p.tensor == 0, "parallel", "tensor",
          fmt::format("n_head = {} is not divisible by tensor = {}", m.n_head, p.tensor));
    // Key/value heads are split like the query heads or, when there are fewer of them than
    // tensor-parallel ranks, replicated so that each rank holds the one its query heads read.
    check(m.n_kv_head % p.tensor == 0 || p.tensor % m.n_kv_head == 0, "parallel", "tensor",
          fmt::format("n_kv_head = {} and tensor = {}: one must divide the other", m.n_kv_head, p.tensor));
    check(m.d_ff % p.tensor == 0, "parallel", "tensor",
          fmt::format("d_ff = {} is not divisible by tensor = {}", m.d_ff, p.tensor));
    // 16-bit rows are gathered two to a float
    check(!p.sequence_parallel || p.tensor == 1 || m.d_model % 2 == 0, "parallel", "sequence_parallel",
          fmt::format("sequence parallelism needs an even d_model, got {}", m.d_model));
    check(p.replicate == 1 || p.zero_stage > 0, "parallel", "replicate",
          fmt::format("replicate = {} needs ZeRO ([parallel] zero_stage 1-3): at stage 0 every rank already holds "
                      "everything", p.replicate));
  }

  // Products of keys that the models hold as int32 sizes.
  void validate_sizes() {
    const auto& m = spec.model;
    const auto& t = spec.train;
    // the vocabulary as held, padded to vocab_multiple x tensor
    const int64_t k = std::max<int64_t>(1, m.vocab_multiple) * std::max<int64_t>(1, spec.parallel.tensor);
    check((m.vocab_size + k - 1) / k * k <= kMaxInt, "model", "vocab_multiple",
          fmt::format("vocab_size = {} padded to a multiple of vocab_multiple x tensor = {} exceeds {}",
                      m.vocab_size, k, kMaxInt));
    check(int64_t(t.micro_batch) * m.seq_len <= kMaxInt, "train", "micro_batch",
          fmt::format("micro_batch * seq_len = {} tokens is too large", t.micro_batch * m.seq_len));
  }

  void validate_checkpoint() {
    auto& k = spec.checkpoint;
    check(k.dir.find("://") == std::string::npos || k.dir.rfind("s3://", 0) == 0, "checkpoint", "dir",
          fmt::format("'{}': a local directory or s3://bucket/prefix", k.dir));
    // with adapters the checkpoint holds them, over the Hugging Face base
    check(k.init_from.empty() || spec.model.init_from.empty() || spec.lora.enabled(), "model", "init_from",
          "[checkpoint] init_from (ztrain's weights) and [model] init_from (Hugging Face's) exclude each other");
    check(k.init_from.empty() || spec.lora.init_from.empty(), "lora", "init_from",
          "[checkpoint] init_from (ztrain's adapters) and [lora] init_from (PEFT's) exclude each other");
    check(k.resume.empty() || k.init_from.empty(), "checkpoint", "init_from",
          "resume and init_from exclude each other (resume continues a run, init_from starts a new one)");
    check(k.resume != "auto" || !k.dir.empty(), "checkpoint", "resume", "\"auto\" needs [checkpoint] dir");
    check(k.preemption_notice_s == 0 || !k.dir.empty(), "checkpoint", "preemption_notice_s",
          "a save must fit the notice: set [checkpoint] dir");
    const bool saves = k.every_steps > 0 || k.every_minutes > 0 || k.exit_after > 0;
    check(spec.train.spike_policy != SpikePolicy::Rollback || (!k.dir.empty() && (k.every_steps > 0 || k.every_minutes > 0)),
          "train", "spike_policy", "\"rollback\" goes back to the newest checkpoint before the skipped steps: set "
          "[checkpoint] dir and every_steps (or every_minutes)");
    check(!saves || !k.dir.empty(), "checkpoint", "dir",
          "every_steps, every_minutes and exit_after write checkpoints: set [checkpoint] dir");
  }
};

}  // namespace

namespace {
// toml++ 3.3 reaches an unreachable branch (undefined behaviour) when it meets certain non-ASCII
// characters where it expects whitespace (found by fuzzing). Mirroring TOML's string rules to
// allow them only inside strings proved fragile (fuzzing found ways around it), so a spec is
// ASCII: non-ASCII text in string values is written with \uXXXX escapes.
void reject_non_ascii(const std::string& text, const std::string& source) {
  size_t line = 1;
  for (const char c : text) {
    if (c == '\n') ++line;
    if (static_cast<unsigned char>(c) >= 0x80)
      user_error("{}:{}: non-ASCII character; a run spec is ASCII (write non-ASCII text in strings "
                 "as \\uXXXX escapes)", source, line);
  }
}

// toml++ parses dotted keys recursively: `[a.a.a...]` or `a.a.a... = 1` with tens of thousands of
// parts overflows the stack (a segfault, found by a hostile-input review). A run spec key is
// `[section] key` (dotted `section.key` at most), so keys are limited before parsing: a key of
// more than kMaxKeyParts parts or kMaxKeyChars characters is rejected. The scan follows TOML's
// lexical structure just enough to know where keys are: strings, comments, tables, arrays and
// inline tables (values nest at most 256 deep in toml++, which checks that itself).
constexpr int kMaxKeyParts = 8;
constexpr size_t kMaxKeyChars = 256;

void reject_deep_keys(const std::string& text, const std::string& source) {
  std::vector<char> nest;      // open '[' (array) and '{' (inline table) of values
  bool in_key = true;          // at a key: line start, a [header], after '{' or ',' in a table
  bool in_header = false;
  size_t key_start = 0, line = 1;
  int parts = 1;
  const auto start_key = [&](size_t at) { in_key = true, key_start = at, parts = 1; };
  start_key(0);
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"' || c == '\'') {  // skip a string (basic with escapes, literal, either multi-line)
      const bool multi = text.compare(i, 3, std::string(3, c)) == 0;
      const std::string close = multi ? std::string(3, c) : std::string(1, c);
      size_t j = i + close.size();
      while (j < text.size() && text.compare(j, close.size(), close) != 0) {
        if (text[j] == '\n') ++line;
        if (c == '"' && text[j] == '\\') ++j;
        ++j;
      }
      i = std::min(text.size(), j + close.size()) - 1;
      while (multi && i + 1 < text.size() && text[i + 1] == c) ++i;  // """a"""" ends with a quote
    } else if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '\n') {
      ++line;
      if (nest.empty()) start_key(i + 1), in_header = false;
    } else if (in_key && c == '.') {
      if (++parts > kMaxKeyParts)
        user_error("{}:{}: a key with more than {} dotted parts; a run spec key is [section] key", source, line,
                   kMaxKeyParts);
    } else if (in_key && nest.empty() && c == '[' && !in_header && text.find_first_not_of(" \t", key_start) == i) {
      in_header = true;
      key_start = i + 1;
    } else if (in_key && (c == '=' || (in_header && c == ']'))) {
      if (i - key_start > kMaxKeyChars)
        user_error("{}:{}: a key longer than {} characters; a run spec key is [section] key", source, line,
                   kMaxKeyChars);
      in_key = false;
    } else if (in_key && c == '}' && !nest.empty() && nest.back() == '{') {  // {} (empty table)
      nest.pop_back();
      in_key = false;
    } else if (!in_key && (c == '[' || c == '{')) {
      nest.push_back(c);
      if (c == '{') start_key(i + 1);
    } else if (!in_key && !nest.empty() && (c == ']' || c == '}')) {
      nest.pop_back();
    } else if (!in_key && !nest.empty() && nest.back() == '{' && c == ',') {
      start_key(i + 1);
    }
  }
}
}  // namespace

RunSpec parse_run_spec(const std::string& text, const std::string& source,
                       const std::vector<std::string>& overrides, const ModelKeyRules& rules) {
  reject_non_ascii(text, source);
  reject_deep_keys(text, source);
  Loader l{rules, {}, {}, {}};
  l.spec.source = source;
  toml::table parsed;
  try {
    parsed = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    user_error("{}:{}:{}: TOML syntax error: {}", source, e.source().begin.line,
               e.source().begin.column, e.description());
  }
  l.load_table(parsed, source);
  for (const auto& o : overrides) l.apply_override(o);
  l.validate();
  return l.spec;
}

RunSpec load_run_spec(const std::string& path, const std::vector<std::string>& overrides,
                      const ModelKeyRules& rules) {
  // A spec is a small text file: a device (/dev/zero, /dev/urandom) or a huge file is refused
  // before it is read whole into memory. A pipe is read too (`ztrain train <(envsubst < run.toml)`),
  // up to the same size.
  constexpr size_t kMaxSpecBytes = size_t(1) << 20;
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) user_error("{}: cannot open run spec: {}", path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) user_error("{}: is a directory (expected a run spec, SPEC.toml)", path);
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))
    user_error("{}: not a regular file (a device or a socket): a run spec is a TOML file", path);
  const std::string too_big = fmt::format("a run spec is at most {} bytes (1 MiB)", kMaxSpecBytes);
  if (S_ISREG(st.st_mode) && size_t(st.st_size) > kMaxSpecBytes)
    user_error("{}: {} bytes: {}", path, st.st_size, too_big);
  std::ifstream f(path, std::ios::binary);
  if (!f) user_error("{}: cannot open run spec", path);
  std::string text(kMaxSpecBytes + 1, '\0');
  f.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(f.gcount()));
  if (text.size() > kMaxSpecBytes) user_error("{}: more than {} bytes: {}", path, kMaxSpecBytes, too_big);
  return parse_run_spec(text, path, overrides, rules);
}

}  // namespace zt
