// GPT-2 forward/backward over the op interface (see gpt2.h for the parameter table).
#include "models/gpt2.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/status.h"
#include "engine/model/activation_arena.h"
#include "engine/model/decoder_pass.h"

namespace zt {

GPT2::GPT2(const GPT2Config& cfg, Backend& backend, int max_batch, Comm* tp)
    : DecoderLM(backend, max_batch, tp, cfg.seq_len, cfg.d_model, cfg.vocab_size, cfg.vocab_held(),
                cfg.sequence_parallel),
      cfg_(cfg) {
  const int TP = tp_.size();
  ZT_CHECK(cfg.n_head % TP == 0 && cfg.d_ff % TP == 0 && cfg.vocab_held() % TP == 0 &&
               cfg.vocab_held() >= cfg.vocab_size,
           "tensor parallelism {} does not divide heads {}, d_ff {}, vocab {} (padded {})", TP, cfg.n_head, cfg.d_ff,
           cfg.vocab_size, cfg.vocab_held());
  const int64_t C = cfg.d_model, V = cfg.vocab_held(), T = cfg.seq_len, F = cfg.d_ff;
  NH_l_ = cfg.n_head / TP;
  C_l_ = int(C / TP);  // attention width of this rank's heads: NH_l * hs
  F_l_ = int(F / TP);
  V_l_ = int(V / TP);
  const float std0 = 0.02f;
  // GPT-2 scales the init of the projections that write into the residual stream by
  // 1/sqrt(2 * n_layer): each block adds two such contributions.
  const float std_resid = 0.02f / std::sqrt(2.0f * cfg.n_layer);
  const auto None = TpSplit::None, Rows = TpSplit::Rows, Cols = TpSplit::Cols;
  ParamTable& t = table_;
  t.add("transformer.wte.weight", {V, C}, Rows, 1, true, std0, 0, cfg.vocab_size);  // vocabulary-parallel
  t.add("transformer.wpe.weight", {T, C}, None, 1, true, std0, 0);
  t.end_group("embeddings");
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    t.add(h + "ln_1.weight", {C}, None, 1, false, 0, 1);
    t.add(h + "ln_1.bias", {C}, None, 1, false, 0, 0);
    t.add(h + "attn.c_attn.weight", {3 * C, C}, Rows, 3, true, std0, 0);  // column-parallel, q|k|v
    t.add(h + "attn.c_attn.bias", {3 * C}, Rows, 3, false, 0, 0);
    t.add(h + "attn.c_proj.weight", {C, C}, Cols, 1, true, std_resid, 0);  // row-parallel
    t.add(h + "attn.c_proj.bias", {C}, None, 1, false, 0, 0);
    t.add(h + "ln_2.weight", {C}, None, 1, false, 0, 1);
    t.add(h + "ln_2.bias", {C}, None, 1, false, 0, 0);
    t.add(h + "mlp.c_fc.weight", {F, C}, Rows, 1, true, std0, 0);  // column-parallel
    t.add(h + "mlp.c_fc.bias", {F}, Rows, 1, false, 0, 0);
    t.add(h + "mlp.c_proj.weight", {C, F}, Cols, 1, true, std_resid, 0);  // row-parallel
    t.add(h + "mlp.c_proj.bias", {C}, None, 1, false, 0, 0);
    t.end_group("h." + std::to_string(l));
  }
  t.add("transformer.ln_f.weight", {C}, None, 1, false, 0, 1);
  t.add("transformer.ln_f.bias", {C}, None, 1, false, 0, 0);
  t.end_group("ln_f");

  act_buf_ = carve_activations(be_, activation_slots(cfg, max_batch, TP, acts_));
  if (cfg.lora.enabled()) {  // nn.Linear shapes (out, in) of the layers the roles name
    std::vector<std::vector<LoraSite>> sites;
    for (int l = 0; l < cfg.n_layer; ++l) sites.push_back(lora_sites(cfg, l));
    lora_ = std::make_unique<LoraAdapters>(be_, tp_, cfg.lora, sites, int64_t(max_batch) * cfg.seq_len);
  }
}

