// GPT-2 forward/backward over the op interface (see gpt2.h for the parameter table).
#include "models/gpt2.h"

#include <cmath>
#include <vector>

#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/dist/comm.h"

namespace zt {

namespace {
constexpr float kLayerNormEps = 1e-5f;
}

GPT2::GPT2(const GPT2Config& cfg, Backend& backend, int max_batch, Comm* tp)
    : cfg_(cfg), be_(backend), max_batch_(max_batch), tp_(tp) {
  if (tp_ && tp_->size() > 1) {
    tp_size_ = tp_->size();
    tp_rank_ = tp_->rank();
  }
  const int TP = tp_size_;
  ZT_CHECK(cfg.n_head % TP == 0 && cfg.d_ff % TP == 0 && cfg.vocab_size % TP == 0,
           "tensor parallelism {} does not divide heads {}, d_ff {}, vocab {}", TP, cfg.n_head, cfg.d_ff,
           cfg.vocab_size);
  const int64_t C = cfg.d_model, V = cfg.vocab_size, T = cfg.seq_len, F = cfg.d_ff;
  NH_l_ = cfg.n_head / TP;
  C_l_ = int(C / TP);  // attention width of this rank's heads: NH_l * hs
  F_l_ = int(F / TP);
  V_l_ = int(V / TP);
  const float std0 = 0.02f;
  // GPT-2 scales the init of the projections that write into the residual stream by
  // 1/sqrt(2 * n_layer): each block adds two such contributions.
  const float std_resid = 0.02f / std::sqrt(2.0f * cfg.n_layer);
  auto add = [&](std::string name, std::vector<int64_t> shape, TpSplit split, int blocks, bool decay,
                 float std_, float value) {
    ParamInfo p;
    p.name = std::move(name);
    p.global_shape = shape;
    p.shape = shape;
    if (split == TpSplit::Rows) p.shape[0] /= TP;
    if (split == TpSplit::Cols) p.shape[1] /= TP;
    p.split = split;
    p.row_blocks = blocks;
    p.numel = p.global_numel = 1;
    for (auto d : p.shape) p.numel *= size_t(d);
    for (auto d : p.global_shape) p.global_numel *= size_t(d);
    p.offset = n_params_;
    p.global_offset = n_global_params_;
    p.decay = decay;
    p.init_std = std_;
    p.init_value = value;
    n_params_ += p.numel;
    n_global_params_ += p.global_numel;
    params_.push_back(std::move(p));
  };
  const auto None = TpSplit::None, Rows = TpSplit::Rows, Cols = TpSplit::Cols;
  add("transformer.wte.weight", {V, C}, Rows, 1, true, std0, 0);  // vocabulary-parallel
  add("transformer.wpe.weight", {T, C}, None, 1, true, std0, 0);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C}, None, 1, false, 0, 1);
    add(h + "ln_1.bias", {C}, None, 1, false, 0, 0);
    add(h + "attn.c_attn.weight", {3 * C, C}, Rows, 3, true, std0, 0);  // column-parallel, q|k|v
    add(h + "attn.c_attn.bias", {3 * C}, Rows, 3, false, 0, 0);
    add(h + "attn.c_proj.weight", {C, C}, Cols, 1, true, std_resid, 0);  // row-parallel
    add(h + "attn.c_proj.bias", {C}, None, 1, false, 0, 0);
    add(h + "ln_2.weight", {C}, None, 1, false, 0, 1);
    add(h + "ln_2.bias", {C}, None, 1, false, 0, 0);
    add(h + "mlp.c_fc.weight", {F, C}, Rows, 1, true, std0, 0);  // column-parallel
    add(h + "mlp.c_fc.bias", {F}, Rows, 1, false, 0, 0);
    add(h + "mlp.c_proj.weight", {C, F}, Cols, 1, true, std_resid, 0);  // row-parallel
    add(h + "mlp.c_proj.bias", {C}, None, 1, false, 0, 0);
  }
  add("transformer.ln_f.weight", {C}, None, 1, false, 0, 1);
  add("transformer.ln_f.bias", {C}, None, 1, false, 0, 0);

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

  // Activations for the largest batch, carved from one allocation. With tensor parallelism the
  // attention (Ca = C/TP), MLP (Fl = F/TP) and logits (Vl = V/TP) activations are this rank's part.
  esize_ = be_.compute_size();
  const int64_t L = cfg.n_layer, B = max_batch, NH = NH_l_, BT = B * T;
  const int64_t Ca = C_l_, Fl = F_l_, Vl = V_l_;
  Acts& a = acts_;
  struct Slot {
    void** compute;  // compute-precision tensor, or
    float** stat;    // fp32 statistics
    int64_t n;
  };
  const std::vector<Slot> slots = {
      {&a.encoded, nullptr, BT * C},
      {&a.ln1, nullptr, L * BT * C},       {nullptr, &a.ln1_mean, L * BT},   {nullptr, &a.ln1_rstd, L * BT},
      {&a.qkv, nullptr, L * BT * 3 * Ca},  {&a.atty, nullptr, L * BT * Ca},  {nullptr, &a.att_lse, L * B * NH * T},
      {&a.attproj, nullptr, L * BT * C},   {&a.res2, nullptr, L * BT * C},
      {&a.ln2, nullptr, L * BT * C},       {nullptr, &a.ln2_mean, L * BT},   {nullptr, &a.ln2_rstd, L * BT},
      {&a.fch, nullptr, L * BT * Fl},      {&a.fch_gelu, nullptr, L * BT * Fl},
      {&a.fcproj, nullptr, L * BT * C},    {&a.res3, nullptr, L * BT * C},
      {&a.lnf, nullptr, BT * C},           {nullptr, &a.lnf_mean, BT},       {nullptr, &a.lnf_rstd, BT},
      {&a.logits, nullptr, BT * Vl},
      {nullptr, &a.losses, BT},            {nullptr, &a.ce_sum, BT},         {nullptr, &a.ce_tgt, BT},
      {&a.dres, nullptr, BT * C},          {&a.dln, nullptr, BT * C},        {&a.dqkv, nullptr, BT * 3 * Ca},
      {&a.datty, nullptr, BT * Ca},        {&a.dfch, nullptr, BT * Fl},      {&a.dfch_gelu, nullptr, BT * Fl}};
  auto bytes_of = [&](const Slot& sl) {
    const size_t raw = size_t(sl.n) * (sl.compute ? esize_ : sizeof(float));
    return (raw + 63) / 64 * 64;  // 64-byte aligned sub-buffers (128-bit vector access)
  };
  size_t total = 0;
  for (const Slot& sl : slots) total += bytes_of(sl);
  act_buf_ = be_.alloc(total, MemTag::Activations);
  char* p = static_cast<char*>(act_buf_);
  for (const Slot& sl : slots) {
    if (sl.compute) *sl.compute = p;
    else *sl.stat = reinterpret_cast<float*>(p);
    p += bytes_of(sl);
  }
  tokens_buf_ = static_cast<int32_t*>(be_.alloc(size_t(4 * BT) * sizeof(int32_t), MemTag::Activations));
  loss_acc_ = static_cast<double*>(be_.alloc(sizeof(double), MemTag::Activations));
  if (TP > 1 && esize_ != sizeof(float))
    tp_scratch_ = static_cast<float*>(be_.alloc(size_t(BT * std::max<int64_t>(C, Vl)) * sizeof(float),
                                                MemTag::Activations));
}

