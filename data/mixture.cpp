// The mixture schedule: exact integer weights and earliest-deadline-first (see mixture.h).
#include "data/mixture.h"

#include <algorithm>
#include <cmath>

#include "engine/core/status.h"

namespace zt::data {

using u128 = unsigned __int128;

std::vector<uint64_t> exact_weights(const std::vector<double>& weights) {
  // shares of the largest weight first: their sum is at most the number of sources, where the
  // weights' own sum overflows (1e308 + 1e308 = inf gave one source everything)
  double top = 0;
  for (double w : weights) {
    ZT_CHECK(std::isfinite(w) && w >= 0, "weight {}", w);
    top = std::max(top, w);
  }
  ZT_CHECK(top > 0, "weights all 0");
  double total = 0;
  for (double w : weights) total += w / top;
  std::vector<uint64_t> out(weights.size());
  uint64_t sum = 0;
  size_t largest = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double share = weights[i] / top / total;
    out[i] = weights[i] > 0 ? std::max<uint64_t>(1, uint64_t(std::floor(share * double(kWeightOne)))) : 0;
    sum += out[i];
    if (out[i] > out[largest]) largest = i;
  }
  // the rounding's remainder (a few units of 2^-32) goes to the largest weight
  out[largest] = out[largest] + kWeightOne - sum;
  return out;
}

MixSchedule::MixSchedule(std::vector<Stage> stages) : stages_(std::move(stages)) {
  ZT_CHECK(!stages_.empty() && stages_[0].from_sample == 0, "a schedule starts at sample 0");
  for (size_t i = 0; i < stages_.size(); ++i) {
    uint64_t sum = 0;
    for (uint64_t w : stages_[i].weights) sum += w;
    ZT_CHECK(sum == kWeightOne && stages_[i].weights.size() == n_sources(), "stage {} weights", i);
    ZT_CHECK(i == 0 || stages_[i].from_sample > stages_[i - 1].from_sample, "stages out of order");
  }
}

size_t MixSchedule::stage_at(uint64_t g) const {
  size_t i = 0;
  while (i + 1 < stages_.size() && stages_[i + 1].from_sample <= g) ++i;
  return i;
}

MixState MixSchedule::start() const {
  MixState s;
  s.stage_drawn.assign(n_sources(), 0);
  s.drawn.assign(n_sources(), 0);
  return s;
}

void MixSchedule::enter_stage(MixState& s) const {
  while (s.stage + 1 < stages_.size() && stages_[s.stage + 1].from_sample <= s.next_sample) {
    ++s.stage;
    s.stage_start = stages_[s.stage].from_sample;
    std::fill(s.stage_drawn.begin(), s.stage_drawn.end(), 0);
  }
}

size_t MixSchedule::next(MixState& s) const {
  enter_stage(s);
  const std::vector<uint64_t>& w = stages_[s.stage].weights;
  const u128 n1 = u128(s.next_sample - s.stage_start + 1);  // samples of the stage once this one is drawn
  size_t best = w.size();
  for (size_t k = 0; k < w.size(); ++k) {
    // eligible: not ahead of its share; Σ drawn = n1 - 1 < Σ w n1 / 2^32 = n1, so one always is
    if (u128(s.stage_drawn[k]) * kWeightOne >= u128(w[k]) * n1) continue;
    // due first: (drawn_k + 1) / w_k < (drawn_best + 1) / w_best, cross-multiplied
    if (best == w.size() || u128(s.stage_drawn[k] + 1) * w[best] < u128(s.stage_drawn[best] + 1) * w[k]) best = k;
  }
  ZT_CHECK(best < w.size(), "no source eligible at sample {}", s.next_sample);
  ++s.stage_drawn[best], ++s.drawn[best], ++s.next_sample;
  return best;
}

void MixSchedule::advance_to(MixState& s, uint64_t g) const {
  ZT_CHECK(g >= s.next_sample, "the mixture moves forward only ({} -> {})", s.next_sample, g);
  if (n_sources() == 1) {  // one source: sample g is its sample g
    s.drawn[0] += g - s.next_sample;
    s.next_sample = g;
    enter_stage(s);
    s.stage_drawn[0] = g - s.stage_start;
    return;
  }
  while (s.next_sample < g) next(s);
}

}  // namespace zt::data