std::vector<LoraSite> GPT2::lora_sites(const GPT2Config& cfg, int l) {
  const int64_t C = cfg.d_model, F = cfg.d_ff;
  const std::string h = "transformer.h." + std::to_string(l) + ".";
  return {{"qkv", h + "attn.c_attn", C, 3 * C, TpSplit::Rows, 3}, {"o", h + "attn.c_proj", C, C, TpSplit::Cols},
          {"up", h + "mlp.c_fc", C, F, TpSplit::Rows}, {"down", h + "mlp.c_proj", F, C, TpSplit::Cols}};
}

std::vector<ActSlot> GPT2::activation_slots(const GPT2Config& cfg, int max_batch, int tp, Acts& a) {
  // Activations for the largest batch, carved from one allocation. With tensor parallelism the
  // attention (Ca = C/TP), MLP (Fl = F/TP) and logits (Vl = V/TP) activations are this rank's part,
  // and with sequence parallelism the sequence region's (B,T,C) ones R = BT/TP rows of it.
  const double C = cfg.d_model, T = cfg.seq_len, L = cfg.n_layer, B = max_batch, BT = B * T, TP = tp;
  const double R = double(seq_rows_of(cfg.sequence_parallel, tp, int64_t(max_batch) * cfg.seq_len));
  const double Ca = C / TP, Fl = double(cfg.d_ff) / TP, Vl = double(cfg.vocab_held()) / TP, NH = cfg.n_head / TP;
  // layers of slots: Lw for what full recompute drops, Ln for the norms selective drops too
  const double Lw = cfg.recompute == Recompute::Full ? 1 : L, Ln = cfg.recompute == Recompute::None ? L : 1;
  std::vector<ActSlot> slots = {
      {&a.encoded, nullptr, R * C},
      {&a.ln1, nullptr, Ln * R * C},       {nullptr, &a.ln1_mean, Ln * R},   {nullptr, &a.ln1_rstd, Ln * R},
      {&a.qkv, nullptr, Lw * BT * 3 * Ca}, {&a.atty, nullptr, Lw * BT * Ca}, {nullptr, &a.att_lse, Lw * B * NH * T},
      {&a.attproj, nullptr, Lw * R * C},   {&a.res2, nullptr, Lw * R * C},
      {&a.ln2, nullptr, Ln * R * C},       {nullptr, &a.ln2_mean, Ln * R},   {nullptr, &a.ln2_rstd, Ln * R},
      {&a.fch, nullptr, Lw * BT * Fl},     {&a.fch_gelu, nullptr, Lw * BT * Fl},
      {&a.fcproj, nullptr, Lw * R * C},    {&a.res3, nullptr, L * R * C},
      {&a.lnf, nullptr, R * C},            {nullptr, &a.lnf_mean, R},        {nullptr, &a.lnf_rstd, R},
      {&a.dres, nullptr, R * C},           {&a.dln, nullptr, R * C},         {&a.dqkv, nullptr, BT * 3 * Ca},
      {&a.datty, nullptr, BT * Ca},        {&a.dfch, nullptr, BT * Fl}};
  for (const ActSlot& h : head_slots(a.head, max_batch, cfg.seq_len, cfg.d_model, int64_t(Vl), cfg.lora.enabled()))
    slots.push_back(h);
  for (const ActSlot& q : sequence_slots(a.seq, cfg.sequence_parallel, tp, int64_t(max_batch) * cfg.seq_len, cfg.d_model))
    slots.push_back(q);
  return slots;
}

double GPT2::activation_footprint(const GPT2Config& cfg, int max_batch, int tp, size_t compute_size) {
  Acts unused{};
  return activation_bytes(activation_slots(cfg, max_batch, tp, unused), compute_size);
}

std::string GPT2::describe() const {
  return fmt::format("gpt2 {} layers, d_model {}, {} heads, seq_len {}, vocab {}{}{}{}", cfg_.n_layer, cfg_.d_model,
                     cfg_.n_head, cfg_.seq_len, cfg_.vocab_size,
                     cfg_.vocab_held() > cfg_.vocab_size ? fmt::format(" (held as {})", cfg_.vocab_held()) : "",
                     recompute_note(cfg_.recompute), tp_.sequence_parallel() ? ", sequence-parallel" : "") +
         fp8_note();
}

