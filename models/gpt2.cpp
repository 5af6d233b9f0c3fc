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

  auto group = [&](std::string name, size_t first, size_t n) {
    ParamGroup g{std::move(name), params_[first].offset, 0, first, n};
    for (size_t i = first; i < first + n; ++i) {
      g.numel += params_[i].numel;
      group_of_.push_back(int(groups_.size()));
    }
    groups_.push_back(std::move(g));
  };
  group("embeddings", 0, 2);
  for (int l = 0; l < cfg.n_layer; ++l) group("h." + std::to_string(l), 2 + size_t(l) * 12, 12);
  group("ln_f", params_.size() - 2, 2);

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
  act_buf_ = static_cast<float*>(be_.alloc(total * sizeof(float), MemTag::Activations));
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
  tokens_buf_ = static_cast<int32_t*>(be_.alloc(size_t(2 * BT) * sizeof(int32_t), MemTag::Activations));
}

GPT2::~GPT2() {
  be_.free(act_buf_);
  be_.free(tokens_buf_);
}

GPT2::LayerPtrs GPT2::layer(float* g, int l) const {
  const size_t first = groups_[1 + l].first_param;  // the block's 12 tensors, in table order
  auto p = [&](size_t k) { return at(g, first + k); };
  return {p(0), p(1), p(2), p(3), p(4), p(5), p(6), p(7), p(8), p(9), p(10), p(11)};
}

void GPT2::init_range(uint64_t seed, size_t begin, size_t end, float* dst) const {
  for (const auto& p : params_) {
    const size_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel);
    if (lo >= hi) continue;
    float* out = dst + (lo - begin);
    if (p.init_std == 0.0f) {
      std::fill(out, out + (hi - lo), p.init_value);
      continue;
    }
    const uint64_t stream = name_hash(p.name);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < int64_t(hi - lo); ++i)
      out[i] = float(normal_at(seed, stream, uint64_t(lo - p.offset + i)) * p.init_std);
  }
}

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
  ZT_CHECK(prov_ != nullptr, "GPT2 has no ParamProvider");
  ParamProvider& prov = *prov_;
  const int L = cfg_.n_layer, lnf_group = head_group();
  const size_t wte_i = 0, wpe_i = 1, lnfw_i = params_.size() - 2, lnfb_i = params_.size() - 1;
  std::vector<int> order = {0};  // embeddings, blocks, ln_f, embeddings again (tied head)
  for (int l = 0; l < L; ++l) order.push_back(1 + l);
  order.push_back(lnf_group);
  order.push_back(0);
  prov.begin_pass(order);

  float* emb = prov.params(0);
  be_.embedding_forward(a.encoded, d_inputs, at(emb, wte_i), at(emb, wpe_i), B, T, C);  // (B,T,C)
  prov.release_params(0);
  const float* residual = a.encoded;
  for (int l = 0; l < L; ++l) {
    const LayerPtrs w = layer(prov.params(1 + l), l);
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
    prov.release_params(1 + l);
    residual = res3;
  }
  float* lnf = prov.params(lnf_group);
  be_.layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, residual, at(lnf, lnfw_i), at(lnf, lnfb_i),
                        BT, C, kLayerNormEps);
  prov.release_params(lnf_group);
  emb = prov.params(0);
  be_.matmul_forward(a.logits, a.lnf, at(emb, wte_i), nullptr, BT, C, V);  // (B,T,V), tied head
  prov.release_params(0);
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
  ParamProvider& prov = *prov_;
  const int lnf_group = head_group();
  const size_t wte_i = 0, wpe_i = 1, lnfw_i = params_.size() - 2, lnfb_i = params_.size() - 1;
  const int32_t* d_inputs = tokens_buf_;
  std::vector<int> order = {0, lnf_group};  // head (tied wte), ln_f, blocks in reverse
  for (int l = cfg_.n_layer - 1; l >= 0; --l) order.push_back(1 + l);
  prov.begin_pass(order);

  // Head: logits now hold dlogits (B,T,V). dwte collects the head's part here and the
  // embedding's part at the very end, so group 0's gradient stays open until then.
  float* emb = prov.params(0);
  float* emb_g = prov.grads(0);
  be_.fill_zero(a.dln, BT * C * sizeof(float));
  be_.matmul_backward(a.dln, at(emb_g, wte_i), nullptr, a.logits, a.lnf, at(emb, wte_i), BT, C, V);
  prov.release_params(0);
  be_.fill_zero(a.dres, BT * C * sizeof(float));
  const float* last = cfg_.n_layer > 0 ? a.res3 + (cfg_.n_layer - 1) * BT * C : a.encoded;
  float* lnf = prov.params(lnf_group);
  float* lnf_g = prov.grads(lnf_group);
  be_.layernorm_backward(a.dres, at(lnf_g, lnfw_i), at(lnf_g, lnfb_i), a.dln, last, at(lnf, lnfw_i),
                         a.lnf_mean, a.lnf_rstd, BT, C);
  prov.grads_done(lnf_group);
  prov.release_params(lnf_group);
  // dres is the gradient w.r.t. the residual stream; each block adds its branches into it.
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    const LayerPtrs w = layer(prov.params(1 + l), l), g = layer(prov.grads(1 + l), l);
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
    prov.grads_done(1 + l);
    prov.release_params(1 + l);
  }
  be_.embedding_backward(at(emb_g, wte_i), at(emb_g, wpe_i), a.dres, d_inputs, B, T, C);
  prov.grads_done(0);

  grads_ready_ = false;
}

}  // namespace zt
