// The run's data: its training sources mixed by the schedule of [[data.sources]] /
// [[data.stages]], its validation sets, where training is in them (saved in checkpoints and
// restored on any layout), what each source has supplied, and the per-sample log.
#pragma once
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "engine/config/spec.h"

namespace zt {

class TrainingData {
 public:
  // Opens every source (errors name the source and its line in the spec) and checks that they
  // share one tokenizer. Every rank does this.
  explicit TrainingData(const RunSpec& spec);
  ~TrainingData();

  data::MixedData& mixed() { return *mixed_; }
  // The sources' tokenizer: the one with the most added tokens (the others' ids are its subset).
  const data::TokenizerInfo& tokenizer() const;
  size_t n_sources() const { return train_.size(); }
  // Some training source is read as rows of documents ([data] packing over a fine-tuning set).
  bool packed() const {
    for (const auto& ds : train_)
      if (ds->packed()) return true;
    return false;
  }
  const std::vector<std::string>& val_names() const { return val_names_; }
  data::TokenDataset& val(size_t i) { return *val_[i]; }
  size_t n_val() const { return val_.size(); }
  // "web (s3://…, 1.2M tokens, weight 0.5), …": the data line of the run's log.
  std::string describe() const;

  // The mixture's state before step `step_` (the step the loader starts at), moved forward as
  // steps complete.
  const data::MixState& state() const { return state_; }
  void step_done(int64_t step);  // after step `step` (0-based): the state before step + 1
  // The samples of the step step_done last moved past: {"source": [index in the source, ...]}.
  nlohmann::json samples_of_last_step() const;
  // The position saved in a checkpoint written before `next_step` (== the state's step).
  data::LoaderPosition position(int64_t next_step) const;
  // Restores a saved position and returns the step it continues with. UserError when it belongs
  // to another seed, global batch or dataset, or when the mixture changed and
  // allow_mixture_change is off (the message names what changed).
  int64_t restore(const data::LoaderPosition& p, bool log);

  // Cumulative tokens drawn from each training source: {"name": tokens, ...}.
  nlohmann::json tokens_by_source() const;
  // "source 'books' (URI): 80% of the loader's read time for 20% of the samples": the source
  // with the largest share of the read time since the last call (`last_*` hold that call's
  // totals), or "" when no source stands out.
  std::string slowest_source(const std::vector<double>& read_ms, std::vector<double>& last_ms,
                             std::vector<uint64_t>& last_drawn) const;

  // [data] sample_log: one line per sample of this rank's micro-batch (B rows from global sample
  // `first`), to out_dir/samples.rankNNNNN.tsv. open_sample_log, on every rank, first tidies the
  // sample logs already in out_dir as metrics.jsonl is (a file each to rank r of world_size, by
  // its rank modulo world_size: any layout may have written them): a run resumed at start_step
  // drops their rows of steps >= start_step (run past the checkpoint by the run that stopped,
  // they are run again), a fresh run keeps them as samples.rankNNNNN.N.tsv. It then opens this
  // rank's file when `writes` (a tensor-parallel group's first rank) and the log is on.
  void open_sample_log(int world_rank, int world_size, int64_t start_step, bool writes);
  void log_samples(int64_t step, uint64_t first, const data::SampleOrigin* origins, int B);

 private:
  nlohmann::json mixture_config() const;  // sources (name, uri, fingerprint, weight) and stages
  int64_t restore_from(const data::LoaderPosition& p, const nlohmann::json& saved, const nlohmann::json& now, bool log);
  const RunSpec& spec_;
  std::vector<std::unique_ptr<data::TokenDataset>> train_, val_;
  std::vector<std::string> val_names_;
  std::vector<uint64_t> fingerprints_;  // dataset_fingerprint of each training source
  std::unique_ptr<data::MixedData> mixed_;
  data::MixState state_;
  data::MixState step_start_;  // the state before the step step_done last moved past
  std::FILE* sample_log_ = nullptr;
};

}  // namespace zt