std::array<DecoderLM::LinearShape, DecoderLM::kBlockLinears> GPT2::block_linears() const {
  const int64_t C = cfg_.d_model, F = cfg_.d_ff;
  const int64_t Ca = C_l_, Fl = F_l_;  // this rank's heads' width and MLP columns
  return {{{"attn.c_attn", 3 * C, C, 3 * Ca, C, 2},  // the block's tensors: block_params' order
           {"attn.c_proj", C, C, C, Ca, 4},
           {"mlp.c_fc", F, C, Fl, C, 8},
           {"mlp.c_proj", C, F, C, Fl, 10}}};
}

template <typename P>
GPT2::BlockParams<P> GPT2::block_params(P g, int l) const {
  const size_t first = table_.groups()[1 + l].first_param;  // the block's 12 tensors, in table order
  auto p = [&](size_t k) { return at(g, first + k); };
  return {p(0), p(1), p(2), p(3), p(4), p(5), p(6), p(7), p(8), p(9), p(10), p(11)};
}

GPT2::BlockActs GPT2::block_acts(int l) const {
  const Acts& a = acts_;
  const int64_t BT = int64_t(cur_B_) * cur_T_, R = tp_.seq_rows(BT), C = cfg_.d_model, Ca = C_l_, Fl = F_l_;
  const int64_t w = cfg_.recompute == Recompute::Full ? 0 : l;  // the slot of what full recompute drops
  const int64_t n = cfg_.recompute == Recompute::None ? l : 0;  // and of the norms selective drops
  return {el(a.ln1, n * R * C),         a.ln1_mean + n * R,            a.ln1_rstd + n * R,
          el(a.qkv, w * BT * 3 * Ca),   el(a.atty, w * BT * Ca),       a.att_lse + w * BT * NH_l_,
          el(a.attproj, w * R * C),     el(a.res2, w * R * C),         el(a.ln2, n * R * C),
          a.ln2_mean + n * R,           a.ln2_rstd + n * R,            el(a.fch, w * BT * Fl),
          el(a.fch_gelu, w * BT * Fl),  el(a.fcproj, w * R * C),       el(a.res3, l * R * C)};
}

void GPT2::recompute_block(int l, const BlockParams<void*>& w, const void* in) {
  // The same ops on the same inputs: the same values, bit for bit (a fused residual norm and a
  // plain norm of its stored sum compute alike).
  const int64_t R = tp_.seq_real_rows(int64_t(cur_B_) * cur_T_);  // the norms' rows on this rank
  const int C = cfg_.d_model;
  const BlockActs x = block_acts(l);
  if (cfg_.recompute == Recompute::Full) {
    block_forward(l, w, in, nullptr, nullptr);
  } else if (cfg_.recompute == Recompute::Selective) {
    be_.layernorm_forward(x.ln1, x.ln1_mean, x.ln1_rstd, in, w.ln1w, w.ln1b, R, C, cfg_.norm_eps);
    be_.layernorm_forward(x.ln2, x.ln2_mean, x.ln2_rstd, x.res2, w.ln2w, w.ln2b, R, C, cfg_.norm_eps);
  }
}

