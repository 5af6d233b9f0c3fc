// The run's data sources, the mixture's position and its accounting (see training_data.h).
#include "engine/train/training_data.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include <fmt/ranges.h>

#include "engine/config/data_options.h"
#include "engine/core/log.h"
#include "engine/core/redact.h"
#include "engine/core/status.h"

namespace zt {

namespace {

// Two datasets' ids mean the same: one vocabulary and end-of-text, and where one adds tokens after
// the vocabulary (a chat template's markup), the other adds none of them or the same at the same
// ids (a pre-training set beside a fine-tuning set, or two fine-tuning sets of one template).
std::string same_tokenizer_problem(const data::TokenizerInfo& a, const data::TokenizerInfo& b) {
  const auto& fewer = a.added_tokens.size() <= b.added_tokens.size() ? a : b;
  const auto& more = &fewer == &a ? b : a;
  bool same = a.kind == b.kind && a.name == b.name && a.eot == b.eot &&
              a.n_vocab - a.added_tokens.size() == b.n_vocab - b.added_tokens.size();
  for (const auto& t : fewer.added_tokens)
    same = same && std::find(more.added_tokens.begin(), more.added_tokens.end(), t) != more.added_tokens.end();
  if (same) return "";
  auto added = [](const data::TokenizerInfo& t) {
    std::string out;
    for (const auto& [text, id] : t.added_tokens) out += fmt::format("{}{} = {}", out.empty() ? "; added " : ", ", text, id);
    return out;
  };
  return fmt::format("{} ({} ids, end-of-text {}{}) vs {} ({} ids, end-of-text {}{})", a.name, a.n_vocab, a.eot, added(a),
                     b.name, b.n_vocab, b.eot, added(b));
}

std::string hex(uint64_t v) { return fmt::format("{:016x}", v); }

}  // namespace

TrainingData::TrainingData(const RunSpec& spec) : spec_(spec) {
  const auto& m = spec.model;
  const data::DataOptions opt = data_options(spec);
  auto open = [&](const RunSpec::Data::Source& s) {
    try {
      return std::make_unique<data::TokenDataset>(s.uri, int(m.seq_len), int(m.vocab_size), opt);
    } catch (const UserError& e) {
      if ((s.split == "train" && !spec.data.train.empty()) || (s.split == "val" && !spec.data.val.empty()))
        throw;  // [data] train / val: the message as it always was
      user_error("{}: data source '{}': {}", s.at, s.name, e.what());
    }
  };
  std::vector<std::string> names;
  std::vector<std::string> where;
  for (const auto& s : spec.data.of_split("train")) {
    train_.push_back(open(s));
    names.push_back(s.name);
    where.push_back(s.at);
    fingerprints_.push_back(data::dataset_fingerprint(train_.back()->manifest()));
  }
  for (const auto& s : spec.data.of_split("val")) {
    val_.push_back(open(s));
    val_names_.push_back(s.name);
    where.push_back(s.at);
  }
  // one tokenizer: a mixture of two vocabularies would train on meaningless ids, and a val_loss
  // over another tokenizer's ids would look like a number
  const auto& first = train_[0]->manifest().tokenizer;
  for (size_t i = 1; i < train_.size() + val_.size(); ++i) {
    const bool is_val = i >= train_.size();
    const auto& ds = is_val ? *val_[i - train_.size()] : *train_[i];
    const std::string& name = is_val ? val_names_[i - train_.size()] : names[i];
    if (const std::string p = same_tokenizer_problem(first, ds.manifest().tokenizer); !p.empty()) {
      if (spec.data.sources.size() == 2 && !spec.data.train.empty() && !spec.data.val.empty())
        user_error("{}: [data] train and val were tokenized differently: {}; tokenize both with the same vocabulary",
                   spec.source, p);
      user_error("{}: data sources '{}' and '{}' were tokenized differently: {}; tokenize every source with the same "
                 "vocabulary", where[i], names[0], name, p);
    }
  }
  // the remote sources share the cache: what each must hold at once, together
  uint64_t need = 0;
  std::vector<std::string> remote;
  for (size_t i = 0; i < train_.size(); ++i)
    if (train_[i]->cache_need() > 0) need += train_[i]->cache_need(), remote.push_back(names[i]);
  if (remote.size() > 1 && need > opt.cache_limit)
    user_error("{}: [data] cache_limit = {} bytes is smaller than what the remote sources ({}) must cache at once "
               "together: {} bytes ((2 + prefetch) blocks x shuffle_block shards x their largest shard, summed)",
               spec.source, opt.cache_limit, fmt::join(remote, ", "), need);
  // the schedule: the sources' weights from step 0, then each stage's
  const auto train_specs = spec.data.of_split("train");
  std::vector<double> w0;
  for (const auto& s : train_specs) w0.push_back(s.weight);
  std::vector<data::MixSchedule::Stage> stages{{0, data::exact_weights(w0)}};
  for (const auto& st : spec.data.stages)
    stages.push_back({uint64_t(st.step) * uint64_t(spec.train.global_batch), data::exact_weights(st.weights)});
  std::vector<data::TokenDataset*> sets;
  std::vector<data::SampleOrder> orders;
  for (auto& ds : train_) {
    sets.push_back(ds.get());
    orders.emplace_back(*ds, uint64_t(spec.run.seed), true, int(spec.data.shuffle_block));
  }
  mixed_ = std::make_unique<data::MixedData>(
      data::MixedData{names, std::move(sets), std::move(orders), data::MixSchedule(std::move(stages))});
  state_ = mixed_->schedule.start();
}

TrainingData::~TrainingData() {
  if (sample_log_) std::fclose(sample_log_);
}

const data::TokenizerInfo& TrainingData::tokenizer() const {
  const data::TokenizerInfo* best = &train_[0]->manifest().tokenizer;
  for (const auto& ds : train_)
    if (ds->manifest().tokenizer.n_vocab > best->n_vocab) best = &ds->manifest().tokenizer;
  return *best;
}

std::string TrainingData::describe() const {
  std::vector<std::string> parts;
  const auto specs = spec_.data.of_split("train");
  for (size_t i = 0; i < train_.size(); ++i) {
    const data::TokenDataset& ds = *train_[i];
    // a fine-tuning set: its documents as rows (packed or padded), and how full they are
    const std::string rows =
        ds.packed() ? fmt::format(" of {} documents{}, {:.1f}% of positions filled", ds.manifest().total_documents(),
                                  ds.documents_split() ? fmt::format(" ({} cut into pieces)", ds.documents_split()) : "",
                                  100.0 * ds.fill_rate())
                    : "";
    parts.push_back(fmt::format("{}{} ({} tokens, {} samples{}{})", train_.size() > 1 ? specs[i].name + " = " : "",
                                redact_url_passwords(specs[i].uri), ds.manifest().total_tokens(), ds.n_windows(), rows,
                                train_.size() > 1 ? fmt::format(", weight {:g}", specs[i].weight) : ""));
  }
  std::string out = fmt::format("{}", fmt::join(parts, "; "));
  std::vector<int64_t> steps;
  for (const auto& st : spec_.data.stages) steps.push_back(st.step);
  if (!steps.empty()) out += fmt::format("; stages from steps {}", fmt::join(steps, ", "));
  return out;
}

void TrainingData::step_done(int64_t step) {
  step_start_ = state_;
  mixed_->schedule.advance_to(state_, uint64_t(step + 1) * uint64_t(spec_.train.global_batch));
}

nlohmann::json TrainingData::samples_of_last_step() const {
  nlohmann::json out = nlohmann::json::object();
  data::MixState s = step_start_;
  while (s.next_sample < state_.next_sample) {
    const size_t src = mixed_->schedule.next(s);
    out[mixed_->names[src]].push_back(s.drawn[src] - 1);
  }
  return out;
}

nlohmann::json TrainingData::mixture_config() const {
  nlohmann::json sources = nlohmann::json::array(), stages = nlohmann::json::array();
  const auto specs = spec_.data.of_split("train");
  for (size_t i = 0; i < specs.size(); ++i)
    sources.push_back({{"name", specs[i].name}, {"uri", redact_url_passwords(specs[i].uri)},
                       {"fingerprint", hex(fingerprints_[i])}, {"weight", specs[i].weight}});
  for (const auto& st : spec_.data.stages) stages.push_back({{"step", st.step}, {"weights", st.weights}});
  // what the sources' sample indices mean: windows of seq_len tokens, shuffled in blocks of shards
  return {{"sources", sources}, {"stages", stages}, {"seq_len", spec_.model.seq_len},
          {"shuffle_block", spec_.data.shuffle_block}};
}

data::LoaderPosition TrainingData::position(int64_t next_step) const {
  const uint64_t g = uint64_t(next_step) * uint64_t(spec_.train.global_batch);
  ZT_CHECK(state_.next_sample == g, "data position asked for step {} but the mixture is at sample {}", next_step,
           state_.next_sample);
  nlohmann::json j = mixture_config();
  for (size_t i = 0; i < train_.size(); ++i) {
    auto& s = j["sources"][i];
    s["drawn"] = state_.drawn[i];
    s["stage_drawn"] = state_.stage_drawn[i];
    s["epoch"] = state_.drawn[i] / train_[i]->n_windows();  // informational
  }
  j["stage"] = state_.stage;
  j["stage_start"] = state_.stage_start;
  return {g, uint64_t(spec_.run.seed), data::mixture_fingerprint(fingerprints_), spec_.train.global_batch, j.dump()};
}

int64_t TrainingData::restore(const data::LoaderPosition& p, bool log) {
  const auto& spec = spec_;
  if (p.seed != uint64_t(spec.run.seed))
    user_error("the saved data position used seed {}, this run has [run] seed = {}", p.seed, spec.run.seed);
  if (p.global_batch != spec.train.global_batch || p.next_sample % uint64_t(p.global_batch) != 0)
    user_error("the saved data position used global_batch {}, this run has {}", p.global_batch,
               spec.train.global_batch);
  const nlohmann::json now = mixture_config();
  nlohmann::json saved;
  if (p.mixture.empty()) {  // a single-source checkpoint from before mixtures: its one source
    if (train_.size() == 1 && p.dataset_crc != fingerprints_[0])
      user_error("the saved data position belongs to another dataset than {}", spec.data.of_split("train")[0].uri);
    saved = {{"sources", {{{"name", train_.size() == 1 ? now["sources"][0]["name"] : nlohmann::json("train")},
                           {"fingerprint", hex(p.dataset_crc)}, {"weight", 1.0}, {"drawn", p.next_sample},
                           {"stage_drawn", p.next_sample}}}},
             {"stages", nlohmann::json::array()}, {"stage", 0}, {"stage_start", 0}};
    if (train_.size() == 1) saved["sources"][0]["weight"] = now["sources"][0]["weight"];
  } else {
    try {
      saved = nlohmann::json::parse(p.mixture);
    } catch (const nlohmann::json::exception& e) {
      user_error("the saved data position is damaged ({})", e.what());
    }
  }
  try {
    return restore_from(p, saved, now, log);
  } catch (const nlohmann::json::exception& e) {  // valid JSON, not what a position holds
    user_error("the saved data position is damaged ({})", e.what());
  }
}

int64_t TrainingData::restore_from(const data::LoaderPosition& p, const nlohmann::json& saved,
                                   const nlohmann::json& now, bool log) {
  const auto& spec = spec_;
  if (!saved.is_object() || !saved["sources"].is_array() || saved["sources"].empty())
    user_error("the saved data position is damaged (no sources)");
  uint64_t drawn_total = 0;
  for (const auto& s : saved["sources"]) {
    if (!s.is_object()) user_error("the saved data position is damaged (a source is not an object)");
    drawn_total += s.value("drawn", uint64_t(0));
  }
  if (drawn_total != p.next_sample)
    user_error("the saved data position is damaged: its sources supplied {} samples, but it is at sample {}",
               drawn_total, p.next_sample);
  for (const char* key : {"seq_len", "shuffle_block"})  // absent in older checkpoints
    if (saved.contains(key) && saved[key] != now[key])
      user_error("the saved data position counts samples with [{}] {} = {}, this run has {}: its indices would name "
                 "other samples (the order is not resumable across that change)",
                 std::string(key) == "seq_len" ? "model" : "data", key, saved[key].dump(), now[key].dump());
  // what changed, source by source (matched by name), then the order and the stages
  std::vector<std::string> changes;
  auto find = [](const nlohmann::json& list, const std::string& name) -> const nlohmann::json* {
    for (const auto& s : list)
      if (s.value("name", "") == name) return &s;
    return nullptr;
  };
  std::vector<std::string> saved_names, now_names;
  for (const auto& s : saved["sources"]) saved_names.push_back(s.value("name", ""));
  for (const auto& s : now["sources"]) {
    const std::string name = s["name"];
    now_names.push_back(name);
    const nlohmann::json* old = find(saved["sources"], name);
    if (!old) {
      changes.push_back(fmt::format("source '{}' added", name));
      continue;
    }
    if (old->value("fingerprint", "") != s["fingerprint"])
      user_error("data source '{}' ({}) holds other data than the source of that name in the run being resumed "
                 "(dataset fingerprint {} then, {} now): the saved position would index other samples; give it "
                 "another name and set [data] allow_mixture_change = true to start it fresh", name, s.value("uri", ""), old->value("fingerprint", ""),
                 s["fingerprint"].get<std::string>());
    if (old->value("weight", -1.0) != s["weight"].get<double>())
      changes.push_back(fmt::format("source '{}' weight {:g} -> {:g}", name, old->value("weight", -1.0),
                                    s["weight"].get<double>()));
  }
  for (const auto& n : saved_names)
    if (!find(now["sources"], n)) changes.push_back(fmt::format("source '{}' removed", n));
  if (changes.empty() && saved_names != now_names)
    changes.push_back(fmt::format("sources reordered ({} -> {})", fmt::join(saved_names, ", "),
                                  fmt::join(now_names, ", ")));
  if (saved["stages"] != now["stages"])
    changes.push_back(fmt::format("stages {} -> {}", saved["stages"].dump(), now["stages"].dump()));
  const int64_t step = int64_t(p.next_sample / uint64_t(p.global_batch));
  if (!changes.empty() && !spec.data.allow_mixture_change)
    user_error("the data mixture differs from the run being resumed: {}. Resuming would not continue its sample "
               "order; set [data] allow_mixture_change = true to apply the new mixture from step {}",
               fmt::join(changes, "; "), step);
  data::MixState s = mixed_->schedule.start();
  s.next_sample = p.next_sample;
  for (size_t i = 0; i < train_.size(); ++i)
    if (const nlohmann::json* old = find(saved["sources"], now_names[i])) {
      s.drawn[i] = old->value("drawn", uint64_t(0));
      s.stage_drawn[i] = old->value("stage_drawn", uint64_t(0));
    }
  if (changes.empty()) {  // exactly where the saving run was
    s.stage = saved.value("stage", size_t(0));
    s.stage_start = saved.value("stage_start", uint64_t(0));
    uint64_t in_stage = 0;
    for (uint64_t d : s.stage_drawn) in_stage += d;
    if (s.stage >= mixed_->schedule.n_stages() || s.stage_start + in_stage != s.next_sample)
      user_error("the saved data position is inconsistent (stage {}, {} samples since {}, next sample {})", s.stage,
                 in_stage, s.stage_start, s.next_sample);
  } else {  // the new weights count from here
    s.stage = mixed_->schedule.stage_at(s.next_sample);
    s.stage_start = s.next_sample;
    std::fill(s.stage_drawn.begin(), s.stage_drawn.end(), 0);
    if (log)
      spdlog::warn("data: the mixture changed ({}); allow_mixture_change = true: the new mixture applies from step {}",
                   fmt::join(changes, "; "), step);
  }
  state_ = std::move(s);
  if (log && train_.size() > 1) {
    std::vector<std::string> where;
    for (size_t i = 0; i < train_.size(); ++i)
      where.push_back(fmt::format("{} epoch {} + {} samples", now_names[i], state_.drawn[i] / train_[i]->n_windows(),
                                  state_.drawn[i] % train_[i]->n_windows()));
    spdlog::info("data: resumed at sample {} (stage {}): {}", state_.next_sample,
                 mixed_->schedule.stage_at(state_.next_sample), fmt::join(where, ", "));
  }
  return step;
}

nlohmann::json TrainingData::tokens_by_source() const {
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < train_.size(); ++i) j[mixed_->names[i]] = state_.drawn[i] * uint64_t(spec_.model.seq_len);
  return j;
}

