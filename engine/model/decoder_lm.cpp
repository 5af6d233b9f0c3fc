// DecoderLM (see decoder_lm.h).
#include "engine/model/decoder_lm.h"

#include <algorithm>
#include <cstdlib>

#include "engine/backend/fp8_recipe.h"
#include "engine/core/status.h"

namespace zt {

namespace {
int tp_size_of(Comm* tp) { return tp && tp->size() > 1 ? tp->size() : 1; }
int tp_rank_of(Comm* tp) { return tp && tp->size() > 1 ? tp->rank() : 0; }
}  // namespace

DecoderLM::DecoderLM(Backend& backend, int max_batch, Comm* tp, int seq_len, int d_model, int vocab_size,
                     int vocab_held, bool sequence_parallel)
    : be_(backend),
      max_batch_(max_batch),
      tp_(backend, tp, int64_t(max_batch) * seq_len, d_model, sequence_parallel),  // every reduction is of (B,T,C)
      seq_grads_(backend, tp_, d_model),
      table_(tp_size_of(tp), tp_rank_of(tp)),
      esize_(backend.compute_size()),
      tokens_(backend, int64_t(max_batch) * seq_len),
      loss_(backend, tp_, head_chunk_rows(int64_t(max_batch) * seq_len, d_model, vocab_held / tp_size_of(tp))),
      vocab_(tp_, vocab_size, vocab_held) {}

DecoderLM::~DecoderLM() { be_.free(act_buf_); }

void DecoderLM::begin_batch(int B, int T, int seq_len, const char* model, bool training) {
  ZT_CHECK(B >= 1 && B <= max_batch_ && T >= 1 && T <= seq_len, "batch ({}, {}) exceeds ({}, {})", B, T, max_batch_,
           seq_len);
  ZT_CHECK(prov_ != nullptr, "{} has no ParamProvider", model);
  if (lora_) lora_->set_batch(training, origin_seed_, origin_sample_ * uint64_t(seq_len));
  cur_B_ = B;
  cur_T_ = T;
  // every FP8 product of the batch has B*T rows: FP8 weights serve them where those are in 16s
  if (std::any_of(fp8_.begin(), fp8_.end(), [](bool on) { return on; }))
    prov_->set_fp8_products(fp8_recipe::applies(int64_t(B) * T, 16, 16));
}

std::vector<ActSlot> DecoderLM::sequence_slots(SequenceActs& s, bool sequence_parallel, int tp, int64_t max_rows,
                                               int64_t C) {
  const double n = sequence_parallel && tp > 1 ? double(tp) * double(seq_rows_of(true, tp, max_rows)) * double(C) : 0;
  return {{&s.full, nullptr, n}, {&s.partial, nullptr, n}};
}

void DecoderLM::set_fp8(Fp8Layers which) {
  // the rule on the whole layer (the same choice on every layout), the GEMMs' sizes on this rank's part
  const std::array<LinearShape, kBlockLinears> shapes = block_linears();
  for (int l = 0; l < kBlockLinears; ++l)
    fp8_[l] = fp8_recipe::applies(16, shapes[l].local_in, shapes[l].local_out) &&
              (which == Fp8Layers::All || fp8_recipe::worth_it(shapes[l].out, shapes[l].in));
  if (std::none_of(fp8_.begin(), fp8_.end(), [](bool on) { return on; }))
    throw UserError(fmt::format(
        "[precision] fp8: no linear layer of this model runs in FP8 ({}): fp8_layers = \"auto\" leaves those "
        "with out <= 4096 and in <= 1024 in the compute type, and FP8 needs this rank's sizes in multiples of 16; "
        "set fp8_layers = \"all\" or fp8 = \"none\"", describe()));
}

std::string DecoderLM::fp8_note() const {
  std::string names;
  const std::array<LinearShape, kBlockLinears> shapes = block_linears();
  for (int l = 0; l < kBlockLinears; ++l)
    if (fp8_[l]) names += std::string(names.empty() ? "" : ", ") + shapes[l].name;
  return names.empty() ? "" : ", FP8 linear layers: " + names;
}

std::vector<Fp8WeightRange> DecoderLM::fp8_weights() const {
  std::vector<Fp8WeightRange> ws;
  const std::array<LinearShape, kBlockLinears> shapes = block_linears();
  for (int g = 1; g < head_group(); ++g)  // the blocks' groups
    for (int l = 0; l < kBlockLinears; ++l)
      if (fp8_[l]) {
        const size_t first = table_.groups()[size_t(g)].first_param + shapes[l].first_tensor;
        ws.push_back({g, size_t(table_.group_rel(first)), size_t(shapes[l].local_out * shapes[l].local_in)});
      }
  return ws;
}

DecoderLM::Fp8Operand DecoderLM::fp8_weight(const void* w, int64_t N, int C, int OC) {
  const void* gathered = prov_->gathered_fp8_copy(w);
  if (!fp8_recipe::applies(N, C, OC)) {  // the product runs in the compute type
    ZT_CHECK(!gathered, "a ({}, {}) weight gathered in FP8 for a product of {} rows", OC, C, N);
    return {nullptr, w};
  }
  if (gathered) return {gathered, nullptr};
  return {fp8_copies_.get(w, OC, C, prov_->resident_params_version()), w};
}

void DecoderLM::linear_forward(BlockLinear l, void* y, const void* x, const void* w, const void* b, int64_t N, int C,
                               int OC) {
  if (!fp8_[l]) return be_.matmul_forward(y, x, w, b, int(N), C, OC);
  const Fp8Operand op = fp8_weight(w, N, C, OC);
  be_.matmul_forward_fp8(y, x, op.w, b, int(N), C, OC, op.copy);
}

void DecoderLM::linear_backward(BlockLinear l, void* dx, float* dw, float* db, const void* dy, const void* x,
                                const void* w, int64_t N, int C, int OC) {
  if (!fp8_[l]) return be_.matmul_backward(dx, dw, db, dy, x, w, int(N), C, OC);
  const Fp8Operand op = fp8_weight(w, N, C, OC);  // the weight gradient alone reads neither
  be_.matmul_backward_fp8(dx, dw, db, dy, x, op.w, int(N), C, OC, dx ? op.copy : nullptr);
}

void DecoderLM::column_parallel_backward(BlockLinear l, void* dx_local, float* dw, float* db, const void* dout, const void* x_local,
                                         const void* w, const SequenceActs& sq, int64_t N, int C, int OC,
                                         const std::function<void()>& dw_begin, const std::function<void()>& dw_end,
                                         const DxExtra& dx_extra) {
  const TensorParallel::Pending gather = tp_.start_gather_from_sequence_region(x_local, sq.full, N, C);
  void* dx = tp_.partial_sums(dx_local, sq.partial);  // (N, C) this rank's part
  linear_backward(l, dx, nullptr, nullptr, dout, nullptr, w, N, C, OC);
  const void* x = nullptr;
  if (dx_extra) {  // the adapters read the full input: the gather is finished first
    x = tp_.finish(gather);
    dx_extra(dx, x);
  }
  const TensorParallel::Pending reduce = tp_.start_reduce_to_sequence_region(dx, dx_local, N, C);
  if (!dx_extra) x = tp_.finish(gather);  // (N, C)
  if (dw) {
    if (dw_begin) dw_begin();
    linear_backward(l, nullptr, dw, db, dout, x, w, N, C, OC);
    if (dw_end) dw_end();
  }
  tp_.finish(reduce);
}

std::vector<ActSlot> DecoderLM::head_slots(HeadActs& h, int64_t max_batch, int64_t seq_len, int64_t C, int64_t Vl,
                                           bool frozen) {
  const double R = double(head_chunk_rows(max_batch * seq_len, C, Vl)), B = double(max_batch);
  return {{&h.logits, nullptr, R * double(Vl)},
          {&h.last_x, nullptr, B * double(C)},
          {&h.last, nullptr, B * double(Vl)},
          {nullptr, &h.dw, frozen ? 0.0 : double(Vl) * double(C)}};
}

int64_t DecoderLM::head_chunk_rows(int64_t BT, int64_t C, int64_t Vl) {
  static const int64_t forced = [] {
    const char* v = std::getenv("ZTRAIN_HEAD_CHUNK_ROWS");  // for tests; empty or not a count: unset
    return v ? std::max<int64_t>(0, std::atoll(v)) : int64_t(0);
  }();
  if (forced > 0) return std::min(BT, forced);
  // A chunk about the size of one (BT, C) activation, as Liger's fused linear cross-entropy; but
  // at least 1024 rows: each chunk reads and writes the (Vl, C) fp32 weight gradient once, and a
  // K of 1024 keeps that GEMM bound by its arithmetic rather than by that traffic on a GPU.
  const int64_t chunks = std::max<int64_t>(1, (Vl + C - 1) / C), rows = (BT + chunks - 1) / chunks;
  return std::min(BT, std::max<int64_t>(1024, (rows + 63) / 64 * 64));
}

void DecoderLM::head_forward(const HeadActs& h, const void* x, const void* W, const int32_t* targets, int C, int Vl,
                             float grad_scale, void* dx) {
  const int64_t BT = int64_t(cur_B_) * cur_T_;
  last_logits_ready_ = !targets;
  if (!targets) {  // inference: each sequence's last row, gathered, then its logits
    for (int b = 0; b < cur_B_; ++b)
      be_.copy_device(el(h.last_x, int64_t(b) * C), el(const_cast<void*>(x), (int64_t(b) * cur_T_ + cur_T_ - 1) * C),
                      size_t(C) * esize_);
    be_.matmul_forward(h.last, h.last_x, W, nullptr, cur_B_, C, Vl);
    return;
  }
  const bool grads = grad_scale != 0.0f;
  float* dw = frozen() ? nullptr : h.dw;  // a frozen head: its input gradient only
  loss_.begin();
  if (dw) be_.fill_zero(dw, size_t(Vl) * C * sizeof(float));
  const int64_t R = head_chunk_rows(BT, C, Vl);
  for (int64_t r0 = 0; r0 < BT; r0 += R) {
    const int n = int(std::min(R, BT - r0));
    const void* xr = el(const_cast<void*>(x), r0 * C);
    be_.matmul_forward(h.logits, xr, W, nullptr, n, C, Vl);                          // (n, Vl)
    loss_.forward(h.logits, targets + r0, n, Vl, vocab_.real_local(), grad_scale);  // now dlogits, with grads
    if (grads) be_.matmul_backward(el(dx, r0 * C), dw, nullptr, h.logits, xr, W, n, C, Vl);
  }
}

void DecoderLM::last_logits_row(const HeadActs& h, int Vl, int b, int t, float* out) const {
  ZT_CHECK(last_logits_ready_ && b >= 0 && b < cur_B_ && t == cur_T_ - 1,
           "logits_row({}, {}): only the last position of each sequence, after a forward without targets, has "
           "logits (the training head makes them a chunk at a time)",
           b, t);
  vocab_.logits_row(static_cast<const char*>(h.last) + int64_t(b) * Vl * int64_t(esize_), out);
}

}  // namespace zt