void GPT2::block_forward(int l, const BlockParams<void*>& w, const void* in_a, const void* in_b, void* in_sum) {
  const int B = cur_B_, T = cur_T_, C = cfg_.d_model, Ca = C_l_, Fl = F_l_, NH = NH_l_;
  const int64_t BT = int64_t(B) * T, R = tp_.seq_real_rows(BT);  // all rows; the sequence region's here
  const BlockActs x = block_acts(l);
  const SequenceActs& sq = acts_.seq;
  // The residual add that ends the previous block is fused with this block's ln_1.
  if (!in_b) be_.layernorm_forward(x.ln1, x.ln1_mean, x.ln1_rstd, in_a, w.ln1w, w.ln1b, R, C, cfg_.norm_eps);
  else
    be_.residual_layernorm_forward(in_sum, x.ln1, x.ln1_mean, x.ln1_rstd, in_a, in_b, w.ln1w, w.ln1b, R, C,
                                   cfg_.norm_eps);
  const void* residual = in_b ? in_sum : in_a;
  const void* ln1 = tp_.gather_from_sequence_region(x.ln1, sq.full, BT, C);  // (B,T,C)
  linear_forward(kQkvLinear, x.qkv, ln1, w.qkvw, w.qkvb, BT, C, 3 * Ca);  // (B,T,3Ca) this rank's heads
  if (lora_) lora_->forward(l, kQkv, ln1, x.qkv, 3 * Ca, BT);
  // (B,T,Ca); with packed documents each attends within itself
  be_.attention_forward(x.atty, x.att_lse, x.qkv, B, T, Ca, NH, NH, tokens_.current().positions);
  void* attproj = tp_.partial_sums(x.attproj, sq.partial);
  linear_forward(kOLinear, attproj, x.atty, w.attprojw, tp_.once(w.attprojb), BT, Ca, C);  // row-parallel
  if (lora_) lora_->forward(l, kO, x.atty, attproj, C, BT);
  tp_.reduce_to_sequence_region(attproj, x.attproj, BT, C);
  be_.residual_layernorm_forward(x.res2, x.ln2, x.ln2_mean, x.ln2_rstd, residual, x.attproj, w.ln2w, w.ln2b, R, C,
                                 cfg_.norm_eps);
  const void* ln2 = tp_.gather_from_sequence_region(x.ln2, sq.full, BT, C);
  // the adapter adds to the pre-activation (GEMM, update, GELU); FP8's product has no fused GELU
  if ((lora_ && lora_->has(l, kUp)) || fp8(kUpLinear)) {
    linear_forward(kUpLinear, x.fch, ln2, w.fcw, w.fcb, BT, C, Fl);
    if (lora_) lora_->forward(l, kUp, ln2, x.fch, Fl, BT);
    be_.gelu_forward(x.fch_gelu, x.fch, BT * Fl);
  } else {
    be_.matmul_gelu_forward(x.fch_gelu, x.fch, ln2, w.fcw, w.fcb, BT, C, Fl);  // (B,T,Fl) column-parallel
  }
  void* fcproj = tp_.partial_sums(x.fcproj, sq.partial);
  linear_forward(kDownLinear, fcproj, x.fch_gelu, w.fcprojw, tp_.once(w.fcprojb), BT, Fl, C);  // row-parallel
  if (lora_) lora_->forward(l, kDown, x.fch_gelu, fcproj, C, BT);
  tp_.reduce_to_sequence_region(fcproj, x.fcproj, BT, C);
}