std::string TrainingData::slowest_source(const std::vector<double>& read_ms, std::vector<double>& last_ms,
                                         std::vector<uint64_t>& last_drawn) const {
  last_ms.resize(read_ms.size(), 0.0), last_drawn.resize(read_ms.size(), 0);
  double ms = 0, samples = 0;
  size_t slow = 0;
  for (size_t i = 0; i < read_ms.size(); ++i) {
    ms += read_ms[i] - last_ms[i], samples += double(state_.drawn[i] - last_drawn[i]);
    if (read_ms[i] - last_ms[i] > read_ms[slow] - last_ms[slow]) slow = i;
  }
  const double ms_share = ms > 0 ? (read_ms[slow] - last_ms[slow]) / ms : 0;
  const double sample_share = samples > 0 ? double(state_.drawn[slow] - last_drawn[slow]) / samples : 0;
  last_ms = read_ms, last_drawn = state_.drawn;
  if (ms_share < 0.5 || ms_share < 1.5 * sample_share) return "";  // none stands out
  return fmt::format("source '{}' ({}) took {:.0f}% of the loader's read time for {:.0f}% of the samples",
                     mixed_->names[slow], redact_url_passwords(spec_.data.of_split("train")[slow].uri), 100 * ms_share,
                     100 * sample_share);
}

