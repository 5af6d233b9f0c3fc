// [[data.sources]] / [[data.stages]]: reading, checking and writing back (see spec_mixture.h).
#include "engine/config/spec_mixture.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/ranges.h>

#include "engine/config/spec_schema.h"
#include "engine/core/redact.h"
#include "engine/core/status.h"

namespace zt {

namespace {

std::string line_of(const std::string& file, const toml::node& n) {
  return fmt::format("{}:{}", file, n.source().begin.line);
}

// Each element of an array of tables, with its location.
template <typename F>
void for_each_table(const toml::node& node, const std::string& file, const char* what, F&& f) {
  const toml::array* arr = node.as_array();
  if (!arr)
    user_error("{}: [data] {} must be an array of tables ([[data.{}]]), got a single value", line_of(file, node),
               what, what);
  for (const toml::node& el : *arr) {
    const toml::table* t = el.as_table();
    if (!t) user_error("{}: each [[data.{}]] entry must be a table", line_of(file, el), what);
    f(*t, line_of(file, el));
  }
}

[[noreturn]] void unknown_table_key(const std::string& at, const char* what, const std::string& key,
                                    const std::vector<std::string>& known) {
  const std::string near = nearest_name(key, known);
  user_error("{}: unknown key '{}' in [[data.{}]]{}", at, key, what,
             near.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", near));
}

std::string string_of(const toml::node& v, const std::string& at, const char* what, const char* key) {
  if (!v.is_string()) user_error("{}: [[data.{}]] {} must be a string", at, what, key);
  return v.as_string()->get();
}

double number_of(const toml::node& v, const std::string& at, const std::string& name) {
  if (v.is_integer()) return double(v.as_integer()->get());
  if (v.is_floating_point()) return v.as_floating_point()->get();
  user_error("{}: {} must be a number", at, name);
}

// A weight is a share: finite and >= 0 (NaN and inf are TOML floats too).
void check_weight(double w, const std::string& at, const std::string& name) {
  if (!std::isfinite(w) || w < 0) user_error("{}: {} = {} must be a finite number >= 0", at, name, w);
}

std::string trimmed_uri(std::string uri) {
  while (uri.size() > 1 && uri.back() == '/') uri.pop_back();
  return uri;
}

// What a source's URI names, spelled one way: a local directory (a plain path or file://) as its
// canonical absolute path (symlinks, `.` and `..` resolved, relative to the working directory as
// the loader opens it); a URL with its scheme lower-cased, an http(s) host lower-cased and
// without its scheme's default port (an S3 bucket's case is its own), no user info, and its path
// lexically normal without a trailing slash (curl removes dot segments before sending). Two spellings of one source (dir/./train,
// a symlink to it, file:// + its path) then compare equal.
std::string source_identity(const std::string& uri) {
  namespace fs = std::filesystem;
  const size_t scheme_end = uri.find("://");
  if (scheme_end == std::string::npos || uri.rfind("file://", 0) == 0) {
    const std::string path = scheme_end == std::string::npos ? uri : uri.substr(7);
    std::error_code ec;
    fs::path p = fs::weakly_canonical(fs::absolute(path), ec);
    if (ec) p = fs::absolute(path).lexically_normal();
    return "file://" + trimmed_uri(p.string());
  }
  std::string scheme = uri.substr(0, scheme_end);
  std::string rest = uri.substr(scheme_end + 3);
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  std::string path = slash == std::string::npos ? "/" : rest.substr(slash);
  if (const size_t at = authority.rfind('@'); at != std::string::npos) authority = authority.substr(at + 1);
  auto lower = [](std::string t) {
    for (char& c : t) c = char(std::tolower(static_cast<unsigned char>(c)));
    return t;
  };
  scheme = lower(scheme);
  if (scheme == "http" || scheme == "https") {
    authority = lower(authority);
    const std::string port = scheme == "http" ? ":80" : ":443";
    if (authority.size() > port.size() && authority.ends_with(port)) authority.resize(authority.size() - port.size());
  }
  return scheme + "://" + authority + trimmed_uri(fs::path(path).lexically_normal().generic_string());
}

// The last `parts` path components of a URI ("s3://b/corpora/web/train", 2 -> "web/train").
std::string uri_tail(const std::string& uri, int parts) {
  const std::string u = trimmed_uri(uri);
  size_t at = u.size();
  for (int k = 0; k < parts && at != std::string::npos && at > 0; ++k) at = u.rfind('/', at - 1);
  std::string tail = at == std::string::npos ? u : u.substr(at + 1);
  if (const size_t scheme = tail.find("://"); scheme != std::string::npos) tail = tail.substr(scheme + 3);
  return tail;
}

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/')) return false;
  return true;
}

}  // namespace

void read_data_sources(const toml::node& node, const std::string& file, RunSpec::Data& d) {
  for_each_table(node, file, "sources", [&](const toml::table& t, const std::string& at) {
    RunSpec::Data::Source s;
    s.at = at;
    bool has_uri = false;
    for (const auto& [key, v] : t) {
      const std::string k(key.str());
      if (k == "uri") s.uri = string_of(v, at, "sources", "uri"), has_uri = true;
      else if (k == "name") s.name = string_of(v, at, "sources", "name");
      else if (k == "split") s.split = string_of(v, at, "sources", "split");
      else if (k == "weight") s.weight = number_of(v, at, "[[data.sources]] weight"), check_weight(s.weight, at, "[[data.sources]] weight");
      else unknown_table_key(at, "sources", k, {"uri", "name", "split", "weight"});
    }
    if (!has_uri || s.uri.empty()) user_error("{}: [[data.sources]] needs uri (a directory of shards, http(s):// or s3://)", at);
    if (s.split != "train" && s.split != "val")
      user_error("{}: [[data.sources]] split = '{}' is not one of \"train\", \"val\"", at, s.split);
    d.sources.push_back(std::move(s));
  });
}

void read_data_stages(const toml::node& node, const std::string& file, RunSpec::Data& d) {
  for_each_table(node, file, "stages", [&](const toml::table& t, const std::string& at) {
    RunSpec::Data::Stage st;
    st.at = at;
    bool has_step = false, has_weights = false;
    for (const auto& [key, v] : t) {
      const std::string k(key.str());
      if (k == "step") {
        if (!v.is_integer()) user_error("{}: [[data.stages]] step must be an integer", at);
        st.step = v.as_integer()->get(), has_step = true;
      } else if (k == "weights") {
        const toml::table* w = v.as_table();
        if (!w) user_error("{}: [[data.stages]] weights must be a table of source name = weight", at);
        for (const auto& [name, wv] : *w) {
          const std::string what = fmt::format("[[data.stages]] weights.{}", name.str());
          const double x = number_of(wv, at, what);
          check_weight(x, at, what);
          st.by_name.emplace_back(std::string(name.str()), x);
        }
        has_weights = true;
      } else {
        unknown_table_key(at, "stages", k, {"step", "weights"});
      }
    }
    if (!has_step) user_error("{}: [[data.stages]] needs step (the step its weights apply from)", at);
    if (!has_weights) user_error("{}: [[data.stages]] needs weights = {{ source = weight, ... }}", at);
    d.stages.push_back(std::move(st));
  });
}

void resolve_data_mixture(RunSpec& spec, const std::string& train_at, const std::string& val_at,
                          const std::string& max_steps_at) {
  auto& d = spec.data;
  bool listed_train = false, listed_val = false;
  for (const auto& s : d.sources) (s.split == "train" ? listed_train : listed_val) = true;
  if (!d.train.empty() && listed_train)
    user_error("{}: [data] train and [[data.sources]] both give training data: use one or the other", train_at);
  if (!d.val.empty() && listed_val)
    user_error("{}: [data] val and [[data.sources]] with split = \"val\" both give validation data: use one or "
               "the other", val_at);
  if (d.train.empty() && !listed_train)
    user_error("{}: missing required key [data] train (a directory of shards), or [[data.sources]] tables", spec.source);
  // train / val as keys are the one-source case
  if (!d.train.empty()) d.sources.insert(d.sources.begin(), {"train", d.train, "train", 1.0, train_at});
  if (!d.val.empty()) d.sources.push_back({"val", d.val, "val", -1, val_at});

  std::map<std::string, const RunSpec::Data::Source*> by_uri;
  for (auto& s : d.sources) {
    if (s.split == "train" && s.weight < 0) user_error("{}: [[data.sources]] weight is missing (the source's share of the samples)", s.at);
    if (s.split == "val" && s.weight >= 0)
      user_error("{}: [[data.sources]] weight: a val source has none (each validation set is evaluated on its own)", s.at);
    const std::string key = s.split + " " + source_identity(s.uri);
    if (auto [it, fresh] = by_uri.emplace(key, &s); !fresh)
      user_error("{}: [[data.sources]] uri = \"{}\" is listed twice (also at {}){}", s.at, redact_url_passwords(s.uri),
                 it->second->at,
                 it->second->uri == s.uri
                     ? ""
                     : fmt::format(": it names the same data as \"{}\"", redact_url_passwords(it->second->uri)));
  }
  // default names: the URI's last component, or its last two where that is ambiguous
  std::vector<std::string> defaults;
  for (const auto& s : d.sources) {
    int same = 0;
    for (const auto& o : d.sources) same += o.name.empty() && uri_tail(o.uri, 1) == uri_tail(s.uri, 1);
    defaults.push_back(uri_tail(s.uri, same > 1 ? 2 : 1));
  }
  for (size_t i = 0; i < d.sources.size(); ++i)
    if (d.sources[i].name.empty()) d.sources[i].name = defaults[i];
  std::map<std::string, std::string> names;
  for (const auto& s : d.sources) {
    if (!valid_name(s.name))
      user_error("{}: [[data.sources]] name = '{}': a name is 1-64 letters, digits and _ - . /{}", s.at, s.name,
                 s.name.empty() ? " (give one: the URI has no last path component)" : "");
    if (auto [it, fresh] = names.emplace(s.name, s.at); !fresh)
      user_error("{}: [[data.sources]] name '{}' is used twice (also at {}): give each source its own name", s.at,
                 s.name, it->second);
  }
  std::vector<std::string> train_names;
  double total = 0;
  for (const auto& s : d.sources)
    if (s.split == "train") train_names.push_back(s.name), total += s.weight;
  if (total <= 0)
    user_error("{}: [[data.sources]] weight: every training source has weight 0; at least one must be > 0",
               d.of_split("train").front().at);

  int64_t prev = 0;
  for (auto& st : d.stages) {
    if (st.step < 1) user_error("{}: [[data.stages]] step = {} must be >= 1 (the sources' weights apply from step 0)", st.at, st.step);
    if (st.step <= prev)
      user_error("{}: [[data.stages]] step = {} is not after the previous stage's step {} (stages are in order)",
                 st.at, st.step, prev);
    if (st.step >= spec.train.max_steps)
      user_error("{}: [[data.stages]] step = {} is not before [train] max_steps = {} ({}): the stage would never "
                 "apply", st.at, st.step, spec.train.max_steps, max_steps_at);
    prev = st.step;
    st.weights.assign(train_names.size(), -1);
    for (const auto& [name, w] : st.by_name) {
      size_t i = 0;
      while (i < train_names.size() && train_names[i] != name) ++i;
      if (i == train_names.size()) {
        const std::string near = nearest_name(name, train_names);
        user_error("{}: [[data.stages]] weights.{}: no training source is named '{}'{}", st.at, name, name,
                   near.empty() ? fmt::format(" (sources: {})", fmt::join(train_names, ", "))
                                : fmt::format(" (did you mean '{}'?)", near));
      }
      st.weights[i] = w;
    }
    double sum = 0;
    for (size_t i = 0; i < train_names.size(); ++i) {
      if (st.weights[i] < 0)
        user_error("{}: [[data.stages]] weights: source '{}' is missing (give every training source a weight, 0 to "
                   "leave it out)", st.at, train_names[i]);
      sum += st.weights[i];
    }
    if (sum <= 0) user_error("{}: [[data.stages]] weights are all 0; at least one must be > 0", st.at);
  }
}

std::string data_mixture_toml(const RunSpec& spec) {
  const auto& d = spec.data;
  std::string out;
  for (const auto& s : d.sources) {
    if ((s.split == "train" && !d.train.empty()) || (s.split == "val" && !d.val.empty())) continue;  // a key
    out += fmt::format("\n[[data.sources]]\nname = {}\nuri = {}\nsplit = {}\n", toml_quote(s.name),
                       toml_quote(redact_url_passwords(s.uri)), toml_quote(s.split));
    if (s.split == "train") out += fmt::format("weight = {}\n", toml_float(s.weight));
  }
  for (const auto& st : d.stages) {
    out += fmt::format("\n[[data.stages]]\nstep = {}\nweights = {{ ", st.step);
    const auto train = d.of_split("train");
    for (size_t i = 0; i < train.size(); ++i)
      out += fmt::format("{}{} = {}", i ? ", " : "", toml_quote(train[i].name), toml_float(st.weights[i]));
    out += " }\n";
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> data_mixture_entries(const RunSpec& spec) {
  std::vector<std::pair<std::string, std::string>> out;
  const auto& d = spec.data;
  for (size_t i = 0; i < d.sources.size(); ++i) {
    const auto& s = d.sources[i];
    out.emplace_back(fmt::format("[[data.sources]] {}", i),
                     fmt::format("{} {} {} {}", s.name, redact_url_passwords(s.uri), s.split, toml_float(s.weight)));
  }
  for (size_t i = 0; i < d.stages.size(); ++i)
    out.emplace_back(fmt::format("[[data.stages]] {}", i),
                     fmt::format("{} {}", d.stages[i].step, fmt::join(d.stages[i].weights, " ")));
  return out;
}

}  // namespace zt