void GPT2::forward_deferred(const int32_t* inputs, const int32_t* targets, const int32_t* positions, int B, int T,
                            float grad_scale) {
  begin_batch(B, T, cfg_.seq_len, "GPT2", targets && grad_scale != 0.0f);
  const int C = cfg_.d_model, Vl = V_l_;
  const int64_t BT = int64_t(B) * T, R = tp_.seq_real_rows(BT);
  // Token ids as this rank's embedding rows (-1: another rank's slice); targets stay global.
  std::vector<int32_t> local_ids(BT);
  tp_.vocab_local_ids(inputs, BT, Vl, local_ids.data());
  const TokenSlots::Tokens tok = tokens_.upload(local_ids.data(), targets, positions, BT);
  Acts& a = acts_;
  const int L = cfg_.n_layer;
  const size_t wte_i = 0, wpe_i = 1, lnfw_i = table_.params().size() - 2, lnfb_i = table_.params().size() - 1;
  pass(L, /*tied=*/true).forward({
      // Vocabulary-parallel embedding: each rank adds its rows (and rank 0 the positions), then sum.
      [&](void* emb) {
        be_.embedding_forward(tp_.partial_sums(a.encoded, a.seq.partial), tok.inputs, at(emb, wte_i),
                              tp_.once(at(emb, wpe_i)), B, T, C, tok.positions);
      },
      [&] { tp_.reduce_to_sequence_region(tp_.partial_sums(a.encoded, a.seq.partial), a.encoded, BT, C); },
      // Each residual add is fused with the LayerNorm that reads its result: block l's attention
      // residual with its ln_2, block l's MLP residual with block l+1's ln_1 (or ln_f), which runs
      // at the start of block l+1 so that only that block's parameters are needed.
      [&](int l, void* block) {
        const BlockParams<void*> w = block_params(block, l);
        if (l == 0) {
          block_forward(0, w, a.encoded, nullptr, nullptr);
        } else {
          const BlockActs prev = block_acts(l - 1);
          block_forward(l, w, prev.res2, prev.fcproj, prev.res3);
        }
      },
      [&](void* lnf) {
        if (L == 0) {
          be_.layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, a.encoded, at(lnf, lnfw_i), at(lnf, lnfb_i), R, C,
                                cfg_.norm_eps);
        } else {
          const BlockActs last = block_acts(L - 1);
          be_.residual_layernorm_forward(last.res3, a.lnf, a.lnf_mean, a.lnf_rstd, last.res2, last.fcproj,
                                         at(lnf, lnfw_i), at(lnf, lnfb_i), R, C, cfg_.norm_eps);
        }
      },
      // the tied head and the loss, a chunk of rows at a time (with grad_scale: dln and the
      // head's part of dwte too; dx, this rank's part of it over all rows, stays for backward)
      [&](void* emb) {
        head_forward(a.head, tp_.gather_from_sequence_region(a.lnf, a.seq.full, BT, C), at(emb, wte_i),
                     targets ? tok.targets : nullptr, C, Vl, grad_scale, tp_.partial_sums(a.dln, a.seq.partial));
      }});
  grads_ready_ = targets && grad_scale != 0.0f;
  tokens_.mark_read();  // the token slot's last reader so far (backward moves it)
}

void GPT2::block_backward(int l, const BlockParams<void*>& w, const BlockParams<float*>& g, const void* residual) {
  const int B = cur_B_, T = cur_T_, C = cfg_.d_model, Ca = C_l_, Fl = F_l_, NH = NH_l_;
  const int64_t BT = int64_t(B) * T, R = tp_.seq_real_rows(BT);
  Acts& a = acts_;
  const BlockActs x = block_acts(l);
  float* const* norm_g = seq_grads_.begin({g.ln2w, g.ln2b, g.ln1w, g.ln1b}, C);  // a part per rank with SP
  // MLP branch: res3 = res2 + c_proj(gelu(c_fc(ln_2(res2))))
  // (activation gradients with one writer are written, not zero-filled and accumulated)
  const void* dres = tp_.gather_from_sequence_region(a.dres, a.seq.full, BT, C);  // (B,T,C)
  if (fp8(kDownLinear)) {  // FP8's product has no fused GELU backward
    linear_backward(kDownLinear, a.dfch, g.fcprojw, g.fcprojb, dres, x.fch_gelu, w.fcprojw, BT, Fl, C);
    be_.gelu_backward(a.dfch, x.fch, a.dfch, BT * Fl);
  } else {
    be_.matmul_gelu_backward(a.dfch, g.fcprojw, g.fcprojb, dres, x.fch_gelu, w.fcprojw, x.fch, BT, Fl, C);
  }
  if (lora_)  // the adapter's part of d(gelu output), through GELU too
    if (void* d = const_cast<void*>(lora_->backward(l, kDown, x.fch_gelu, dres, C, BT))) {
      be_.gelu_backward(d, x.fch, d, BT * Fl);
      be_.add_rows_scaled(a.dfch, Fl, d, Fl, BT, Fl, 1.0f);
    }
  // column-parallel: the input gradient is the sum of the ranks' parts
  DxExtra up_adapter;
  if (lora_) up_adapter = [&](void* dx, const void* ln2) { lora_->backward_into(l, kUp, ln2, a.dfch, Fl, BT, dx); };
  column_parallel_backward(kUpLinear, a.dln, g.fcw, g.fcb, a.dfch, x.ln2, w.fcw, a.seq, BT, C, Fl, {}, {}, up_adapter);
  be_.layernorm_backward(a.dres, norm_g[0], norm_g[1], a.dln, x.res2, w.ln2w, x.ln2_mean, x.ln2_rstd, R, C);
  // Attention branch: res2 = residual + c_proj(attn(c_attn(ln_1(residual))))
  dres = tp_.gather_from_sequence_region(a.dres, a.seq.full, BT, C);
  linear_backward(kOLinear, a.datty, g.attprojw, g.attprojb, dres, x.atty, w.attprojw, BT, Ca, C);
  if (lora_) lora_->backward_into(l, kO, x.atty, dres, C, BT, a.datty);
  be_.attention_backward(a.dqkv, a.datty, x.atty, x.qkv, x.att_lse, B, T, Ca, NH, NH, tokens_.current().positions);
  DxExtra qkv_adapter;
  if (lora_) qkv_adapter = [&](void* dx, const void* ln1) { lora_->backward_into(l, kQkv, ln1, a.dqkv, 3 * Ca, BT, dx); };
  column_parallel_backward(kQkvLinear, a.dln, g.qkvw, g.qkvb, a.dqkv, x.ln1, w.qkvw, a.seq, BT, C, 3 * Ca, {}, {}, qkv_adapter);
  be_.layernorm_backward(a.dres, norm_g[2], norm_g[3], a.dln, residual, w.ln1w, x.ln1_mean, x.ln1_rstd, R, C);
  seq_grads_.end();
}

