// GPT-2 forward/backward over the op interface (see gpt2.h for the parameter table).
#include "models/gpt2.h"

#include <cmath>
#include <vector>

#include "engine/core/rng.h"
#include "engine/core/status.h"

namespace zt {

namespace {
constexpr float kLayerNormEps = 1e-5f;
}

GPT2::GPT2(const GPT2Config& cfg, Backend& backend, int max_batch)
    : cfg_(cfg), be_(backend), max_batch_(max_batch) {
  const int64_t C = cfg.d_model, V = cfg.vocab_size, T = cfg.seq_len, F = cfg.d_ff;
  const float std0 = 0.02f;
  // GPT-2 scales the init of the projections that write into the residual stream by
  // 1/sqrt(2 * n_layer): each block adds two such contributions.
  const float std_resid = 0.02f / std::sqrt(2.0f * cfg.n_layer);
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay, float std_, float value) {
    ParamInfo p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.numel = 1;
    for (auto d : p.shape) p.numel *= size_t(d);
    p.offset = n_params_;
    p.decay = decay;
    p.init_std = std_;
    p.init_value = value;
    n_params_ += p.numel;
    params_.push_back(std::move(p));
  };
  add("transformer.wte.weight", {V, C}, true, std0, 0);
  add("transformer.wpe.weight", {T, C}, true, std0, 0);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C}, false, 0, 1);
    add(h + "ln_1.bias", {C}, false, 0, 0);
    add(h + "attn.c_attn.weight", {3 * C, C}, true, std0, 0);
    add(h + "attn.c_attn.bias", {3 * C}, false, 0, 0);
    add(h + "attn.c_proj.weight", {C, C}, true, std_resid, 0);
    add(h + "attn.c_proj.bias", {C}, false, 0, 0);
    add(h + "ln_2.weight", {C}, false, 0, 1);
    add(h + "ln_2.bias", {C}, false, 0, 0);
    add(h + "mlp.c_fc.weight", {F, C}, true, std0, 0);
    add(h + "mlp.c_fc.bias", {F}, false, 0, 0);
    add(h + "mlp.c_proj.weight", {C, F}, true, std_resid, 0);
    add(h + "mlp.c_proj.bias", {C}, false, 0, 0);
  }
  add("transformer.ln_f.weight", {C}, false, 0, 1);
  add("transformer.ln_f.bias", {C}, false, 0, 0);

  param_buf_ = static_cast<float*>(be_.alloc(n_params_ * sizeof(float)));
  grad_buf_ = static_cast<float*>(be_.alloc(n_params_ * sizeof(float)));

  // Activations for the largest batch, carved from one allocation.
  const int64_t L = cfg.n_layer, B = max_batch, NH = cfg.n_head, BT = B * T;
  const std::vector<int64_t> sizes = {
      BT * C,                                   // encoded
      L * BT * C, L * BT, L * BT,               // ln1, mean, rstd
      L * BT * 3 * C,                           // qkv
      L * BT * C,                               // atty
      L * B * NH * T,                           // att_lse
      L * BT * C, L * BT * C,                   // attproj, res2
      L * BT * C, L * BT, L * BT,               // ln2, mean, rstd
      L * BT * F, L * BT * F,                   // fch, fch_gelu
      L * BT * C, L * BT * C,                   // fcproj, res3
      BT * C, BT, BT,                           // lnf, mean, rstd
      BT * V, BT,                               // logits, losses
      BT * C, BT * C, BT * 3 * C, BT * C, BT * F, BT * F};  // dres, dln, dqkv, datty, dfch, dfch_gelu
  size_t total = 0;
  for (auto s : sizes) total += size_t(s + 15) / 16 * 16;  // 64-byte aligned sub-buffers
  act_buf_ = static_cast<float*>(be_.alloc(total * sizeof(float)));
  float* p = act_buf_;
  float** slots[] = {&acts_.encoded, &acts_.ln1,      &acts_.ln1_mean, &acts_.ln1_rstd,
                     &acts_.qkv,     &acts_.atty,     &acts_.att_lse,  &acts_.attproj,
                     &acts_.res2,    &acts_.ln2,      &acts_.ln2_mean, &acts_.ln2_rstd,
                     &acts_.fch,     &acts_.fch_gelu, &acts_.fcproj,   &acts_.res3,
                     &acts_.lnf,     &acts_.lnf_mean, &acts_.lnf_rstd, &acts_.logits,
                     &acts_.losses,  &acts_.dres,     &acts_.dln,      &acts_.dqkv,
                     &acts_.datty,   &acts_.dfch,     &acts_.dfch_gelu};
  static_assert(sizeof(slots) / sizeof(slots[0]) == 27);
  for (size_t i = 0; i < sizes.size(); ++i) {
    *slots[i] = p;
    p += size_t(sizes[i] + 15) / 16 * 16;
  }
  tokens_buf_ = static_cast<int32_t*>(be_.alloc(size_t(2 * BT) * sizeof(int32_t)));
}

