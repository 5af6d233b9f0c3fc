// What every decoder-only model holds besides its own maths (GPT-2 and Llama derive from it): the
// backend, the tensor-parallel helpers, the parameter table and its provider (the ZeRO store),
// the activation buffer, the token uploads, the vocabulary-parallel loss, the padded vocabulary
// and the shape of the batch in flight. The group walk of a pass is engine/model/decoder_pass.h.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/activation_arena.h"
#include "engine/model/decoder_pass.h"
#include "engine/model/fp8_weight_copies.h"
#include "engine/model/lora.h"
#include "engine/model/model.h"
#include "engine/model/token_slots.h"
#include "engine/model/tensor_parallel.h"

namespace zt {

class Comm;

class DecoderLM : public Model {
 public:
  ~DecoderLM() override;  // frees the activation buffer
  DecoderLM(const DecoderLM&) = delete;
  DecoderLM& operator=(const DecoderLM&) = delete;

  const ParamTable& table() const override { return table_; }
  void set_provider(ParamProvider* p) override { prov_ = p; }
  const ParamTable* adapter_table() const override { return lora_ ? &lora_->table() : nullptr; }
  void set_batch_origin(uint64_t seed, uint64_t first_sample) override {
    origin_seed_ = seed, origin_sample_ = first_sample;
  }
  void set_adapter_provider(ParamProvider* p) override {
    if (lora_) lora_->set_provider(p);
  }
  double take_losses() override { return loss_.take(); }
  void set_fp8(Fp8Layers which) override;
  std::vector<Fp8WeightRange> fp8_weights() const override;

 protected:
  // Buffers for batches of up to max_batch sequences of seq_len tokens, d_model wide, a
  // vocabulary of vocab_size held as vocab_held rows (padded for tensor parallelism), the sequence
  // region's rows split across the tensor group with `sequence_parallel`.
  DecoderLM(Backend& backend, int max_batch, Comm* tp, int seq_len, int d_model, int vocab_size, int vocab_held,
            bool sequence_parallel);
  int deferred_losses() const override { return loss_.pending(); }
  // A forward of (B, T) begins: within the buffers' bounds, with a provider (`model` names it);
  // `training`: it makes gradients (the adapters' dropout applies).
  void begin_batch(int B, int T, int seq_len, const char* model, bool training);
  void* el(void* base, int64_t i) const { return static_cast<char*>(base) + i * int64_t(esize_); }
  void* at(void* group_base, size_t param) const { return el(group_base, table_.group_rel(param)); }
  // A tensor's gradient in its group's; null when the group has none (a frozen base: LoRA).
  float* at(float* group_base, size_t param) const { return group_base ? group_base + table_.group_rel(param) : nullptr; }
  // Whether the base is frozen (low-rank adapters train instead): no weight gradient is made.
  bool frozen() const { return lora_ != nullptr; }
  // The walk over the groups, with the adapters' beside the base's.
  DecoderPass pass(int n_layer, bool tied) const { return DecoderPass{*prov_, n_layer, head_group(), tied, lora_.get()}; }
  int head_group() const { return int(table_.groups().size()) - 1; }  // the final norm (and head)

  // ---- A block's four linear layers (GPT-2: c_attn, attn.c_proj, c_fc, mlp.c_proj; Llama: the
  // packed q|k|v, o, the packed gate|up, down). With [precision] fp8 those set_fp8 chose run their
  // products in FP8 (the backend's *_fp8 ops); the others, the head and the adapters in the
  // compute type.
  enum BlockLinear { kQkvLinear, kOLinear, kUpLinear, kDownLinear, kBlockLinears };
  struct LinearShape {
    const char* name;
    int64_t out, in;              // the whole layer's weight (nn.Linear's (out, in)): fp8_layers' rule
    int64_t local_out, local_in;  // this rank's part of it (tensor parallelism): what its GEMMs take
    size_t first_tensor;          // the weight's (first) tensor among its block's, in table order
  };
  virtual std::array<LinearShape, kBlockLinears> block_linears() const = 0;
  bool fp8(BlockLinear l) const { return fp8_[l]; }
  // ", FP8 linear layers: mlp.c_proj" for describe(); "" without FP8.
  std::string fp8_note() const;
  // y (N, OC) = x W^T + b and its backward, as matmul_forward / matmul_backward (dx written,
  // dw and db accumulated; each may be null), in FP8 when fp8(l), with W's FP8 copy where the
  // provider keeps the parameters in place (fp8_weight_copies.h).
  void linear_forward(BlockLinear l, void* y, const void* x, const void* w, const void* b, int64_t N, int C, int OC);
  void linear_backward(BlockLinear l, void* dx, float* dw, float* db, const void* dy, const void* x, const void* w,
                       int64_t N, int C, int OC);

