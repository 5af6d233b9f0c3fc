// ParamStore's views of this rank's states (the ModelStates interface, engine/model/model_states.h):
// runs in global coordinates read and written by checkpoints and imports, and the full tensors
// gathered for debugging and tests. The ZeRO machinery itself is param_store.cpp.
#include "engine/parallel/param_store.h"

#include <algorithm>
#include <cstring>

#include "engine/core/status.h"

namespace zt {

float* ParamStore::state_ptr(State st, const GlobalRun& r) const {
  const StateSpan& s = spans_[size_t(r.span)];
  float* base = st == State::Master ? s.master : st == State::Grad ? s.grad : st == State::AdamM ? s.m : s.v;
  return base + r.span_off;
}

void ParamStore::read_run(State st, const GlobalRun& r, size_t off, size_t n, float* host) const {
  ZT_CHECK(off + n <= r.n, "read_run: [{}, {}) beyond a run of {}", off, off + n, r.n);
  ZT_CHECK(!frozen_ || st == State::Master, "read_run: a frozen store holds parameters only");
  if (frozen_ && mixed_) {  // the compute copy's values, widened
    float* wide = static_cast<float*>(be_.alloc(n * sizeof(float), MemTag::CommBuffers));
    be_.convert(wide, DType::F32, cbyte(spans_[size_t(r.span)].compute, r.span_off + off), ct_, int64_t(n));
    be_.copy_to_host(host, wide, n * sizeof(float));
    be_.free(wide);
    return;
  }
  if (in_file(st)) {
    tier_->read(st, span_flat_[size_t(r.span)] + r.span_off + off, host, n);
    return;
  }
  const float* src = state_ptr(st, r) + off;
  tier_->owner(src, be_).copy_to_host(host, src, n * sizeof(float));
}

void ParamStore::write_run(State st, const GlobalRun& r, size_t off, size_t n, const float* host) {
  ZT_CHECK(off + n <= r.n, "write_run: [{}, {}) beyond a run of {}", off, off + n, r.n);
  ZT_CHECK(!frozen_ || st == State::Master, "write_run: a frozen store holds parameters only");
  new_params_version();  // a frozen store's compute copy changes here, before publish_written_masters
  if (frozen_ && mixed_) {  // straight into the compute copy (publish_written_masters spreads it)
    write_compute(cbyte(spans_[size_t(r.span)].compute, r.span_off + off), host, n);
    return;
  }
  if (in_file(st)) {
    tier_->write(st, span_flat_[size_t(r.span)] + r.span_off + off, host, n);
    return;
  }
  float* dst = state_ptr(st, r) + off;
  tier_->owner(dst, be_).copy_to_device(dst, host, n * sizeof(float));
}

void ParamStore::publish_written_masters() {
  Backend& ob = optimizer_backend();  // where the masters and the spans' compute copies live
  if (tier_->streams()) {  // the masters, block by block, into the host's compute copy
    tier_->stream(false, false, [&](size_t b0, size_t n, float* master, float*, float*, void* cblock) {
      ob.convert(cblock ? cblock : cbyte(tier_->compute(), b0), ct_, master, DType::F32, int64_t(n));
    });
    publish_params();
    return;
  }
  if (mixed_ && !frozen_)  // frozen: written into the compute copy already
    for (const StateSpan& s : spans_)
      if (s.n) ob.convert(s.compute, ct_, s.master, DType::F32, int64_t(s.n));
  publish_params();
}

// ---- full views (dumps, tests) ----

std::vector<float> ParamStore::to_global(const std::vector<float>& local) {
  if (topo_.tp == 1) return local;
  // Every tensor-parallel rank's local flat vector, then each element to its place in the full
  // tensors (ParamTable::global_index).
  // The gather runs between the backend's buffers: a device communicator takes device memory
  // only, and its wait orders the compute stream (which copy_to_host follows), not the host.
  const size_t n = local.size();
  std::vector<float> all(n * size_t(topo_.tp));
  float* dev = static_cast<float*>(be_.alloc(all.size() * sizeof(float), MemTag::CommBuffers));
  be_.copy_to_device(dev + size_t(topo_.tp_rank) * n, local.data(), n * sizeof(float));
  topo_.tp_group->wait(topo_.tp_group->all_gather(dev + size_t(topo_.tp_rank) * n, dev, n));
  be_.copy_to_host(all.data(), dev, all.size() * sizeof(float));
  be_.free(dev);
  std::vector<float> out(table_.num_global_params());
  for (int q = 0; q < topo_.tp; ++q)
    for (const ParamInfo& p : table_.params())
      for (size_t i = 0; i < p.numel; ++i)
        out[p.global_offset + table_.global_index(p, i, q)] = all[size_t(q) * n + p.offset + i];
  return out;
}

std::vector<float> ParamStore::full_params() {
  // The fp32 masters (not the compute copy), whatever the precision; frozen, the compute copy's.
  if (frozen_ && mixed_) return full_compute_params();
  if (tier_->streams()) {  // read the masters back from the file
    std::vector<float> flat(flat_n_);
    tier_->read(State::Master, 0, flat.data(), flat.size());
    if (!sharded_masters()) return full_view(flat.data(), nullptr, true);
    float* dev = static_cast<float*>(be_.alloc(flat.size() * sizeof(float), MemTag::CommBuffers));
    be_.copy_to_device(dev, flat.data(), flat.size() * sizeof(float));
    std::vector<float> out = full_view(nullptr, dev);
    be_.free(dev);
    return out;
  }
  return full_view(sharded_masters() ? nullptr : full_params_, shard_params_);
}

const float* ParamStore::device_copy(const float* p, size_t n, float** owned) {
  // Host-resident states go through a device buffer for the collectives of the full views.
  *owned = nullptr;
  if (!p || &tier_->owner(p, be_) == &be_) return p;
  *owned = static_cast<float*>(be_.alloc(n * sizeof(float), MemTag::CommBuffers));
  be_.copy_to_device(*owned, p, n * sizeof(float));
  return *owned;
}

std::vector<float> ParamStore::full_compute_params() {
  if (!mixed_ || ct_ == DType::F32) return {};  // offload in fp32: the "copy" is the fp32 parameters
  if (offload_params_) {  // the compute shards live on the host
    std::vector<float> wide(layout_.total_shard());
    std::vector<char> scratch;
    const void* shards = tier_->compute_shards(scratch);
    tier_->backend().convert(wide.data(), DType::F32, shards, ct_, int64_t(wide.size()));
    float* dev = static_cast<float*>(be_.alloc(wide.size() * sizeof(float), MemTag::CommBuffers));
    be_.copy_to_device(dev, wide.data(), wide.size() * sizeof(float));
    std::vector<float> out = full_view(nullptr, dev);
    be_.free(dev);
    return out;
  }
  const size_t n = stage_ == 3 ? layout_.total_shard() : layout_.total_full();
  float* wide = static_cast<float*>(be_.alloc(n * sizeof(float), MemTag::CommBuffers));
  be_.convert(wide, DType::F32, stage_ == 3 ? shard_compute_ : full_compute_, ct_, int64_t(n));
  std::vector<float> out = stage_ == 3 ? full_view(nullptr, wide) : full_view(wide, nullptr);
  be_.free(wide);
  return out;
}

std::vector<float> ParamStore::full_grads() {
  if (tier_->offloaded()) return full_view(stage_ == 0 ? tier_->grad() : nullptr, tier_->grad());
  return full_view(stage_ == 0 ? full_grads_ : nullptr, grad_shard_);
}

std::vector<float> ParamStore::full_view(const float* full, const float* shards_in, bool full_on_host) {
  const auto& groups = table_.groups();
  std::vector<float> out(table_.num_params());
  if (full) {
    for (size_t g = 0; g < groups.size(); ++g) {
      const float* src = full + layout_.group_full_off(g);
      if (full_on_host) std::memcpy(out.data() + groups[g].offset, src, groups[g].numel * sizeof(float));
      else tier_->owner(src, be_).copy_to_host(out.data() + groups[g].offset, src, groups[g].numel * sizeof(float));
    }
    return to_global(out);
  }
  float* owned = nullptr;
  const float* shards = device_copy(shards_in, layout_.total_shard(), &owned);
  float* buf = static_cast<float*>(be_.alloc(layout_.total_full() * sizeof(float), MemTag::CommBuffers));
  for (const Unit& u : units_) zero_.wait(zero_.all_gather(shards + u.shard_off, buf + u.full_off, u.shard));
  if (owned) be_.free(owned);
  for (const Unit& u : units_)
    be_.copy_to_host(out.data() + groups[u.group].offset + u.begin, buf + u.full_off, u.len * sizeof(float));
  be_.free(buf);
  return to_global(out);
}

}  // namespace zt