GPT2::~GPT2() {
  be_.free(param_buf_);
  be_.free(grad_buf_);
  be_.free(act_buf_);
  be_.free(tokens_buf_);
}

GPT2::LayerPtrs GPT2::layer(float* base, int l) const {
  const size_t first = 2 + size_t(l) * 12;  // wte, wpe, then 12 tensors per block
  auto at = [&](size_t k) { return base + params_[first + k].offset; };
  return {at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7), at(8), at(9), at(10), at(11)};
}

void GPT2::init_params(uint64_t seed) {
  std::vector<float> host(n_params_);
  for (const auto& p : params_) {
    float* dst = host.data() + p.offset;
    if (p.init_std == 0.0f) {
      std::fill(dst, dst + p.numel, p.init_value);
      continue;
    }
    const uint64_t stream = name_hash(p.name);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < int64_t(p.numel); ++i)
      dst[i] = float(normal_at(seed, stream, uint64_t(i)) * p.init_std);
  }
  be_.copy_to_device(param_buf_, host.data(), n_params_ * sizeof(float));
}

void GPT2::zero_grad() { be_.fill_zero(grad_buf_, n_params_ * sizeof(float)); }

float GPT2::forward(const int32_t* inputs, const int32_t* targets, int B, int T, float grad_scale) {
  ZT_CHECK(B >= 1 && B <= max_batch_ && T >= 1 && T <= cfg_.seq_len, "batch ({}, {}) exceeds ({}, {})",
           B, T, max_batch_, cfg_.seq_len);
  const int C = cfg_.d_model, F = cfg_.d_ff, V = cfg_.vocab_size, NH = cfg_.n_head;
  const int64_t BT = int64_t(B) * T;
  cur_B_ = B;
  cur_T_ = T;
  int32_t* d_inputs = tokens_buf_;
  int32_t* d_targets = tokens_buf_ + BT;
  be_.copy_to_device(d_inputs, inputs, BT * sizeof(int32_t));
  if (targets) be_.copy_to_device(d_targets, targets, BT * sizeof(int32_t));
  Acts& a = acts_;
  float* P = param_buf_;

  be_.embedding_forward(a.encoded, d_inputs, wte(P), wpe(P), B, T, C);  // (B,T,C)
  const float* residual = a.encoded;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const LayerPtrs w = layer(P, l);
    float* ln1 = a.ln1 + l * BT * C;
    float* ln1_mean = a.ln1_mean + l * BT;
    float* ln1_rstd = a.ln1_rstd + l * BT;
    float* qkv = a.qkv + l * BT * 3 * C;
    float* atty = a.atty + l * BT * C;
    float* lse = a.att_lse + l * BT * NH;
    float* attproj = a.attproj + l * BT * C;
    float* res2 = a.res2 + l * BT * C;
    float* ln2 = a.ln2 + l * BT * C;
    float* ln2_mean = a.ln2_mean + l * BT;
    float* ln2_rstd = a.ln2_rstd + l * BT;
    float* fch = a.fch + l * BT * F;
    float* fch_gelu = a.fch_gelu + l * BT * F;
    float* fcproj = a.fcproj + l * BT * C;
    float* res3 = a.res3 + l * BT * C;

    be_.layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, w.ln1w, w.ln1b, BT, C, kLayerNormEps);
    be_.matmul_forward(qkv, ln1, w.qkvw, w.qkvb, BT, C, 3 * C);      // (B,T,3C)
    be_.attention_forward(atty, lse, qkv, B, T, C, NH);              // (B,T,C)
    be_.matmul_forward(attproj, atty, w.attprojw, w.attprojb, BT, C, C);
    be_.add(res2, residual, attproj, BT * C);
    be_.layernorm_forward(ln2, ln2_mean, ln2_rstd, res2, w.ln2w, w.ln2b, BT, C, kLayerNormEps);
    be_.matmul_forward(fch, ln2, w.fcw, w.fcb, BT, C, F);            // (B,T,F)
    be_.gelu_forward(fch_gelu, fch, BT * F);
    be_.matmul_forward(fcproj, fch_gelu, w.fcprojw, w.fcprojb, BT, F, C);
    be_.add(res3, res2, fcproj, BT * C);
    residual = res3;
  }
  be_.layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, residual, lnfw(P), lnfb(P), BT, C,
                        kLayerNormEps);
  be_.matmul_forward(a.logits, a.lnf, wte(P), nullptr, BT, C, V);  // (B,T,V), tied head
  grads_ready_ = false;
  if (!targets) return 0.0f;

  be_.softmax_crossentropy(a.losses, a.logits, d_targets, BT, V, grad_scale);
  grads_ready_ = grad_scale != 0.0f;
  std::vector<float> losses(BT);
  be_.copy_to_host(losses.data(), a.losses, BT * sizeof(float));
  double sum = 0;
  for (float x : losses) sum += x;
  return float(sum / double(BT));
}