  // ---- The output head and the loss, one chunk of rows at a time: no (B*T, vocab) logits tensor
  // exists. Each chunk's logits (R, Vl) = x W^T are made, the softmax cross-entropy turns them into
  // dlogits in place (the padding columns left out of its softmax), and at once dx (the
  // chunk's rows) = dlogits W and the head's weight gradient += dlogits^T x; backward() then adds
  // that gradient into the provider's (the Liger / FusedLinearCrossEntropy plan: the gradients are
  // made in forward, as the loss with grad_scale already promised).
  struct HeadActs {
    void* logits = nullptr;  // (R, Vl) one chunk of rows
    void* last_x = nullptr;  // (B, C) the final norm's row of each sequence's last position
    void* last = nullptr;    // (B, Vl) their logits, for logits_row (sampling, dump-state)
    float* dw = nullptr;     // (Vl, C) fp32, the head weight's gradient of this micro-batch
  };
  // The head's activation slots for batches of up to max_batch x seq_len, width C, Vl local ids.
  // `frozen`: no weight gradient (LoRA's base), no slot for it.
  static std::vector<ActSlot> head_slots(HeadActs& h, int64_t max_batch, int64_t seq_len, int64_t C, int64_t Vl,
                                         bool frozen = false);
  // The sequence region's activations with sequence parallelism: the gathered input of a
  // column-parallel matmul and the partial sums of a row-parallel one, (size * seq_rows, C) each;
  // empty without it. `partial` also carries the head's input gradient from forward to backward.
  struct SequenceActs {
    void* full = nullptr;
    void* partial = nullptr;
  };
  // The backward of a column-parallel Linear l, y (N, OC) = x W^T (W: this rank's (OC, C) rows) whose
  // input x is the sequence region's x_local: dx_local (the region's rows) <- dL/dx summed over the
  // tensor group; dw, db (may be null) += this rank's parts. Megatron's overlap: the input's
  // all-gather (sequence parallel) runs during the input gradient's GEMM, and that gradient's
  // reduction during the weight gradient's GEMM. `dw_begin` / `dw_end` (may be empty) run just
  // before and after the weight gradient's GEMM (Llama's replicated key/value rows); dw null (a
  // frozen base) skips it. `dx_extra` (may be empty) adds to this rank's part of dx (N, C) before
  // its reduction, given the full input x (N, C): the layer's low-rank adapters.
  using DxExtra = std::function<void(void* dx, const void* x)>;
  void column_parallel_backward(BlockLinear l, void* dx_local, float* dw, float* db, const void* dout, const void* x_local,
                                const void* w, const SequenceActs& sq, int64_t N, int C, int OC,
                                const std::function<void()>& dw_begin = {}, const std::function<void()>& dw_end = {},
                                const DxExtra& dx_extra = {});
  // Rows of the sequence region per rank for `rows` rows (TensorParallel::seq_rows, before one exists).
  static int64_t seq_rows_of(bool sequence_parallel, int tp, int64_t rows) {
    return sequence_parallel && tp > 1 ? (rows + tp - 1) / tp : rows;
  }
  static std::vector<ActSlot> sequence_slots(SequenceActs& s, bool sequence_parallel, int tp, int64_t max_rows,
                                             int64_t C);
  // Rows per logits chunk for BT rows: as many as make a chunk about the size of one (BT, C)
  // activation (BT / ceil(Vl / C), rounded up to 64) but at least 1024, at most BT;
  // ZTRAIN_HEAD_CHUNK_ROWS=N sets N (tests, experiments).
  static int64_t head_chunk_rows(int64_t BT, int64_t C, int64_t Vl);
  // x (B*T, C): the final norm's output; W (Vl, C): this rank's slice of the head's weight;
  // targets (B*T) device ids or null (inference: only each sequence's last logits are made). With
  // targets, the loss is pending (take_losses) and, with grad_scale != 0, dx (B*T, C) is written
  // (this rank's part; the tensor-parallel sum is the caller's) and h.dw holds the head's gradient.
  void head_forward(const HeadActs& h, const void* x, const void* W, const int32_t* targets, int C, int Vl,
                    float grad_scale, void* dx);
  void head_backward(const HeadActs& h, float* dW, int C, int Vl) {
    if (dW) be_.add(dW, dW, h.dw, int64_t(Vl) * C);  // none for a frozen head
  }
  // The full-vocabulary logits of sequence b's last position t (the one inference forwards keep).
  void last_logits_row(const HeadActs& h, int Vl, int b, int t, float* out) const;

  Backend& be_;
  int max_batch_;
  TensorParallel tp_;
  SequenceGrads seq_grads_;  // the norms' gradients (a part per rank with sequence parallelism)
  ParamTable table_;
  ParamProvider* prov_ = nullptr;
  size_t esize_;  // bytes per compute-precision element
  void* act_buf_ = nullptr;
  TokenSlots tokens_;
  VocabParallelCrossEntropy loss_;
  PaddedVocab vocab_;
  int cur_B_ = 0, cur_T_ = 0;
  std::unique_ptr<LoraAdapters> lora_;  // [lora]: the models' constructors make them
  uint64_t origin_seed_ = 0, origin_sample_ = 0;  // set_batch_origin
  bool grads_ready_ = false;
  bool last_logits_ready_ = false;  // the last forward was an inference forward (head_forward)
  std::array<bool, kBlockLinears> fp8_{};  // set_fp8
  Fp8WeightCopies fp8_copies_{be_};
  // What an FP8 product of N rows takes for W (OC, C): its FP8 copy (null: none is kept, or the
  // product is not in FP8) and its compute-type values (null where only the copy was gathered).
  struct Fp8Operand {
    const void* copy;
    const void* w;
  };
  Fp8Operand fp8_weight(const void* w, int64_t N, int C, int OC);
};

}  // namespace zt
