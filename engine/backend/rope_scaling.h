// RoPE's frequencies, plain or scaled by Llama 3.1's rule (Hugging Face's rope_type "llama3"),
// one definition for the CPU reference and the CUDA kernel (host and device code; C++17: CUDA
// sources include it).
//
// Plain RoPE: inv_freq_i = 1 / theta^(2i / hs), i < hs / 2, in fp32 as Hugging Face computes it.
// "llama3" (transformers' _compute_llama3_parameters, from Meta's reference code): with the
// wavelength w = 2 pi / inv_freq and the original context L,
// - w < L / high_freq_factor (high frequencies): unchanged;
// - w > L / low_freq_factor (low frequencies): inv_freq / factor;
// - between: (1 - s) inv_freq / factor + s inv_freq, s = (L / w - low_freq_factor) /
//   (high_freq_factor - low_freq_factor).
// All in fp32, as transformers computes the table (python scalars meet fp32 tensors).
#pragma once

#include <cmath>

#include "engine/core/host_device.h"

namespace zt {

struct RopeScaling {
  float factor = 0;  // 0: plain RoPE; else the "llama3" rule
  float low_freq_factor = 1, high_freq_factor = 4;
  float original_positions = 8192;  // the context the model was pre-trained at
};

ZT_HOST_DEVICE inline float rope_inv_freq(float theta, int i, int hs, const RopeScaling& s) {
  const float inv_freq = 1.0f / powf(theta, float(2 * i) / float(hs));
  if (s.factor == 0) return inv_freq;
  const float wavelen = 6.283185307179586f / inv_freq;
  if (wavelen < s.original_positions / s.high_freq_factor) return inv_freq;
  if (wavelen > s.original_positions / s.low_freq_factor) return inv_freq / s.factor;
  const float smooth = (s.original_positions / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1 - smooth) * inv_freq / s.factor + smooth * inv_freq;
}

}  // namespace zt