void GPT2::backward() {
  ZT_CHECK(grads_ready_, "backward() needs a forward() with targets and grad_scale != 0");
  const int B = cur_B_, T = cur_T_;
  const int C = cfg_.d_model, F = cfg_.d_ff, V = cfg_.vocab_size, NH = cfg_.n_head;
  const int64_t BT = int64_t(B) * T;
  Acts& a = acts_;
  float* P = param_buf_;
  float* G = grad_buf_;
  const int32_t* d_inputs = tokens_buf_;

  // Head: logits now hold dlogits (B,T,V).
  be_.fill_zero(a.dln, BT * C * sizeof(float));
  be_.matmul_backward(a.dln, wte(G), nullptr, a.logits, a.lnf, wte(P), BT, C, V);
  be_.fill_zero(a.dres, BT * C * sizeof(float));
  const float* last = cfg_.n_layer > 0 ? a.res3 + (cfg_.n_layer - 1) * BT * C : a.encoded;
  be_.layernorm_backward(a.dres, lnfw(G), lnfb(G), a.dln, last, lnfw(P), a.lnf_mean, a.lnf_rstd,
                         BT, C);
  // dres is the gradient w.r.t. the residual stream; each block adds its branches into it.
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    const LayerPtrs w = layer(P, l), g = layer(G, l);
    const float* residual = l == 0 ? a.encoded : a.res3 + (l - 1) * BT * C;
    const float* ln1 = a.ln1 + l * BT * C;
    const float* qkv = a.qkv + l * BT * 3 * C;
    const float* atty = a.atty + l * BT * C;
    const float* lse = a.att_lse + l * BT * NH;
    const float* res2 = a.res2 + l * BT * C;
    const float* ln2 = a.ln2 + l * BT * C;
    const float* fch = a.fch + l * BT * F;
    const float* fch_gelu = a.fch_gelu + l * BT * F;

    // MLP branch: res3 = res2 + c_proj(gelu(c_fc(ln_2(res2))))
    be_.fill_zero(a.dfch_gelu, BT * F * sizeof(float));
    be_.matmul_backward(a.dfch_gelu, g.fcprojw, g.fcprojb, a.dres, fch_gelu, w.fcprojw, BT, F, C);
    be_.fill_zero(a.dfch, BT * F * sizeof(float));
    be_.gelu_backward(a.dfch, fch, a.dfch_gelu, BT * F);
    be_.fill_zero(a.dln, BT * C * sizeof(float));
    be_.matmul_backward(a.dln, g.fcw, g.fcb, a.dfch, ln2, w.fcw, BT, C, F);
    be_.layernorm_backward(a.dres, g.ln2w, g.ln2b, a.dln, res2, w.ln2w, a.ln2_mean + l * BT,
                           a.ln2_rstd + l * BT, BT, C);
    // Attention branch: res2 = residual + c_proj(attn(c_attn(ln_1(residual))))
    be_.fill_zero(a.datty, BT * C * sizeof(float));
    be_.matmul_backward(a.datty, g.attprojw, g.attprojb, a.dres, atty, w.attprojw, BT, C, C);
    be_.fill_zero(a.dqkv, BT * 3 * C * sizeof(float));
    be_.attention_backward(a.dqkv, a.datty, qkv, lse, B, T, C, NH);
    be_.fill_zero(a.dln, BT * C * sizeof(float));
    be_.matmul_backward(a.dln, g.qkvw, g.qkvb, a.dqkv, ln1, w.qkvw, BT, C, 3 * C);
    be_.layernorm_backward(a.dres, g.ln1w, g.ln1b, a.dln, residual, w.ln1w, a.ln1_mean + l * BT,
                           a.ln1_rstd + l * BT, BT, C);
  }
  be_.embedding_backward(wte(G), wpe(G), a.dres, d_inputs, B, T, C);
  grads_ready_ = false;
}

}  // namespace zt
