// Evaluation on the validation sets ([data] val / each source's val, [train] eval_steps and
// eval_every): every rank runs it, rank 0 prints "step N | val_loss ..." and writes the metrics row.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/job/job.h"
#include "engine/observe/metrics.h"
#include "engine/train/training_data.h"

namespace zt {

// Mean loss over eval_steps micro-batches of each validation set (in dataset order): the mean
// over the sets, and each set's in `each` when given. With `stoppable` (checkpoints on), the
// ranks agree after each round of micro-batches whether a preemption signal arrived: then it stops
// early, sets *stopped and returns NaN, so that the checkpoint is not held up by a long evaluation.
float evaluate(Job& job, TrainingData& data, bool stoppable, std::vector<float>* each, bool* stopped);

// evaluate(), then rank 0's line and metrics row (kind "eval") for step `step`; nothing without
// validation data. `metrics`: rank 0's writer (null elsewhere).
void evaluate_and_report(Job& job, TrainingData& data, bool stoppable, int64_t step, MetricsWriter* metrics);

}  // namespace zt