GPT2::~GPT2() {
  be_.free(act_buf_);
  be_.free(tokens_buf_);
  be_.free(tp_scratch_);
  be_.free(loss_acc_);
}

template <typename P>
GPT2::LayerPtrs<P> GPT2::layer(P g, int l) const {
  const size_t first = groups_[1 + l].first_param;  // the block's 12 tensors, in table order
  auto p = [&](size_t k) { return at(g, first + k); };
  return {p(0), p(1), p(2), p(3), p(4), p(5), p(6), p(7), p(8), p(9), p(10), p(11)};
}

size_t GPT2::global_index(const ParamInfo& p, size_t local, int rank) const {
  if (p.split == TpSplit::None) return local;
  const size_t rows = size_t(p.shape[0]), cols = p.shape.size() > 1 ? size_t(p.shape[1]) : 1;
  const size_t r = local / cols, c = local % cols;
  if (p.split == TpSplit::Cols) return r * size_t(p.global_shape[1]) + size_t(rank) * cols + c;
  // Rows: local row r is row `within` of block `blk` of this rank's slice of every block.
  const size_t local_block_rows = rows / p.row_blocks;
  const size_t global_block_rows = size_t(p.global_shape[0]) / p.row_blocks;
  const size_t blk = r / local_block_rows, within = r % local_block_rows;
  const size_t grow = blk * global_block_rows + size_t(rank) * local_block_rows + within;
  return grow * cols + c;
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
    // Keyed by the element's index in the full tensor: the same model for any tensor-parallel
    // degree, ZeRO stage or shard boundary.
    const uint64_t stream = name_hash(p.name);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < int64_t(hi - lo); ++i)
      out[i] = float(normal_at(seed, stream, global_index(p, lo - p.offset + size_t(i), tp_rank_)) * p.init_std);
  }
}

