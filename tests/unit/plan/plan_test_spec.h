// The planner tests' model: two tiny GPT-2 blocks, 2 micro-batches of 2 a step on one rank.
#pragma once

namespace zt::testing {
inline const char* kPlanSpec = R"(
[model]
n_layer = 2
n_head = 2
d_model = 32
vocab_size = 96
seq_len = 16
[train]
micro_batch = 2
global_batch = 8
[data]
train = "unused"
)";
}  // namespace zt::testing
