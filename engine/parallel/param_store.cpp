// ParamStore: ZeRO stages 0-3 over the data-parallel group (see param_store.h).
#include "engine/parallel/param_store.h"

#include <algorithm>
#include <cmath>

#include "engine/core/status.h"

namespace zt {

namespace {
std::vector<size_t> group_sizes(const Model& m) {
  std::vector<size_t> n;
  for (const ParamGroup& g : m.groups()) n.push_back(g.numel);
  return n;
}
}  // namespace

ParamStore::ParamStore(const Model& model, Backend& be, const Topology& topo, const RunSpec& spec)
    : model_(model),
      be_(be),
      topo_(topo),
      dp_(*topo.dp_group),
      stage_(int(spec.parallel.zero_stage)),
      prefetch_(int(spec.parallel.prefetch)),
      ct_(be.compute_dtype()),
      esize_(dtype_size(ct_)),
      mixed_(ct_ != DType::F32),
      // Units padded to a multiple of 2P in mixed precision: whole 32-bit words per 16-bit shard.
      layout_(group_sizes(model), stage_ == 0 ? 1 : topo.dp, stage_ == 0 ? 0 : topo.dp_rank,
              size_t(spec.parallel.bucket_mb * 1048576.0 / sizeof(float)),
              size_t(stage_ == 0 ? 1 : topo.dp) * (mixed_ ? 2 : 1)),
      units_(layout_.units()) {
  auto alloc = [&](size_t n, MemTag tag) { return static_cast<float*>(be_.alloc(n * sizeof(float), tag)); };
  if (sharded_masters()) shard_params_ = alloc(layout_.total_shard(), MemTag::Params);
  else full_params_ = alloc(layout_.total_full(), MemTag::Params);
  if (stage_ <= 1) full_grads_ = alloc(layout_.total_full(), MemTag::Grads);
  if (stage_ >= 1) grad_shard_ = alloc(layout_.total_shard(), MemTag::Grads);
  const size_t moments = stage_ == 0 ? layout_.total_full() : layout_.total_shard();
  m_ = alloc(moments, MemTag::OptimStates);
  v_ = alloc(moments, MemTag::OptimStates);
  if (mixed_ && stage_ <= 2) full_compute_ = be_.alloc(layout_.total_full() * esize_, MemTag::Params);
  if (mixed_ && stage_ == 3) shard_compute_ = be_.alloc(layout_.total_shard() * esize_, MemTag::Params);
  build_spans();
}

ParamStore::~ParamStore() {
  try {
    complete_all();
  } catch (...) {
  }
  for (auto& [g, gb] : gathered_) be_.free(gb.buf);
  for (auto& [g, buf] : grad_tmp_) be_.free(buf);
  for (void* p : {(void*)full_params_, (void*)shard_params_, (void*)full_grads_, (void*)grad_shard_, (void*)m_,
                  (void*)v_, full_compute_, shard_compute_})
    be_.free(p);
}

float* ParamStore::shard_params(const Unit& u) {
  return sharded_masters() ? shard_params_ + u.shard_off : full_params_ + u.full_off + my_begin(u);
}

void* ParamStore::compute_copy(const Unit& u) {
  if (!mixed_) return nullptr;
  return stage_ == 3 ? cbyte(shard_compute_, u.shard_off) : cbyte(full_compute_, u.full_off + my_begin(u));
}

Comm::Handle ParamStore::all_gather_compute(const void* send, void* recv, size_t elems) {
  // Compute-precision elements travel as 32-bit words (16-bit shards have even lengths): an
  // all-gather only moves bytes.
  return dp_.all_gather(static_cast<const float*>(send), static_cast<float*>(recv), elems * esize_ / sizeof(float));
}

void ParamStore::gather_compute_copy() {
  // Each rank's part of the compute copy was written by its AdamW.
  std::vector<Comm::Handle> hs;
  for (const Unit& u : units_) hs.push_back(all_gather_compute(compute_copy(u), cbyte(full_compute_, u.full_off), u.shard));
  for (auto h : hs) dp_.wait(h);
}

float* ParamStore::shard_grads(const Unit& u) {
  return stage_ == 0 ? full_grads_ + u.full_off : grad_shard_ + u.shard_off;
}

void ParamStore::init(uint64_t seed) {
  const auto& groups = model_.groups();
  std::vector<float> host;
  if (!sharded_masters()) {
    for (size_t g = 0; g < groups.size(); ++g) {
      host.assign(groups[g].numel, 0.0f);
      model_.init_range(seed, groups[g].offset, groups[g].offset + groups[g].numel, host.data());
      be_.copy_to_device(full_params_ + layout_.group_full_off(g), host.data(), host.size() * sizeof(float));
    }
    if (mixed_) be_.convert(full_compute_, ct_, full_params_, DType::F32, int64_t(layout_.total_full()));
    return;
  }
  for (const Unit& u : units_) {  // only this rank's fp32 shards are ever materialized
    const size_t n = my_len(u);
    if (n == 0) continue;
    const size_t lo = groups[u.group].offset + u.begin + my_begin(u);
    host.assign(n, 0.0f);
    model_.init_range(seed, lo, lo + n, host.data());
    be_.copy_to_device(shard_params_ + u.shard_off, host.data(), n * sizeof(float));
    if (mixed_) be_.convert(compute_copy(u), ct_, shard_params_ + u.shard_off, DType::F32, int64_t(n));
  }
  if (stage_ <= 2) gather_compute_copy();  // stages 1-2 (mixed): every rank needs the full copy
}

void ParamStore::zero_grad() {
  if (full_grads_) be_.fill_zero(full_grads_, layout_.total_full() * sizeof(float));
  if (grad_shard_) be_.fill_zero(grad_shard_, layout_.total_shard() * sizeof(float));
}

// ---- parameters ----

void ParamStore::begin_pass(const std::vector<int>& order) {
  // A group's gradient buffer may still be in flight from the previous micro-batch (group 0 is
  // the last one done); finish it before the model opens the group again.
  if (stage_ >= 2) complete_all();
  order_ = order;
  order_pos_ = 0;
}

void ParamStore::gather_group(int g) {
  if (gathered_.count(g)) return;
  Gathered& gb = gathered_[g];
  gb.buf = be_.alloc(layout_.group_padded(g) * esize_, MemTag::CommBuffers);
  for (int ui : layout_.group_units(g)) {
    const Unit& u = units_[ui];
    const void* src = mixed_ ? cbyte(shard_compute_, u.shard_off) : shard_params_ + u.shard_off;
    gb.handles.push_back(all_gather_compute(src, cbyte(gb.buf, u.full_off - layout_.group_full_off(g)), u.shard));
  }
}

void* ParamStore::params(int g) {
  if (stage_ <= 2) return mixed_ ? cbyte(full_compute_, layout_.group_full_off(g)) : full_params_ + layout_.group_full_off(g);
  gather_group(g);
  // Prefetch: start the gathers of the next groups of this pass while this one computes.
  while (order_pos_ < order_.size() && order_[order_pos_] != g) ++order_pos_;
  for (size_t k = order_pos_ + 1; k < order_.size() && k <= order_pos_ + size_t(prefetch_); ++k)
    gather_group(order_[k]);
  if (order_pos_ < order_.size()) ++order_pos_;
  Gathered& gb = gathered_[g];
  for (auto h : gb.handles) dp_.wait(h);
  gb.handles.clear();
  return gb.buf;
}

void ParamStore::release_params(int g) {
  if (stage_ <= 2) return;
  auto it = gathered_.find(g);
  if (it == gathered_.end()) return;
  for (auto h : it->second.handles) dp_.wait(h);
  be_.free(it->second.buf);
  gathered_.erase(it);
}

// ---- gradients ----

float* ParamStore::grads(int g) {
  if (stage_ <= 1) return full_grads_ + layout_.group_full_off(g);
  auto it = grad_tmp_.find(g);
  if (it != grad_tmp_.end()) return it->second;
  float* buf = static_cast<float*>(be_.alloc(layout_.group_padded(g) * sizeof(float), MemTag::CommBuffers));
  grad_tmp_[g] = buf;
  return buf;
}

void ParamStore::grads_done(int g) {
  if (stage_ <= 1 && !last_micro_) return;  // accumulate locally until the step's last micro-batch
  // Stages 2-3: at most one group in flight, which bounds the temporary gradient buffers.
  if (stage_ >= 2) complete_all();
  Pending p;
  p.group = g;
  if (stage_ == 0) {
    for (int ui : layout_.group_units(g))
      p.handles.push_back(dp_.all_reduce(full_grads_ + units_[ui].full_off, units_[ui].padded, ReduceOp::Sum));
  } else if (stage_ == 1) {
    for (int ui : layout_.group_units(g)) {
      const Unit& u = units_[ui];
      p.handles.push_back(dp_.reduce_scatter(full_grads_ + u.full_off, grad_shard_ + u.shard_off, u.shard));
    }
  } else {
    float* tmp = grad_tmp_.at(g);
    size_t shards = 0;
    for (int ui : layout_.group_units(g)) shards += units_[ui].shard;
    p.recv = static_cast<float*>(be_.alloc(shards * sizeof(float), MemTag::CommBuffers));
    size_t off = 0;
    for (int ui : layout_.group_units(g)) {
      const Unit& u = units_[ui];
      p.handles.push_back(dp_.reduce_scatter(tmp + (u.full_off - layout_.group_full_off(g)), p.recv + off, u.shard));
      off += u.shard;
    }
  }
  pending_.push_back(std::move(p));
}

void ParamStore::complete(Pending& p) {
  for (auto h : p.handles) dp_.wait(h);
  if (p.recv) {  // stages 2-3: add this micro-batch's reduced shard, free the group's buffers
    size_t off = 0;
    for (int ui : layout_.group_units(p.group)) {
      const Unit& u = units_[ui];
      be_.add(grad_shard_ + u.shard_off, grad_shard_ + u.shard_off, p.recv + off, int64_t(u.shard));
      off += u.shard;
    }
    be_.free(p.recv);
    be_.free(grad_tmp_.at(p.group));
    grad_tmp_.erase(p.group);
  }
}

void ParamStore::complete_all() {
  for (auto& p : pending_) complete(p);
  pending_.clear();
}

void ParamStore::finish_backward() { complete_all(); }

// ---- optimizer ----

void ParamStore::build_spans() {
  // Replicated tensors (norms, row-parallel biases, positions) are the same on every
  // tensor-parallel rank and count in the gradient norm on rank 0 of the group only.
  const bool count_replicated = topo_.tp_rank == 0;
  for (const Unit& u : units_) {
    StateSpan s;
    s.master = shard_params(u);
    s.grad = shard_grads(u);
    s.m = m_ + (stage_ == 0 ? u.full_off : u.shard_off);
    s.v = v_ + (stage_ == 0 ? u.full_off : u.shard_off);
    s.compute = compute_copy(u);
    s.n = my_len(u);
    s.all_counted = count_replicated;
    layout_.for_each_tensor_piece(model_.table(), u, [&](size_t param, size_t off, size_t n) {
      const ParamInfo& info = model_.params()[param];
      s.pieces.push_back({off, n, info.decay, info.tp_primary(topo_.tp_rank)});
      // Runs of consecutive elements in the full tensor (a column-split tensor: one per row).
      const size_t local0 = off + (model_.groups()[size_t(u.group)].offset + u.begin + my_begin(u)) - info.offset;
      // A local row is contiguous in the full tensor; extend a run row by row while it stays so.
      const size_t cols = info.shape.size() > 1 ? size_t(info.shape[1])
                         : info.split == TpSplit::None ? local0 + n : 1;
      auto gidx = [&](size_t local) { return model_.table().global_index(info, local, topo_.tp_rank); };
      for (size_t k = 0; k < n;) {
        const size_t g0 = gidx(local0 + k);
        size_t len = std::min(n - k, cols - (local0 + k) % cols);
        while (k + len < n && gidx(local0 + k + len) == g0 + len) len += std::min(n - k - len, cols);
        const bool owner = (stage_ != 0 || topo_.dp_rank == 0) && info.tp_primary(topo_.tp_rank);
        runs_.push_back({int(param), g0, len, int(spans_.size()), off + k, owner});
        k += len;
      }
    });
    spans_.push_back(std::move(s));
  }
}

Comm& ParamStore::norm_group() const {
  // Stage 0 grads are whole on every data-parallel rank: the tensor-parallel group holds them once.
  return stage_ == 0 ? *topo_.tp_group : *topo_.world;
}

void ParamStore::publish_params() {
  if (stage_ != 1 && stage_ != 2) return;  // every rank needs the full updated parameters again
  if (mixed_) {
    gather_compute_copy();  // in compute precision: half the bytes of the fp32 masters
    return;
  }
  std::vector<Comm::Handle> hs;
  for (const Unit& u : units_)
    hs.push_back(dp_.all_gather(full_params_ + u.full_off + my_begin(u), full_params_ + u.full_off, u.shard));
  for (auto h : hs) dp_.wait(h);
}

float* ParamStore::state_ptr(State st, const GlobalRun& r) const {
  const StateSpan& s = spans_[size_t(r.span)];
  float* base = st == State::Master ? s.master : st == State::Grad ? s.grad : st == State::AdamM ? s.m : s.v;
  return base + r.span_off;
}

void ParamStore::read_run(State st, const GlobalRun& r, size_t off, size_t n, float* host) const {
  ZT_CHECK(off + n <= r.n, "read_run: [{}, {}) beyond a run of {}", off, off + n, r.n);
  be_.copy_to_host(host, state_ptr(st, r) + off, n * sizeof(float));
}

void ParamStore::write_run(State st, const GlobalRun& r, size_t off, size_t n, const float* host) {
  ZT_CHECK(off + n <= r.n, "write_run: [{}, {}) beyond a run of {}", off, off + n, r.n);
  be_.copy_to_device(state_ptr(st, r) + off, host, n * sizeof(float));
}

void ParamStore::publish_written_masters() {
  if (mixed_)
    for (const StateSpan& s : spans_)
      if (s.n) be_.convert(s.compute, ct_, s.master, DType::F32, int64_t(s.n));
  publish_params();
}

// ---- full views (dumps, tests) ----

std::vector<float> ParamStore::to_global(const std::vector<float>& local) {
  if (topo_.tp == 1) return local;
  // Every tensor-parallel rank's local flat vector, then each element to its place in the full
  // tensors (ParamTable::global_index).
  const size_t n = local.size();
  std::vector<float> all(n * size_t(topo_.tp));
  topo_.tp_group->wait(topo_.tp_group->all_gather(local.data(), all.data(), n));
  std::vector<float> out(model_.num_global_params());
  for (int q = 0; q < topo_.tp; ++q)
    for (const ParamInfo& p : model_.params())
      for (size_t i = 0; i < p.numel; ++i)
        out[p.global_offset + model_.table().global_index(p, i, q)] = all[size_t(q) * n + p.offset + i];
  return out;
}

std::vector<float> ParamStore::full_params() {
  // The fp32 masters (not the compute copy), whatever the precision.
  return full_view(sharded_masters() ? nullptr : full_params_, shard_params_);
}

std::vector<float> ParamStore::full_compute_params() {
  if (!mixed_) return {};
  const size_t n = stage_ == 3 ? layout_.total_shard() : layout_.total_full();
  float* wide = static_cast<float*>(be_.alloc(n * sizeof(float), MemTag::CommBuffers));
  be_.convert(wide, DType::F32, stage_ == 3 ? shard_compute_ : full_compute_, ct_, int64_t(n));
  std::vector<float> out = stage_ == 3 ? full_view(nullptr, wide) : full_view(wide, nullptr);
  be_.free(wide);
  return out;
}

std::vector<float> ParamStore::full_grads() { return full_view(stage_ == 0 ? full_grads_ : nullptr, grad_shard_); }

std::vector<float> ParamStore::full_view(const float* full, const float* shards) {
  const auto& groups = model_.groups();
  std::vector<float> out(model_.num_params());
  if (full) {
    for (size_t g = 0; g < groups.size(); ++g)
      be_.copy_to_host(out.data() + groups[g].offset, full + layout_.group_full_off(g), groups[g].numel * sizeof(float));
    return to_global(out);
  }
  float* buf = static_cast<float*>(be_.alloc(layout_.total_full() * sizeof(float), MemTag::CommBuffers));
  for (const Unit& u : units_) dp_.wait(dp_.all_gather(shards + u.shard_off, buf + u.full_off, u.shard));
  for (const Unit& u : units_)
    be_.copy_to_host(out.data() + groups[u.group].offset + u.begin, buf + u.full_off, u.len * sizeof(float));
  be_.free(buf);
  return to_global(out);
}

}  // namespace zt