void GPT2::tp_all_reduce(void* buf, int64_t n) const {
  if (tp_size_ == 1) return;
  const DType ct = be_.compute_dtype();
  if (ct == DType::F32) {
    tp_->all_reduce_sync(static_cast<float*>(buf), size_t(n));
    return;
  }
  be_.convert(tp_scratch_, DType::F32, buf, ct, n);
  tp_->all_reduce_sync(tp_scratch_, size_t(n));
  be_.convert(buf, ct, tp_scratch_, DType::F32, n);
}

float GPT2::forward(const int32_t* inputs, const int32_t* targets, int B, int T, float grad_scale) {
  ZT_CHECK(deferred_ == 0, "forward() with {} deferred losses not taken", deferred_);
  forward_deferred(inputs, targets, B, T, grad_scale);
  return targets ? float(take_losses()) : 0.0f;
}

double GPT2::take_losses() {
  double device_sum = 0;
  be_.copy_to_host(&device_sum, loss_acc_, sizeof device_sum);
  be_.fill_zero(loss_acc_, sizeof(double));
  const double total = device_sum + host_losses_;
  host_losses_ = 0;
  deferred_ = 0;
  return total;
}

void GPT2::forward_deferred(const int32_t* inputs, const int32_t* targets, int B, int T, float grad_scale) {
  ZT_CHECK(B >= 1 && B <= max_batch_ && T >= 1 && T <= cfg_.seq_len, "batch ({}, {}) exceeds ({}, {})",
           B, T, max_batch_, cfg_.seq_len);
  ZT_CHECK(prov_ != nullptr, "GPT2 has no ParamProvider");
  const int C = cfg_.d_model, Ca = C_l_, Fl = F_l_, Vl = V_l_, NH = NH_l_;
  const int v0 = tp_rank_ * V_l_;  // this rank's vocabulary slice [v0, v0 + Vl)
  const int64_t BT = int64_t(B) * T;
  cur_B_ = B;
  cur_T_ = T;
  // Token ids as this rank's embedding rows (-1: another rank's slice); targets stay global.
  std::vector<int32_t> local_ids(inputs, inputs + BT);
  for (auto& id : local_ids) id = (id >= v0 && id < v0 + Vl) ? id - v0 : -1;
  // Two token slots used in turn: this batch's upload (on the copy stream) may overlap the
  // previous micro-batch's backward, which still reads the other slot.
  token_slot_ ^= 1;
  int32_t* d_inputs = tokens_buf_ + int64_t(token_slot_) * 2 * max_batch_ * cfg_.seq_len;
  int32_t* d_targets = d_inputs + BT;
  be_.upload_async(d_inputs, local_ids.data(), BT * sizeof(int32_t), slot_free_[token_slot_]);
  if (targets) be_.upload_async(d_targets, targets, BT * sizeof(int32_t), slot_free_[token_slot_]);
  Acts& a = acts_;
  ParamProvider& prov = *prov_;
  const int L = cfg_.n_layer, lnf_group = head_group();
  const size_t wte_i = 0, wpe_i = 1, lnfw_i = params_.size() - 2, lnfb_i = params_.size() - 1;
  const bool tp0 = tp_rank_ == 0;  // replicated additions (positions, row-parallel biases) once
  std::vector<int> order = {0};  // embeddings, blocks, ln_f, embeddings again (tied head)
  for (int l = 0; l < L; ++l) order.push_back(1 + l);
  order.push_back(lnf_group);
  order.push_back(0);
  prov.begin_pass(order);

  void* emb = prov.params(0);
  be_.embedding_forward(a.encoded, d_inputs, at(emb, wte_i), tp0 ? at(emb, wpe_i) : nullptr, B, T, C);
  prov.release_params(0);
  tp_all_reduce(a.encoded, BT * C);  // vocabulary-parallel embedding: (B,T,C)
  // Each residual add is fused with the LayerNorm that reads its result: block l's attention
  // residual with its ln_2, block l's MLP residual with block l+1's ln_1 (or ln_f), which runs
  // at the start of block l+1 so that only that block's parameters are needed.
  for (int l = 0; l < L; ++l) {
    const LayerPtrs<void*> w = layer(prov.params(1 + l), l);
    void* ln1 = el(a.ln1, l * BT * C);
    float* ln1_mean = a.ln1_mean + l * BT;
    float* ln1_rstd = a.ln1_rstd + l * BT;
    void* qkv = el(a.qkv, l * BT * 3 * Ca);
    void* atty = el(a.atty, l * BT * Ca);
    float* lse = a.att_lse + l * BT * NH;
    void* attproj = el(a.attproj, l * BT * C);
    void* res2 = el(a.res2, l * BT * C);
    void* ln2 = el(a.ln2, l * BT * C);
    void* fch = el(a.fch, l * BT * Fl);
    void* fch_gelu = el(a.fch_gelu, l * BT * Fl);
    void* fcproj = el(a.fcproj, l * BT * C);

    if (l == 0) {
      be_.layernorm_forward(ln1, ln1_mean, ln1_rstd, a.encoded, w.ln1w, w.ln1b, BT, C, kLayerNormEps);
    } else {  // res3[l-1] = res2[l-1] + fcproj[l-1]; ln1 = ln_1(res3[l-1])
      be_.residual_layernorm_forward(el(a.res3, (l - 1) * BT * C), ln1, ln1_mean, ln1_rstd,
                                     el(a.res2, (l - 1) * BT * C), el(a.fcproj, (l - 1) * BT * C),
                                     w.ln1w, w.ln1b, BT, C, kLayerNormEps);
    }
    const void* residual = l == 0 ? a.encoded : el(a.res3, (l - 1) * BT * C);
    be_.matmul_forward(qkv, ln1, w.qkvw, w.qkvb, BT, C, 3 * Ca);      // (B,T,3Ca) this rank's heads
    be_.attention_forward(atty, lse, qkv, B, T, Ca, NH);              // (B,T,Ca)
    be_.matmul_forward(attproj, atty, w.attprojw, tp0 ? w.attprojb : nullptr, BT, Ca, C);
    tp_all_reduce(attproj, BT * C);                                   // row-parallel: sum of parts
    be_.residual_layernorm_forward(res2, ln2, a.ln2_mean + l * BT, a.ln2_rstd + l * BT, residual, attproj,
                                   w.ln2w, w.ln2b, BT, C, kLayerNormEps);
    be_.matmul_gelu_forward(fch_gelu, fch, ln2, w.fcw, w.fcb, BT, C, Fl);  // (B,T,Fl)
    be_.matmul_forward(fcproj, fch_gelu, w.fcprojw, tp0 ? w.fcprojb : nullptr, BT, Fl, C);
    tp_all_reduce(fcproj, BT * C);
    prov.release_params(1 + l);
  }
  void* lnf = prov.params(lnf_group);
  if (L == 0) {
    be_.layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, a.encoded, at(lnf, lnfw_i), at(lnf, lnfb_i), BT, C,
                          kLayerNormEps);
  } else {
    be_.residual_layernorm_forward(el(a.res3, (L - 1) * BT * C), a.lnf, a.lnf_mean, a.lnf_rstd,
                                   el(a.res2, (L - 1) * BT * C), el(a.fcproj, (L - 1) * BT * C),
                                   at(lnf, lnfw_i), at(lnf, lnfb_i), BT, C, kLayerNormEps);
  }
  prov.release_params(lnf_group);
  emb = prov.params(0);
  be_.matmul_forward(a.logits, a.lnf, at(emb, wte_i), nullptr, BT, C, Vl);  // (B,T,Vl), tied head
  prov.release_params(0);
  grads_ready_ = false;
  if (!targets) {
    slot_free_[token_slot_] = be_.mark();  // the token slot's last reader so far
    return;
  }

  ++deferred_;
  if (tp_size_ == 1) {
    be_.softmax_crossentropy(a.losses, a.logits, d_targets, BT, Vl, grad_scale);
    be_.sum_accumulate(loss_acc_, a.losses, BT, 1.0 / double(BT));
  } else {
    // Vocabulary-parallel cross-entropy: the full logits never exist on one rank. Row max, sum of
    // exponentials and the target's logit are reduced over the group ((B,T) floats each, in
    // device memory so that the group may be NCCL).
    float* d_max = a.losses;  // (B,T) scratch, free until the losses are known
    float* d_sum = a.ce_sum;
    float* d_tgt = a.ce_tgt;
    be_.logits_row_max(d_max, a.logits, BT, Vl);
    tp_->wait(tp_->all_reduce(d_max, BT, ReduceOp::Max));
    be_.logits_row_sumexp(d_sum, a.logits, d_max, BT, Vl);
    be_.logits_pick_target(d_tgt, a.logits, d_targets, BT, Vl, v0);
    tp_->all_reduce_sync(d_sum, BT);
    tp_->all_reduce_sync(d_tgt, BT);
    std::vector<float> mx(BT), sum(BT), tgt(BT);
    be_.copy_to_host(mx.data(), d_max, BT * sizeof(float));
    be_.copy_to_host(sum.data(), d_sum, BT * sizeof(float));
    be_.copy_to_host(tgt.data(), d_tgt, BT * sizeof(float));
    double total = 0;
    for (int64_t i = 0; i < BT; ++i) {
      const float lse = mx[i] + std::log(sum[i]);
      total += lse - tgt[i];
      mx[i] = lse;
    }
    host_losses_ += total / double(BT);
    if (grad_scale != 0.0f) {
      be_.copy_to_device(d_max, mx.data(), BT * sizeof(float));
      be_.crossentropy_grad_from_lse(a.logits, d_max, d_targets, BT, Vl, v0, grad_scale);
    }
  }
  grads_ready_ = grad_scale != 0.0f;
  slot_free_[token_slot_] = be_.mark();  // the token slot's last reader so far (backward moves it)
}

