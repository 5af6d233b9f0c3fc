// Model registry (see registry.h).
#include "engine/model/registry.h"

#include <algorithm>

#include "engine/comm/comm.h"
#include "engine/core/status.h"
#include "engine/model/activation_arena.h"
#include "models/gpt2.h"
#include "models/llama.h"

namespace zt {

namespace {
// The vocabulary as held: padded to a multiple of vocab_multiple x T (Megatron-LM's
// make-vocab-size-divisible-by), so that each tensor-parallel rank holds an equal slice.
int64_t held_vocab(const RunSpec::Model& m, int tp) {
  const int64_t k = m.vocab_multiple * tp;
  return (m.vocab_size + k - 1) / k * k;
}

LlamaConfig llama_config(const RunSpec::Model& m, int tp, Recompute rc) {
  LlamaConfig c;
  c.n_layer = int(m.n_layer);
  c.n_head = int(m.n_head);
  c.n_kv_head = int(m.n_kv_head);
  c.d_model = int(m.d_model);
  c.d_ff = int(m.d_ff);
  c.vocab_size = int(m.vocab_size);
  c.seq_len = int(m.seq_len);
  c.vocab_padded = int(held_vocab(m, tp));
  c.rope_theta = float(m.rope_theta);
  c.norm_eps = float(m.norm_eps);
  c.tie_embeddings = m.tie_embeddings;
  c.recompute = rc;
  return c;
}
}  // namespace

Recompute recompute_of(const std::string& name) {
  return name == "full" ? Recompute::Full : name == "selective" ? Recompute::Selective : Recompute::None;
}

std::unique_ptr<Model> make_model(const RunSpec::Model& m, Backend& backend, int max_batch, Comm* tp, Recompute rc) {
  const int T = tp ? tp->size() : 1;
  if (m.arch == "gpt2")
    return std::make_unique<GPT2>(GPT2Config{int(m.n_layer), int(m.n_head), int(m.d_model), int(m.d_ff),
                                             int(m.vocab_size), int(m.seq_len), int(held_vocab(m, T)),
                                             float(m.norm_eps), rc},
                                  backend, max_batch, tp);
  if (m.arch == "llama") return std::make_unique<Llama>(llama_config(m, T, rc), backend, max_batch, tp);
  // The spec's validation names the supported architectures; reaching here is a missing entry.
  throw UserError(fmt::format("[model] arch = \"{}\" is not a supported architecture", m.arch));
}

ModelFootprint model_footprint(const RunSpec::Model& m, int max_batch, int tp, size_t compute_size, Recompute rc) {
  // layers of the slots full recompute keeps one of (Lw), and selective too (Ln)
  const double Lw = rc == Recompute::Full ? 1 : double(m.n_layer), Ln = rc == Recompute::None ? double(m.n_layer) : 1;
  if (m.arch == "gpt2") {
    // doubles throughout: the config's ints could overflow for absurd specs (the point of asking)
    const double L = double(m.n_layer), C = double(m.d_model), F = double(m.d_ff), V = double(held_vocab(m, tp));
    const double T = double(m.seq_len), B = double(max_batch), P = double(tp), NH = double(m.n_head) / P;
    ModelFootprint f;
    // the parameter table of GPT2's constructor: vocabulary-parallel wte, replicated wpe and norms,
    // column-parallel c_attn and c_fc, row-parallel projections (their biases replicated)
    f.params = V * C / P + T * C + L * (4 * C + 3 * C * C / P + 3 * C / P + C * C / P + C + 2 * F * C / P + F / P + C) +
               2 * C;
    // its activation slots (GPT2's constructor): compute-precision tensors and fp32 statistics
    const double BT = B * T, Ca = C / P, Fl = F / P, Vl = V / P;
    f.activation_bytes = activation_bytes(
        {BT * C, Ln * BT * C, Lw * BT * 3 * Ca, Lw * BT * Ca, Lw * BT * C, Lw * BT * C, Ln * BT * C, Lw * BT * Fl,
         Lw * BT * Fl, Lw * BT * C, L * BT * C, BT * C, BT * Vl, BT * C, BT * C, BT * 3 * Ca, BT * Ca, BT * Fl},
        {2 * Ln * BT, Lw * B * NH * T, 2 * Ln * BT, 2 * BT}, compute_size);
    return f;
  }
  if (m.arch == "llama") {
    const double L = double(m.n_layer), C = double(m.d_model), F = double(m.d_ff), V = double(held_vocab(m, tp));
    const double P = double(tp), hs = C / double(m.n_head);
    const double KVl = std::max(1.0, double(m.n_kv_head) / P) * hs;  // replicated when tp > n_kv_head
    ModelFootprint f;
    // the parameter table of Llama's constructor: vocabulary-parallel embedding (and head when
    // untied), replicated norms, column-parallel q/k/v and gate/up, row-parallel o and down
    f.params = V * C / P * (m.tie_embeddings ? 1 : 2) + C +
               L * (2 * C + C * C / P + 2 * KVl * C + C * C / P + 3 * F * C / P);
    const double T = double(m.seq_len), B = double(max_batch), BT = B * T;
    const double Wq = C / P, Wqkv = Wq + 2 * KVl, Fl = F / P, Vl = V / P, NHl = double(m.n_head) / P;
    // its activation slots (llama.cpp's constructor)
    f.activation_bytes = activation_bytes(
        {BT * C, Ln * BT * C, Lw * BT * Wqkv, Lw * BT * Wq, Lw * BT * C, Lw * BT * C, Ln * BT * C,
         Lw * BT * 2 * Fl, Ln * BT * Fl, Lw * BT * C, L * BT * C, BT * C, BT * Vl, BT * C, BT * C, BT * Wqkv, BT * Wq,
         BT * 2 * Fl, BT * Fl},
        {Ln * BT, Lw * B * NHl * T, Ln * BT, BT}, compute_size);
    return f;
  }
  throw UserError(fmt::format("[model] arch = \"{}\" is not a supported architecture", m.arch));
}

}  // namespace zt
