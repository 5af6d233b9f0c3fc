// The walk over a decoder-only language model's parameter groups that every family shares, in the
// ParamProvider protocol (begin_pass with the order of params() calls, params / release_params
// around each use, grads / grads_done): groups 0 = embeddings, 1 + l = block l, `head` = the final
// norm (and the output head when untied). The model supplies the maths of each stage; this walk
// owns the order, so ZeRO-3 gathers, prefetches and reduces the same way for every family.
//   forward:  embeddings, blocks 0..L-1, the head's norm, then the logits from the tied embedding
//             (group 0 again) or from the head;
//   backward: the head's weight gradient (tied: into group 0's gradient, which stays open until
//             the embedding's own part at the end; no parameters: forward made the head's
//             gradients), the head's norm, blocks L-1..0, the embedding.
// With low-rank adapters (engine/model/lora.h) the adapters' store walks the blocks alongside:
// block l's adapters are entered around block l, in both passes. The base's provider is then
// frozen: its grads() are null, and the model computes input gradients only.
#pragma once
#include <functional>

#include "engine/model/lora.h"
#include "engine/model/model.h"

namespace zt {

struct DecoderPass {
  ParamProvider& prov;
  int n_layer;
  int head;   // the head's group
  bool tied;  // the output head is the token embedding
  LoraAdapters* adapters = nullptr;  // low-rank adapters over the blocks, or none

  struct Forward {
    std::function<void(void* emb)> embed;           // group 0's parameters
    std::function<void()> embedded;                 // after group 0 is released (tensor-parallel sum)
    std::function<void(int l, void* block)> block;  // group 1 + l's parameters
    std::function<void(void* head)> final_norm;
    std::function<void(void* weights)> logits;  // tied: group 0's parameters; else the head's
  };
  void forward(const Forward& f) const;

  struct Backward {
    std::function<void(float* grads)> logits;  // tied: group 0's gradient; else the head's
    std::function<void(void* head, float* grads)> final_norm;
    std::function<void(int l, void* block, float* grads)> block;
    std::function<void(float* emb_grads)> embed;
  };
  void backward(const Backward& b) const;
};

}  // namespace zt