void GPT2::logits_row(int b, int t, float* out) const {
  const int64_t Vl = V_l_;
  const void* row = el(acts_.logits, (int64_t(b) * cur_T_ + t) * Vl);
  // Converted to fp32 in device memory, gathered there (the group may be NCCL), then copied out.
  float* all = static_cast<float*>(be_.alloc(size_t(Vl) * size_t(tp_size_) * sizeof(float), MemTag::CommBuffers));
  float* mine = all + int64_t(tp_rank_) * Vl;
  be_.convert(mine, DType::F32, row, be_.compute_dtype(), Vl);
  if (tp_size_ > 1) tp_->wait(tp_->all_gather(mine, all, size_t(Vl)));  // rank order = vocabulary order
  be_.copy_to_host(out, all, size_t(Vl) * size_t(tp_size_) * sizeof(float));
  be_.free(all);
}

void GPT2::backward() {
  ZT_CHECK(grads_ready_, "backward() needs a forward() with targets and grad_scale != 0");
  const int B = cur_B_, T = cur_T_;
  const int C = cfg_.d_model, Ca = C_l_, Fl = F_l_, Vl = V_l_, NH = NH_l_;
  const int64_t BT = int64_t(B) * T;
  Acts& a = acts_;
  ParamProvider& prov = *prov_;
  const int lnf_group = head_group();
  const size_t wte_i = 0, wpe_i = 1, lnfw_i = params_.size() - 2, lnfb_i = params_.size() - 1;
  const int32_t* d_inputs = tokens_buf_ + int64_t(token_slot_) * 2 * max_batch_ * cfg_.seq_len;
  std::vector<int> order = {0, lnf_group};  // head (tied wte), ln_f, blocks in reverse
  for (int l = cfg_.n_layer - 1; l >= 0; --l) order.push_back(1 + l);
  prov.begin_pass(order);

  // Head: logits now hold dlogits (B,T,Vl). dwte collects the head's part here and the
  // embedding's part at the very end, so group 0's gradient stays open until then.
  const size_t cs = esize_;
  void* emb = prov.params(0);
  float* emb_g = prov.grads(0);
  be_.fill_zero(a.dln, BT * C * cs);
  be_.matmul_backward(a.dln, at(emb_g, wte_i), nullptr, a.logits, a.lnf, at(emb, wte_i), BT, C, Vl);
  prov.release_params(0);
  tp_all_reduce(a.dln, BT * C);  // each rank's vocabulary slice contributed a part
  be_.fill_zero(a.dres, BT * C * cs);
  const void* last = cfg_.n_layer > 0 ? el(a.res3, (cfg_.n_layer - 1) * BT * C) : a.encoded;
  void* lnf = prov.params(lnf_group);
  float* lnf_g = prov.grads(lnf_group);
  be_.layernorm_backward(a.dres, at(lnf_g, lnfw_i), at(lnf_g, lnfb_i), a.dln, last, at(lnf, lnfw_i),
                         a.lnf_mean, a.lnf_rstd, BT, C);
  prov.grads_done(lnf_group);
  prov.release_params(lnf_group);
  // dres is the gradient w.r.t. the residual stream (the same on every tensor-parallel rank);
  // each block adds its branches into it.
  for (int l = cfg_.n_layer - 1; l >= 0; --l) {
    const LayerPtrs<void*> w = layer(prov.params(1 + l), l);
    const LayerPtrs<float*> g = layer(prov.grads(1 + l), l);
    const void* residual = l == 0 ? a.encoded : el(a.res3, (l - 1) * BT * C);
    const void* ln1 = el(a.ln1, l * BT * C);
    const void* qkv = el(a.qkv, l * BT * 3 * Ca);
    const void* atty = el(a.atty, l * BT * Ca);
    const float* lse = a.att_lse + l * BT * NH;
    const void* res2 = el(a.res2, l * BT * C);
    const void* ln2 = el(a.ln2, l * BT * C);
    const void* fch = el(a.fch, l * BT * Fl);
    const void* fch_gelu = el(a.fch_gelu, l * BT * Fl);

    // MLP branch: res3 = res2 + c_proj(gelu(c_fc(ln_2(res2))))
    be_.fill_zero(a.dfch_gelu, BT * Fl * cs);
    be_.matmul_backward(a.dfch_gelu, g.fcprojw, g.fcprojb, a.dres, fch_gelu, w.fcprojw, BT, Fl, C);
    be_.fill_zero(a.dfch, BT * Fl * cs);
    be_.gelu_backward(a.dfch, fch, a.dfch_gelu, BT * Fl);
    be_.fill_zero(a.dln, BT * C * cs);
    be_.matmul_backward(a.dln, g.fcw, g.fcb, a.dfch, ln2, w.fcw, BT, C, Fl);
    tp_all_reduce(a.dln, BT * C);  // column-parallel input: sum of the ranks' parts
    be_.layernorm_backward(a.dres, g.ln2w, g.ln2b, a.dln, res2, w.ln2w, a.ln2_mean + l * BT,
                           a.ln2_rstd + l * BT, BT, C);
    // Attention branch: res2 = residual + c_proj(attn(c_attn(ln_1(residual))))
    be_.fill_zero(a.datty, BT * Ca * cs);
    be_.matmul_backward(a.datty, g.attprojw, g.attprojb, a.dres, atty, w.attprojw, BT, Ca, C);
    be_.fill_zero(a.dqkv, BT * 3 * Ca * cs);
    be_.attention_backward(a.dqkv, a.datty, atty, qkv, lse, B, T, Ca, NH);
    be_.fill_zero(a.dln, BT * C * cs);
    be_.matmul_backward(a.dln, g.qkvw, g.qkvb, a.dqkv, ln1, w.qkvw, BT, C, 3 * Ca);
    tp_all_reduce(a.dln, BT * C);
    be_.layernorm_backward(a.dres, g.ln1w, g.ln1b, a.dln, residual, w.ln1w, a.ln1_mean + l * BT,
                           a.ln1_rstd + l * BT, BT, C);
    prov.grads_done(1 + l);
    prov.release_params(1 + l);
  }
  be_.embedding_backward(at(emb_g, wte_i), at(emb_g, wpe_i), a.dres, d_inputs, B, T, C);
  slot_free_[token_slot_] = be_.mark();  // the token slot's last reader
  prov.grads_done(0);
  grads_ready_ = false;
}

}  // namespace zt
