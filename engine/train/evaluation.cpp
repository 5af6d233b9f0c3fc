// Evaluation (see evaluation.h).
#include "engine/train/evaluation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/core/log.h"
#include "engine/core/preemption.h"
#include "engine/core/status.h"

namespace zt {

float evaluate(Job& job, TrainingData& data, bool stoppable, std::vector<float>* each, bool* stopped) {
  const RunSpec& spec = job.spec;
  const Topology& topo = job.topo;
  ZT_CHECK(data.n_val() > 0, "evaluate() without validation data");
  const int B = int(spec.train.micro_batch), T = int(spec.model.seq_len);
  // Micro-batch i is evaluated by data-parallel rank i mod D; every rank runs the same number of
  // forwards (possibly with zero weight) so that ZeRO-3's collectives stay matched. A set's loss is
  // the mean over its tokens with loss (a fine-tuning set's: the answers' tokens only).
  const int64_t n = spec.train.eval_steps, rounds = (n + topo.dp - 1) / topo.dp;
  std::vector<double> sums(2 * data.n_val(), 0.0);  // each set's loss sum, then each set's token count
  std::vector<int32_t> positions(size_t(B) * T);
  for (size_t v = 0; v < data.n_val(); ++v) {
    data::TokenDataset& val = data.val(v);
    data::SampleOrder order(val, 0, /*shuffle=*/false);
    for (int64_t r = 0; r < rounds; ++r) {
      if (stoppable && stopped) {  // one small all-reduce per round: every rank stops alike
        double signal = preemption_signal() != 0 ? 1.0 : 0.0;
        topo.world->all_reduce_doubles(&signal, 1);
        if (signal > 0) {
          *stopped = true;
          return std::nanf("");
        }
      }
      const int64_t i = r * topo.dp + topo.dp_rank;
      order.fill(val, uint64_t(std::min(i, n - 1) * B), B, job.inputs.data(), job.targets.data(), positions.data());
      const float l = job.model->forward(job.inputs.data(), job.targets.data(), B, T, 0.0f,
                                         val.packed() ? positions.data() : nullptr);
      const double counted = double(loss_tokens(job.targets.data(), int64_t(B) * T));
      if (i < n) sums[v] += double(l) * counted, sums[data.n_val() + v] += counted;
    }
  }
  topo.dp_group->all_reduce_doubles(sums.data(), sums.size());
  double mean = 0;
  if (each) each->clear();
  for (size_t v = 0; v < data.n_val(); ++v) {
    const double loss = sums[data.n_val() + v] > 0 ? sums[v] / sums[data.n_val() + v] : 0.0;
    mean += loss / double(data.n_val());
    if (each) each->push_back(float(loss));
  }
  return float(mean);
}

void evaluate_and_report(Job& job, TrainingData& data, bool stoppable, int64_t step, MetricsWriter* metrics) {
  if (data.n_val() == 0) return;
  std::vector<float> each;
  bool stopped = false;
  const float vl = evaluate(job, data, stoppable, &each, &stopped);
  const bool root = job.topo.is_root();
  if (stopped) {
    if (root) spdlog::warn("evaluation at step {} stopped by a signal: the checkpoint comes first", step);
    return;
  }
  if (!root) return;
  nlohmann::json row = {{"kind", "eval"}, {"step", step}, {"val_loss", vl}};
  std::string text;
  if (each.size() > 1) {  // each set's too, and val_loss is their mean
    nlohmann::json by = nlohmann::json::object();
    for (size_t v = 0; v < each.size(); ++v) {
      by[data.val_names()[v]] = each[v];
      text += fmt::format(" | {} {:.4f}", data.val_names()[v], each[v]);
    }
    row["val_loss_by_source"] = by;
  }
  std::printf("step %lld | val_loss %.4f%s\n", (long long)step, vl, text.c_str());
  std::fflush(stdout);
  metrics->write(row);
}

}  // namespace zt