void GPT2::backward() {
  ZT_CHECK(grads_ready_, "backward() needs a forward() with targets and grad_scale != 0");
  const int B = cur_B_, T = cur_T_;
  const int C = cfg_.d_model, Vl = V_l_;
  const int64_t BT = int64_t(B) * T, R = tp_.seq_real_rows(BT);
  Acts& a = acts_;
  const size_t wte_i = 0, wpe_i = 1, lnfw_i = table_.params().size() - 2, lnfb_i = table_.params().size() - 1;
  const size_t cs = esize_;
  pass(cfg_.n_layer, /*tied=*/true).backward({
      // Head: forward left dln and the head's part of dwte; dwte collects it here and the
      // embedding's part at the very end (the pass keeps group 0's gradient open until then).
      [&](float* emb_g) { head_backward(a.head, at(emb_g, wte_i), C, Vl); },
      [&](void* lnf, float* lnf_g) {
        float* const* norm_g = seq_grads_.begin({at(lnf_g, lnfw_i), at(lnf_g, lnfb_i)}, C);
        // each rank's vocabulary slice contributed a part
        tp_.reduce_to_sequence_region(tp_.partial_sums(a.dln, a.seq.partial), a.dln, BT, C);
        be_.fill_zero(a.dres, size_t(tp_.seq_rows(BT) * C) * cs);
        const void* last = cfg_.n_layer > 0 ? block_acts(cfg_.n_layer - 1).res3 : a.encoded;
        be_.layernorm_backward(a.dres, norm_g[0], norm_g[1], a.dln, last, at(lnf, lnfw_i), a.lnf_mean, a.lnf_rstd, R,
                               C);
        seq_grads_.end();
      },
      // dres is the gradient w.r.t. the residual stream (the same on every tensor-parallel rank, or
      // with sequence parallelism this rank's rows of it); each block adds its branches into it.
      [&](int l, void* block, float* grads) {
        const BlockParams<void*> w = block_params(block, l);
        const BlockParams<float*> g = block_params(grads, l);
        const void* in = l == 0 ? a.encoded : block_acts(l - 1).res3;
        recompute_block(l, w, in);
        block_backward(l, w, g, in);
      },
      [&](float* emb_g) {
        if (emb_g)  // none for a frozen embedding
          be_.embedding_backward(at(emb_g, wte_i), at(emb_g, wpe_i),
                                 tp_.gather_from_sequence_region(a.dres, a.seq.full, BT, C), tokens_.current().inputs,
                                 B, T, C, tokens_.current().positions);
        tokens_.mark_read();  // the token slot's last reader
      }});
  grads_ready_ = false;
}

}  // namespace zt
