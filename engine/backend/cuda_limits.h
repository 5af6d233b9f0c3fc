// What the CUDA kernels take, in one place: the kernels enforce it, and the backends (and the
// planner, planning for a GPU without one) answer supports() from it before a run starts.
#pragma once

namespace zt {

constexpr int kCudaAttentionMaxHead = 128;  // engine/backend/cuda/attention.cu: KD up to 4 x 32

}  // namespace zt
