// The decoder's group walk (see decoder_pass.h).
#include "engine/model/decoder_pass.h"

#include <vector>

namespace zt {

void DecoderPass::forward(const Forward& f) const {
  std::vector<int> order = {0};
  for (int l = 0; l < n_layer; ++l) order.push_back(1 + l);
  order.push_back(head);
  if (tied) order.push_back(0);
  prov.begin_pass(order);
  if (adapters) {
    std::vector<int> blocks;
    for (int l = 0; l < n_layer; ++l) blocks.push_back(l);
    adapters->begin_pass(blocks);
  }
  f.embed(prov.params(0));
  prov.release_params(0);
  f.embedded();
  for (int l = 0; l < n_layer; ++l) {
    if (adapters) adapters->enter(l, false);
    f.block(l, prov.params(1 + l));
    prov.release_params(1 + l);
    if (adapters) adapters->leave(l, false);
  }
  void* hp = prov.params(head);
  f.final_norm(hp);
  if (tied) {
    prov.release_params(head);
    f.logits(prov.params(0));
    prov.release_params(0);
  } else {
    f.logits(hp);
    prov.release_params(head);
  }
}

void DecoderPass::backward(const Backward& b) const {
  std::vector<int> order;
  order.push_back(head);
  for (int l = n_layer - 1; l >= 0; --l) order.push_back(1 + l);
  prov.begin_pass(order);  // the params() calls; the embedding needs only its gradient
  if (adapters) {
    std::vector<int> blocks;
    for (int l = n_layer - 1; l >= 0; --l) blocks.push_back(l);
    adapters->begin_pass(blocks);
  }
  float* emb_g = nullptr;
  if (tied) {
    emb_g = prov.grads(0);
    b.logits(emb_g);
  }
  void* hp = prov.params(head);
  float* hg = prov.grads(head);
  if (!tied) b.logits(hg);
  b.final_norm(hp, hg);
  prov.grads_done(head);
  prov.release_params(head);
  for (int l = n_layer - 1; l >= 0; --l) {
    if (adapters) adapters->enter(l, true);
    void* w = prov.params(1 + l);
    float* g = prov.grads(1 + l);
    b.block(l, w, g);
    prov.grads_done(1 + l);
    prov.release_params(1 + l);
    if (adapters) adapters->leave(l, true);
  }
  if (!emb_g) emb_g = prov.grads(0);
  b.embed(emb_g);
  prov.grads_done(0);
}

}  // namespace zt
