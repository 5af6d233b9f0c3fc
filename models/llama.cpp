// Llama forward/backward over the op interface (see llama.h for the parameter table).
#include "models/llama.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/status.h"
#include "engine/model/decoder_pass.h"

namespace zt {

Llama::Widths Llama::widths(const LlamaConfig& cfg, int tp) {
  const int64_t hs = cfg.head_size();
  Widths w;
  w.q = int64_t(cfg.n_head / tp) * hs;
  w.kv = int64_t(std::max(1, cfg.n_kv_head / tp)) * hs;  // one replicated head when tp > n_kv_head
  w.qkv = w.q + 2 * w.kv;
  w.f = cfg.d_ff / tp;
  w.v = cfg.vocab_held() / tp;
  return w;
}

Llama::Llama(const LlamaConfig& cfg, Backend& backend, int max_batch, Comm* tp)
    : DecoderLM(backend, max_batch, tp, cfg.seq_len, cfg.d_model, cfg.vocab_size, cfg.vocab_held(),
                cfg.sequence_parallel),
      cfg_(cfg),
      head_norm_grads_(backend, tp_, cfg.qk_norm ? cfg.head_size() : 0, /*per_head=*/true) {
  const int TP = tp_.size();
  ZT_CHECK(cfg.n_head % cfg.n_kv_head == 0 && cfg.n_head % TP == 0 && cfg.d_ff % TP == 0 &&
               (cfg.n_kv_head % TP == 0 || TP % cfg.n_kv_head == 0) && cfg.vocab_held() % TP == 0 &&
               cfg.head_size() % 2 == 0,
           "llama: heads {} / {}, d_ff {}, vocab {}, head size {} do not fit tensor parallelism {}", cfg.n_head,
           cfg.n_kv_head, cfg.d_ff, cfg.vocab_held(), cfg.head_size(), TP);
  const int64_t C = cfg.d_model, V = cfg.vocab_held(), F = cfg.d_ff;
  const int64_t hs = cfg.head_size(), Q = int64_t(cfg.n_head) * hs, KV = int64_t(cfg.n_kv_head) * hs;
  w_ = widths(cfg, TP);
  NH_l_ = cfg.n_head / TP;
  NKV_l_ = std::max(1, cfg.n_kv_head / TP);
  kv_replicas_ = TP > cfg.n_kv_head ? TP / cfg.n_kv_head : 1;
  const float std0 = 0.02f;  // Hugging Face's initializer_range for every matrix
  const auto None = TpSplit::None, Rows = TpSplit::Rows, Cols = TpSplit::Cols;
  ParamTable& t = table_;
  t.add("model.embed_tokens.weight", {V, C}, Rows, 1, true, std0, 0, cfg.vocab_size);  // vocabulary-parallel
  t.end_group("embeddings");
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    t.add(h + "input_layernorm.weight", {C}, None, 1, false, 0, 1);
    t.add(h + "self_attn.q_proj.weight", {Q, C}, Rows, 1, true, std0, 0);  // column-parallel by heads
    t.add(h + "self_attn.k_proj.weight", {KV, C}, Rows, 1, true, std0, 0, -1, kv_replicas_);
    t.add(h + "self_attn.v_proj.weight", {KV, C}, Rows, 1, true, std0, 0, -1, kv_replicas_);
    if (cfg.qkv_bias) {  // split as their weights' rows
      t.add(h + "self_attn.q_proj.bias", {Q}, Rows, 1, false, 0, 0);
      t.add(h + "self_attn.k_proj.bias", {KV}, Rows, 1, false, 0, 0, -1, kv_replicas_);
      t.add(h + "self_attn.v_proj.bias", {KV}, Rows, 1, false, 0, 0, -1, kv_replicas_);
    }
    t.add(h + "self_attn.o_proj.weight", {C, Q}, Cols, 1, true, std0, 0);  // row-parallel
    if (cfg.qk_norm) {  // replicated: every rank's heads use the whole weight
      t.add(h + "self_attn.q_norm.weight", {hs}, None, 1, false, 0, 1);
      t.add(h + "self_attn.k_norm.weight", {hs}, None, 1, false, 0, 1);
    }
    t.add(h + "post_attention_layernorm.weight", {C}, None, 1, false, 0, 1);
    t.add(h + "mlp.gate_proj.weight", {F, C}, Rows, 1, true, std0, 0);  // column-parallel
    t.add(h + "mlp.up_proj.weight", {F, C}, Rows, 1, true, std0, 0);
    t.add(h + "mlp.down_proj.weight", {C, F}, Cols, 1, true, std0, 0);  // row-parallel
    t.end_group("layers." + std::to_string(l));
  }
  t.add("model.norm.weight", {C}, None, 1, false, 0, 1);
  if (!cfg.tie_embeddings) t.add("lm_head.weight", {V, C}, Rows, 1, true, std0, 0, cfg.vocab_size);
  t.end_group("head");

