// [[data.sources]] and [[data.stages]] of the run spec: the arrays of tables that describe a data
// mixture. Read from the parsed TOML, checked once every key is known (names, weights, steps), and
// written back into the resolved spec. Internal to engine/config (spec.cpp calls these).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "engine/config/spec.h"

namespace zt {

// `node` is [data] sources / stages; `file` names the spec in messages. UserError on a table
// that is not one, an unknown key or a value of the wrong type.
void read_data_sources(const toml::node& node, const std::string& file, RunSpec::Data& d);
void read_data_stages(const toml::node& node, const std::string& file, RunSpec::Data& d);

// After the whole spec is read: [data] train / val become sources, names are given, and weights
// and stages are checked (UserError naming the key and line). `train_at` / `val_at` locate those
// keys; `max_steps_at` locates [train] max_steps.
void resolve_data_mixture(RunSpec& spec, const std::string& train_at, const std::string& val_at,
                          const std::string& max_steps_at);

// The sources and stages as TOML tables (empty when they came from [data] train / val).
std::string data_mixture_toml(const RunSpec& spec);
// The same as ("[[data.sources]] N key", value) pairs, for the ranks' agreement on the spec.
std::vector<std::pair<std::string, std::string>> data_mixture_entries(const RunSpec& spec);

}  // namespace zt
