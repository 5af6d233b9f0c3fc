// What every decoder-only model holds besides its own maths (GPT-2 and Llama derive from it): the
// backend, the tensor-parallel helpers, the parameter table and its provider (the ZeRO store),
// the activation buffer, the token uploads, the vocabulary-parallel loss, the padded vocabulary
// and the shape of the batch in flight. The group walk of a pass is engine/model/decoder_pass.h.
#pragma once
#include <cstdint>

#include "engine/backend/backend.h"
#include "engine/model/activation_arena.h"
#include "engine/model/model.h"
#include "engine/model/token_slots.h"
#include "engine/parallel/tensor_parallel.h"

namespace zt {

class Comm;

class DecoderLM : public Model {
 public:
  ~DecoderLM() override;  // frees the activation buffer
  DecoderLM(const DecoderLM&) = delete;
  DecoderLM& operator=(const DecoderLM&) = delete;

  const ParamTable& table() const override { return table_; }
  void set_provider(ParamProvider* p) override { prov_ = p; }
  double take_losses() override { return loss_.take(); }

 protected:
  // Buffers for batches of up to max_batch sequences of seq_len tokens, d_model wide, a
  // vocabulary of vocab_size held as vocab_held rows (padded for tensor parallelism).
  DecoderLM(Backend& backend, int max_batch, Comm* tp, int seq_len, int d_model, int vocab_size, int vocab_held);
  int deferred_losses() const override { return loss_.pending(); }
  // A forward of (B, T) begins: within the buffers' bounds, with a provider (`model` names it).
  void begin_batch(int B, int T, int seq_len, const char* model);
  void* el(void* base, int64_t i) const { return static_cast<char*>(base) + i * int64_t(esize_); }
  void* at(void* group_base, size_t param) const { return el(group_base, table_.group_rel(param)); }
  float* at(float* group_base, size_t param) const { return group_base + table_.group_rel(param); }
  int head_group() const { return int(table_.groups().size()) - 1; }  // the final norm (and head)
  // Row (b, t) of this rank's logits (B,T,Vl), gathered over the vocabulary-parallel ranks.
  void logits_row_of(const void* logits, int64_t Vl, int b, int t, float* out) const {
    vocab_.logits_row(static_cast<const char*>(logits) + ((int64_t(b) * cur_T_ + t) * Vl) * int64_t(esize_), out);
  }

  Backend& be_;
  int max_batch_;
  TensorParallel tp_;
  ParamTable table_;
  ParamProvider* prov_ = nullptr;
  size_t esize_;  // bytes per compute-precision element
  void* act_buf_ = nullptr;
  TokenSlots tokens_;
  VocabParallelCrossEntropy loss_;
  PaddedVocab vocab_;
  int cur_B_ = 0, cur_T_ = 0;
  bool grads_ready_ = false;
};

}  // namespace zt