void TrainingData::open_sample_log(int world_rank, int world_size, int64_t start_step, bool writes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::pair<fs::path, int>> logs;  // (path, its rank): listed first, then trimmed or renamed
  for (const auto& entry : fs::directory_iterator(spec_.run.out_dir, ec)) {
    const std::string name = entry.path().filename().string();  // samples.rankNNNNN.tsv, 5 digits
    const std::string digits = name.size() == 21 ? name.substr(12, 5) : "";
    if (!name.starts_with("samples.rank") || !name.ends_with(".tsv") || digits.size() != 5 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    const int file_rank = std::stoi(digits);
    if (file_rank % world_size == world_rank) logs.emplace_back(entry.path(), file_rank);
  }
  for (const auto& [log, file_rank] : logs) {
    if (start_step == 0) {
      int n = 1;
      while (fs::exists(fs::path(spec_.run.out_dir) / fmt::format("samples.rank{:05d}.{}.tsv", file_rank, n))) ++n;
      fs::rename(log, fs::path(spec_.run.out_dir) / fmt::format("samples.rank{:05d}.{}.tsv", file_rank, n));
      continue;
    }
    // Rows are in step order: the file is cut at the first row of a step >= start_step, or at a
    // row cut short by the crash (fewer than 5 fields). Read a line at a time, never whole.
    std::ifstream in(log, std::ios::binary);
    std::string line;
    std::streamoff keep = 0;
    for (bool header = true; std::getline(in, line); header = false) {
      long long step = 0;
      const bool whole = !in.eof() && std::count(line.begin(), line.end(), '\t') == 4 &&
                         std::sscanf(line.c_str(), "%lld", &step) == 1;
      if (!header && (!whole || step >= start_step)) break;
      keep += std::streamoff(line.size() + 1);
    }
    in.close();
    fs::resize_file(log, std::min(uintmax_t(keep), fs::file_size(log)), ec);
    if (ec) throw RuntimeFailure(fmt::format("{}: cannot trim the sample log: {}", log.string(), ec.message()));
  }
  if (!spec_.data.sample_log || !writes) return;
  fs::create_directories(spec_.run.out_dir, ec);
  const std::string path = (fs::path(spec_.run.out_dir) / fmt::format("samples.rank{:05d}.tsv", world_rank)).string();
  const bool fresh = !fs::exists(path, ec);
  sample_log_ = std::fopen(path.c_str(), "a");  // a resumed run continues the file
  if (!sample_log_) throw RuntimeFailure(fmt::format("{}: cannot open the sample log: {}", path, std::strerror(errno)));
  if (fresh) std::fprintf(sample_log_, "step\tsample\tsource\tindex\twindow\n");
}

void TrainingData::log_samples(int64_t step, uint64_t first, const data::SampleOrigin* origins, int B) {
  if (!sample_log_) return;
  for (int b = 0; b < B; ++b)
    std::fprintf(sample_log_, "%lld\t%llu\t%s\t%llu\t%llu\n", (long long)step, (unsigned long long)(first + b),
                 mixed_->names[origins[b].source].c_str(), (unsigned long long)origins[b].index,
                 (unsigned long long)origins[b].window);
  std::fflush(sample_log_);
}

}  // namespace zt