  act_buf_ = carve_activations(be_, activation_slots(cfg, max_batch, TP, acts_));
  if (cfg.lora.enabled()) {
    std::vector<std::vector<LoraSite>> sites;
    for (int l = 0; l < cfg.n_layer; ++l) sites.push_back(lora_sites(cfg, l, kv_replicas_));
    lora_ = std::make_unique<LoraAdapters>(be_, tp_, cfg.lora, sites, int64_t(max_batch) * cfg.seq_len);
  }
  if (kv_replicas_ > 1) {
    const int64_t n = kv_grad_numel(), pieces = TP / kv_replicas_;
    kv_saved_ = static_cast<float*>(be_.alloc(size_t(n) * sizeof(float), MemTag::Grads));
    kv_sum_ = static_cast<float*>(be_.alloc(size_t(n * pieces) * sizeof(float), MemTag::CommBuffers));
  }
}

std::vector<LoraSite> Llama::lora_sites(const LlamaConfig& cfg, int l, int kv_replicas) {
  const int64_t C = cfg.d_model, F = cfg.d_ff, hs = cfg.head_size(), Q = cfg.n_head * hs, KV = cfg.n_kv_head * hs;
  const int64_t shapes[][2] = {{Q, C}, {KV, C}, {KV, C}, {C, Q}, {F, C}, {F, C}, {C, F}};  // (out, in)
  const char* modules[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
  std::vector<LoraSite> sites;
  for (int r = kQ; r <= kDown; ++r)  // o and down are row-parallel; k and v replicated as their heads
    sites.push_back({lora_roles()[size_t(r)], "model.layers." + std::to_string(l) + "." + modules[r], shapes[r][1],
                     shapes[r][0], r == kO || r == kDown ? TpSplit::Cols : TpSplit::Rows, 1,
                     r == kK || r == kV ? kv_replicas : 1});
  return sites;
}

std::vector<ActSlot> Llama::activation_slots(const LlamaConfig& cfg, int max_batch, int tp, Acts& a) {
  // Activations for the largest batch, carved from one allocation (this rank's widths).
  const Widths w = widths(cfg, tp);
  const double C = cfg.d_model, T = cfg.seq_len, L = cfg.n_layer, B = max_batch, BT = B * T;
  const double Wq = double(w.q), Wqkv = double(w.qkv), Fl = double(w.f), NH = cfg.n_head / tp;
  // the sequence region's (B,T,C) tensors: R = BT/TP rows of them with sequence parallelism
  const double R = double(seq_rows_of(cfg.sequence_parallel, tp, int64_t(max_batch) * cfg.seq_len));
  // layers of slots: Lw for what full recompute drops, Ln for what selective drops too (the
  // norm outputs and the SwiGLU output)
  const double Lw = cfg.recompute == Recompute::Full ? 1 : L, Ln = cfg.recompute == Recompute::None ? L : 1;
  // qk_norm keeps the projection before the norm and each head's rstd (none without it)
  const double Lq = cfg.qk_norm ? Lw : 0, NQK = NH + std::max(1, cfg.n_kv_head / tp);
  std::vector<ActSlot> slots = {
      {&a.encoded, nullptr, R * C},
      {&a.ln1, nullptr, Ln * R * C},       {nullptr, &a.rstd1, Ln * R},
      // with qk_norm the projection is kept and q|k as attention reads them are redone in backward
      {&a.qkv, nullptr, (cfg.qk_norm ? 1 : Lw) * BT * Wqkv},
      {&a.qkv_raw, nullptr, Lq * BT * Wqkv}, {nullptr, &a.qk_rstd, Lq * BT * NQK},
      {&a.atty, nullptr, Lw * BT * Wq},    {nullptr, &a.lse, Lw * B * NH * T},
      {&a.attproj, nullptr, Lw * R * C},   {&a.res2, nullptr, Lw * R * C},
      {&a.ln2, nullptr, Ln * R * C},       {nullptr, &a.rstd2, Ln * R},
      {&a.gate_up, nullptr, Lw * BT * 2 * Fl}, {&a.act, nullptr, Ln * BT * Fl},
      {&a.mlp, nullptr, Lw * R * C},       {&a.res3, nullptr, L * R * C},
      {&a.lnf, nullptr, R * C},            {nullptr, &a.lnf_rstd, R},
      {&a.dres, nullptr, R * C},           {&a.dln, nullptr, R * C},         {&a.dqkv, nullptr, BT * Wqkv},
      {&a.datty, nullptr, BT * Wq},        {&a.dgate_up, nullptr, BT * 2 * Fl}, {&a.dact, nullptr, BT * Fl}};
  for (const ActSlot& h : head_slots(a.head, max_batch, cfg.seq_len, cfg.d_model, w.v, cfg.lora.enabled()))
    slots.push_back(h);
  for (const ActSlot& q : sequence_slots(a.seq, cfg.sequence_parallel, tp, int64_t(max_batch) * cfg.seq_len, cfg.d_model))
    slots.push_back(q);
  return slots;
}

double Llama::activation_footprint(const LlamaConfig& cfg, int max_batch, int tp, size_t compute_size) {
  Acts unused{};
  return activation_bytes(activation_slots(cfg, max_batch, tp, unused), compute_size);
}

Llama::~Llama() {
  if (kv_saved_) be_.free(kv_saved_);
  if (kv_sum_) be_.free(kv_sum_);
}

std::string Llama::describe() const {
  const RopeScaling& r = cfg_.rope_scaling;
  return fmt::format("{} {} layers, d_model {}, {} heads ({} key/value){}, d_ff {}, seq_len {}, vocab {}{}{}{}{}{}{}",
                     cfg_.family, cfg_.n_layer, cfg_.d_model, cfg_.n_head, cfg_.n_kv_head,
                     cfg_.head_dim > 0 ? fmt::format(" of width {}", cfg_.head_dim) : "", cfg_.d_ff, cfg_.seq_len,
                     cfg_.vocab_size, cfg_.qkv_bias ? ", q/k/v biases" : "", cfg_.qk_norm ? ", q/k norms" : "",
                     r.factor > 0 ? fmt::format(", RoPE scaled (llama3: factor {:g}, frequency factors {:g}/{:g}, "
                                                "original {:g} positions)", r.factor, r.low_freq_factor,
                                                r.high_freq_factor, r.original_positions)
                                  : "",
                     cfg_.vocab_held() > cfg_.vocab_size ? fmt::format(" (held as {})", cfg_.vocab_held()) : "",
                     cfg_.tie_embeddings ? ", tied head" : "", recompute_note(cfg_.recompute),
                     tp_.sequence_parallel() ? ", sequence-parallel" : "") + fp8_note();
}

std::array<DecoderLM::LinearShape, DecoderLM::kBlockLinears> Llama::block_linears() const {
  const int64_t C = cfg_.d_model, F = cfg_.d_ff, q = int64_t(cfg_.n_head) * cfg_.head_size(),
                kv = int64_t(cfg_.n_kv_head) * cfg_.head_size();
  const size_t o = o_tensor(), norm2 = norm2_tensor();
  return {{{"q|k|v", q + 2 * kv, C, w_.qkv, C, 1},
           {"o", C, q, C, w_.q, o},
           {"gate|up", 2 * F, C, 2 * w_.f, C, norm2 + 1},
           {"down", C, F, C, w_.f, norm2 + 3}}};
}

template <typename P>
Llama::BlockParams<P> Llama::block_params(P g, int l) const {
  const size_t first = table_.groups()[1 + l].first_param;  // the block's tensors, in table order
  auto p = [&](size_t k) { return at(g, first + k); };
  const size_t o = o_tensor(), norm2 = norm2_tensor();
  // q (k, v follow), o, norm2, gate (up follows), down; the q bias (k's and v's follow), the norms
  return {p(0), p(1), p(o), p(norm2), p(norm2 + 1), p(norm2 + 3),
          cfg_.qkv_bias ? p(4) : P{}, cfg_.qk_norm ? p(o + 1) : P{}, cfg_.qk_norm ? p(o + 2) : P{}};
}

Llama::BlockActs Llama::block_acts(int l) const {
  const Acts& a = acts_;
  const int64_t BT = int64_t(cur_B_) * cur_T_, R = tp_.seq_rows(BT), C = cfg_.d_model, Fl = w_.f;
  const int64_t w = cfg_.recompute == Recompute::Full ? 0 : l;  // the slot of what full recompute drops
  const int64_t n = cfg_.recompute == Recompute::None ? l : 0;  // and of what selective drops
  const int64_t q = cfg_.qk_norm ? w : 0;  // the slots of qk_norm's layers, empty without it
  const int64_t qkv = cfg_.qk_norm ? 0 : w;  // qk_norm: q|k|v as attention reads them, one slot
  return {el(a.ln1, n * R * C),          a.rstd1 + n * R,
          el(a.qkv, qkv * BT * w_.qkv),  el(a.qkv_raw, q * BT * w_.qkv), a.qk_rstd + q * BT * (NH_l_ + NKV_l_),
          el(a.atty, w * BT * w_.q),     a.lse + w * BT * NH_l_,
          el(a.attproj, w * R * C),      el(a.res2, w * R * C),       el(a.ln2, n * R * C),
          a.rstd2 + n * R,               el(a.gate_up, w * BT * 2 * Fl), el(a.act, n * BT * Fl),
          el(a.mlp, w * R * C),          el(a.res3, l * R * C)};
}

void Llama::recompute_block(int l, const BlockParams<void*>& w, const void* in) {
  // The same ops on the same inputs: the same values, bit for bit.
  const int64_t BT = int64_t(cur_B_) * cur_T_, R = tp_.seq_real_rows(BT);  // R: the norms' rows here
  const int C = cfg_.d_model;
  const BlockActs x = block_acts(l);
  if (cfg_.recompute == Recompute::Full) {
    block_forward(l, w, in, nullptr, nullptr);
    return;
  }
  if (cfg_.qk_norm) attention_input(x, w);  // its one slot holds the last block's
  if (cfg_.recompute == Recompute::Selective) {
    be_.rmsnorm_forward(x.ln1, x.rstd1, in, w.norm1, R, C, cfg_.norm_eps);
    be_.rmsnorm_forward(x.ln2, x.rstd2, x.res2, w.norm2, R, C, cfg_.norm_eps);
    be_.swiglu_forward(x.act, x.gate_up, BT, int(w_.f));
  }
}

void Llama::attention_input(const BlockActs& x, const BlockParams<void*>& w) {
  const int B = cur_B_, T = cur_T_, hs = cfg_.head_size();
  const int64_t BT = int64_t(B) * T;
  if (cfg_.qk_norm) {  // each q and k head normed before the rotation; v as projected
    be_.copy_device(x.qkv, x.qkv_raw, size_t(BT * w_.qkv) * esize_);
    be_.head_rmsnorm_forward(x.qkv, x.qk_rstd, x.qkv_raw, w.q_norm, BT, NH_l_, hs, w_.qkv, cfg_.norm_eps);
    be_.head_rmsnorm_forward(el(x.qkv, w_.q), x.qk_rstd + BT * NH_l_, el(x.qkv_raw, w_.q), w.k_norm, BT, NKV_l_, hs,
                             w_.qkv, cfg_.norm_eps);
  }
  // q and k heads are adjacent in each row: one rotation covers both
  const int32_t* pos = tokens_.current().positions;  // packed documents: each token at its place in its own
  be_.rope(x.qkv, B, T, NH_l_ + NKV_l_, hs, w_.qkv, cfg_.rope_theta, false, pos, cfg_.rope_scaling);
}

void Llama::block_forward(int l, const BlockParams<void*>& w, const void* in_a, const void* in_b, void* in_sum) {
  const int B = cur_B_, T = cur_T_, C = cfg_.d_model;
  const int64_t BT = int64_t(B) * T, R = tp_.seq_real_rows(BT);  // all rows; the sequence region's here
  const float eps = cfg_.norm_eps;
  const BlockActs x = block_acts(l);
  const SequenceActs& sq = acts_.seq;
  // The residual add that ends the previous block is fused with this block's first norm.
  if (!in_b) be_.rmsnorm_forward(x.ln1, x.rstd1, in_a, w.norm1, R, C, eps);
  else be_.residual_rmsnorm_forward(in_sum, x.ln1, x.rstd1, in_a, in_b, w.norm1, R, C, eps);
  const void* residual = in_b ? in_sum : in_a;
  const void* ln1 = tp_.gather_from_sequence_region(x.ln1, sq.full, BT, C);  // (B,T,C)
  // (B,T,Wqkv) this rank's heads
  void* qkv = cfg_.qk_norm ? x.qkv_raw : x.qkv;
  linear_forward(kQkvLinear, qkv, ln1, w.qkv, w.qkv_bias, BT, C, int(w_.qkv));
  if (lora_) {  // each projection's adapter into its columns of the packed [q | k | v]
    lora_->forward(l, kQ, ln1, qkv, w_.qkv, BT);
    lora_->forward(l, kK, ln1, el(qkv, w_.q), w_.qkv, BT);
    lora_->forward(l, kV, ln1, el(qkv, w_.q + w_.kv), w_.qkv, BT);
  }
  attention_input(x, w);
  const int32_t* pos = tokens_.current().positions;  // packed documents: each attends within itself
  be_.attention_forward(x.atty, x.lse, x.qkv, B, T, int(w_.q), NH_l_, NKV_l_, pos);  // (B,T,Wq)
  void* attproj = tp_.partial_sums(x.attproj, sq.partial);
  linear_forward(kOLinear, attproj, x.atty, w.o, nullptr, BT, int(w_.q), C);  // row-parallel
  if (lora_) lora_->forward(l, kO, x.atty, attproj, C, BT);
  tp_.reduce_to_sequence_region(attproj, x.attproj, BT, C);
  be_.residual_rmsnorm_forward(x.res2, x.ln2, x.rstd2, residual, x.attproj, w.norm2, R, C, eps);
  const void* ln2 = tp_.gather_from_sequence_region(x.ln2, sq.full, BT, C);
  linear_forward(kUpLinear, x.gate_up, ln2, w.gate_up, nullptr, BT, C, int(2 * w_.f));  // (B,T,2Fl) column-parallel
  if (lora_) {
    lora_->forward(l, kGate, ln2, x.gate_up, 2 * w_.f, BT);
    lora_->forward(l, kUp, ln2, el(x.gate_up, w_.f), 2 * w_.f, BT);
  }
  be_.swiglu_forward(x.act, x.gate_up, BT, int(w_.f));
  void* mlp = tp_.partial_sums(x.mlp, sq.partial);
  linear_forward(kDownLinear, mlp, x.act, w.down, nullptr, BT, int(w_.f), C);  // row-parallel
  if (lora_) lora_->forward(l, kDown, x.act, mlp, C, BT);
  tp_.reduce_to_sequence_region(mlp, x.mlp, BT, C);
}

void Llama::forward_deferred(const int32_t* inputs, const int32_t* targets, const int32_t* positions, int B, int T,
                             float grad_scale) {
  begin_batch(B, T, cfg_.seq_len, "Llama", targets && grad_scale != 0.0f);
  const int C = cfg_.d_model, Vl = int(w_.v), L = cfg_.n_layer;
  const int64_t BT = int64_t(B) * T, R = tp_.seq_real_rows(BT);
  std::vector<int32_t> local_ids(BT);
  tp_.vocab_local_ids(inputs, BT, Vl, local_ids.data());
  const TokenSlots::Tokens tok = tokens_.upload(local_ids.data(), targets, positions, BT);
  Acts& a = acts_;
  const bool tied = cfg_.tie_embeddings;
  const size_t norm_i = tied ? table_.params().size() - 1 : table_.params().size() - 2;
  pass(L, tied).forward({
      [&](void* emb) {  // no positions: RoPE
        be_.embedding_forward(tp_.partial_sums(a.encoded, a.seq.partial), tok.inputs, emb, nullptr, B, T, C);
      },
      [&] { tp_.reduce_to_sequence_region(tp_.partial_sums(a.encoded, a.seq.partial), a.encoded, BT, C); },
      [&](int l, void* block) {
        const BlockParams<void*> w = block_params(block, l);
        if (l == 0) {
          block_forward(0, w, a.encoded, nullptr, nullptr);
        } else {
          const BlockActs prev = block_acts(l - 1);
          block_forward(l, w, prev.res2, prev.mlp, prev.res3);
        }
      },
      [&](void* hp) {
        if (L == 0) {
          be_.rmsnorm_forward(a.lnf, a.lnf_rstd, a.encoded, at(hp, norm_i), R, C, cfg_.norm_eps);
        } else {
          const BlockActs last = block_acts(L - 1);
          be_.residual_rmsnorm_forward(last.res3, a.lnf, a.lnf_rstd, last.res2, last.mlp, at(hp, norm_i), R, C,
                                       cfg_.norm_eps);
        }
      },
      [&](void* weights) {  // the embedding itself, or the head's own matrix after its norm; and the loss
        // dx: this rank's part over all rows, kept for backward
        head_forward(a.head, tp_.gather_from_sequence_region(a.lnf, a.seq.full, BT, C),
                     tied ? weights : at(weights, norm_i + 1), targets ? tok.targets : nullptr, C, Vl, grad_scale,
                     tp_.partial_sums(a.dln, a.seq.partial));
      }});
  grads_ready_ = targets && grad_scale != 0.0f;
  tokens_.mark_read();
}

int64_t Llama::kv_grad_numel() const { return 2 * w_.kv * cfg_.d_model + (cfg_.qkv_bias ? 2 * w_.kv : 0); }

void Llama::sum_replicated_kv_grads(float* kv_weight_grad, float* kv_bias_grad) {
  // The gradients hold exactly this rank's part (they were zeroed before the qkv backward, their
  // earlier contents saved in kv_saved_: weights then biases); the true gradient adds the parts
  // of every rank holding the same heads. Each rank puts its part in its piece's slot of kv_sum_
  // (zero elsewhere), one all-reduce over the tensor-parallel group sums each slot over its
  // replicas, and the saved accumulation is added back.
  const int64_t nw = 2 * w_.kv * cfg_.d_model, n = kv_grad_numel(), pieces = tp_.size() / kv_replicas_;
  const int64_t slot = int64_t(tp_.rank() / kv_replicas_) * n;
  be_.fill_zero(kv_sum_, size_t(n * pieces) * sizeof(float));
  be_.copy_device(kv_sum_ + slot, kv_weight_grad, size_t(nw) * sizeof(float));
  if (kv_bias_grad) be_.copy_device(kv_sum_ + slot + nw, kv_bias_grad, size_t(n - nw) * sizeof(float));
  tp_.group().all_reduce_sync(kv_sum_, size_t(n * pieces));
  be_.add(kv_weight_grad, kv_saved_, kv_sum_ + slot, nw);
  if (kv_bias_grad) be_.add(kv_bias_grad, kv_saved_ + nw, kv_sum_ + slot + nw, n - nw);
}

void Llama::block_backward(int l, const BlockParams<void*>& w, const BlockParams<float*>& g, const void* residual) {
  const int B = cur_B_, T = cur_T_, C = cfg_.d_model, hs = cfg_.head_size();
  const int64_t BT = int64_t(B) * T, R = tp_.seq_real_rows(BT), Fl = w_.f, Wq = w_.q, Wqkv = w_.qkv;
  Acts& a = acts_;
  const BlockActs x = block_acts(l);
  float* const* norm_g = seq_grads_.begin({g.norm2, g.norm1}, C);  // a part per rank with SP
  // MLP branch: res3 = res2 + down(silu(gate(ln2)) * up(ln2))
  // (activation gradients with one writer are written, not zero-filled and accumulated)
  const void* dres = tp_.gather_from_sequence_region(a.dres, a.seq.full, BT, C);  // (B,T,C)
  linear_backward(kDownLinear, a.dact, g.down, nullptr, dres, x.act, w.down, BT, int(Fl), C);
  if (lora_) lora_->backward_into(l, kDown, x.act, dres, C, BT, a.dact);
  be_.swiglu_backward(a.dgate_up, x.gate_up, a.dact, BT, int(Fl));
  // column-parallel: the input gradient is the sum of the ranks' parts
  DxExtra gate_up_adapters;
  if (lora_)
    gate_up_adapters = [&](void* dx, const void* ln2) {
      lora_->backward_into(l, kGate, ln2, a.dgate_up, 2 * Fl, BT, dx);
      lora_->backward_into(l, kUp, ln2, el(a.dgate_up, Fl), 2 * Fl, BT, dx);
    };
  column_parallel_backward(kUpLinear, a.dln, g.gate_up, nullptr, a.dgate_up, x.ln2, w.gate_up, a.seq, BT, C, int(2 * Fl), {}, {},
                           gate_up_adapters);
  be_.rmsnorm_backward(a.dres, norm_g[0], a.dln, x.res2, w.norm2, x.rstd2, R, C);
  // Attention branch: res2 = residual + o(attn(rope(qkv(ln1))))
  dres = tp_.gather_from_sequence_region(a.dres, a.seq.full, BT, C);
  linear_backward(kOLinear, a.datty, g.o, nullptr, dres, x.atty, w.o, BT, int(Wq), C);
  if (lora_) lora_->backward_into(l, kO, x.atty, dres, C, BT, a.datty);
  const int32_t* pos = tokens_.current().positions;
  be_.attention_backward(a.dqkv, a.datty, x.atty, x.qkv, x.lse, B, T, int(Wq), NH_l_, NKV_l_, pos);
  be_.rope(a.dqkv, B, T, NH_l_ + NKV_l_, hs, Wqkv, cfg_.rope_theta, true, pos, cfg_.rope_scaling);  // through the rotation
  if (cfg_.qk_norm) {  // through each head's norm, in place; the weights' gradients a part per rank
    float* const* ng = head_norm_grads_.begin({g.q_norm, g.k_norm}, hs);
    be_.head_rmsnorm_backward(a.dqkv, ng[0], a.dqkv, x.qkv_raw, w.q_norm, x.qk_rstd, BT, NH_l_, hs, Wqkv);
    be_.head_rmsnorm_backward(el(a.dqkv, Wq), ng[1], el(a.dqkv, Wq), el(x.qkv_raw, Wq), w.k_norm,
                              x.qk_rstd + BT * NH_l_, BT, NKV_l_, hs, Wqkv);
    head_norm_grads_.end();
  }
  float* kv_grad = g.qkv ? g.qkv + Wq * C : nullptr;  // k_proj then v_proj rows follow q_proj's
  float* kv_bias_grad = g.qkv_bias ? g.qkv_bias + Wq : nullptr;  // and their biases q_proj's bias
  std::function<void()> kv_begin, kv_end;
  if (kv_replicas_ > 1 && kv_grad) {  // the weight gradient's GEMM then accumulates exactly this rank's part
    kv_begin = [&] {
      const int64_t nw = 2 * w_.kv * C;
      be_.copy_device(kv_saved_, kv_grad, size_t(nw) * sizeof(float));
      be_.fill_zero(kv_grad, size_t(nw) * sizeof(float));
      if (kv_bias_grad) {
        be_.copy_device(kv_saved_ + nw, kv_bias_grad, size_t(2 * w_.kv) * sizeof(float));
        be_.fill_zero(kv_bias_grad, size_t(2 * w_.kv) * sizeof(float));
      }
    };
    kv_end = [&] { sum_replicated_kv_grads(kv_grad, kv_bias_grad); };
  }
  DxExtra qkv_adapters;
  if (lora_)
    qkv_adapters = [&](void* dx, const void* ln1) {
      lora_->backward_into(l, kQ, ln1, a.dqkv, Wqkv, BT, dx);
      lora_->backward_into(l, kK, ln1, el(a.dqkv, Wq), Wqkv, BT, dx);
      lora_->backward_into(l, kV, ln1, el(a.dqkv, Wq + w_.kv), Wqkv, BT, dx);
    };
  column_parallel_backward(kQkvLinear, a.dln, g.qkv, g.qkv_bias, a.dqkv, x.ln1, w.qkv, a.seq, BT, C, int(Wqkv), kv_begin, kv_end,
                           qkv_adapters);
  be_.rmsnorm_backward(a.dres, norm_g[1], a.dln, residual, w.norm1, x.rstd1, R, C);
  seq_grads_.end();
}

void Llama::backward() {
  ZT_CHECK(grads_ready_, "backward() needs a forward() with targets and grad_scale != 0");
  const int B = cur_B_, T = cur_T_, C = cfg_.d_model, Vl = int(w_.v);
  const int64_t BT = int64_t(B) * T, R = tp_.seq_real_rows(BT);
  const size_t cs = esize_;
  Acts& a = acts_;
  const bool tied = cfg_.tie_embeddings;
  const size_t norm_i = tied ? table_.params().size() - 1 : table_.params().size() - 2;
  pass(cfg_.n_layer, tied).backward({
      // Head: forward left dln and the head's weight gradient; into the embedding's, or the head matrix's
      [&](float* g) { head_backward(a.head, tied ? g : at(g, norm_i + 1), C, Vl); },
      [&](void* hp, float* hg) {
        float* const* norm_g = seq_grads_.begin({at(hg, norm_i)}, C);
        // each rank's vocabulary slice contributed a part
        tp_.reduce_to_sequence_region(tp_.partial_sums(a.dln, a.seq.partial), a.dln, BT, C);
        be_.fill_zero(a.dres, size_t(tp_.seq_rows(BT) * C) * cs);
        const void* last = cfg_.n_layer > 0 ? block_acts(cfg_.n_layer - 1).res3 : a.encoded;
        be_.rmsnorm_backward(a.dres, norm_g[0], a.dln, last, at(hp, norm_i), a.lnf_rstd, R, C);
        seq_grads_.end();
      },
      [&](int l, void* block, float* grads) {
        const BlockParams<void*> w = block_params(block, l);
        const BlockParams<float*> g = block_params(grads, l);
        const void* in = l == 0 ? a.encoded : block_acts(l - 1).res3;
        recompute_block(l, w, in);
        block_backward(l, w, g, in);
      },
      [&](float* emb_g) {
        if (emb_g)  // none for a frozen embedding
          be_.embedding_backward(emb_g, nullptr, tp_.gather_from_sequence_region(a.dres, a.seq.full, BT, C),
                                 tokens_.current().inputs, B, T, C);
        tokens_.mark_read();
      }});
  grads_ready_ = false;
}

}  // namespace zt
