// DecoderLM (see decoder_lm.h).
#include "engine/model/decoder_lm.h"

#include <algorithm>

#include "engine/core/status.h"

namespace zt {

namespace {
int tp_size_of(Comm* tp) { return tp && tp->size() > 1 ? tp->size() : 1; }
int tp_rank_of(Comm* tp) { return tp && tp->size() > 1 ? tp->rank() : 0; }
}  // namespace

DecoderLM::DecoderLM(Backend& backend, int max_batch, Comm* tp, int seq_len, int d_model, int vocab_size,
                     int vocab_held)
    : be_(backend),
      max_batch_(max_batch),
      tp_(backend, tp, int64_t(max_batch) * seq_len * std::max<int64_t>(d_model, vocab_held / tp_size_of(tp))),
      table_(tp_size_of(tp), tp_rank_of(tp)),
      esize_(backend.compute_size()),
      tokens_(backend, int64_t(max_batch) * seq_len),
      loss_(backend, tp_, int64_t(max_batch) * seq_len),
      vocab_(backend, tp_, vocab_size, vocab_held) {}

DecoderLM::~DecoderLM() { be_.free(act_buf_); }

void DecoderLM::begin_batch(int B, int T, int seq_len, const char* model) {
  ZT_CHECK(B >= 1 && B <= max_batch_ && T >= 1 && T <= seq_len, "batch ({}, {}) exceeds ({}, {})", B, T, max_batch_,
           seq_len);
  ZT_CHECK(prov_ != nullptr, "{} has no ParamProvider", model);
  cur_B_ = B;
  cur_T_ = T;
}

}  // namespace zt
