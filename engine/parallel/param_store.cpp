// ParamStore: ZeRO stages 0-3 over the data-parallel group (see param_store.h).
#include "engine/parallel/param_store.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "engine/backend/fp8_recipe.h"
#include "engine/core/status.h"

namespace zt {

namespace {
std::vector<size_t> group_sizes(const ParamTable& t) {
  std::vector<size_t> n;
  for (const ParamGroup& g : t.groups()) n.push_back(g.numel);
  return n;
}
}  // namespace

ParamStore::ParamStore(const ParamTable& table, Backend& be, const Topology& topo, const ZeroPlacement& place,
                       bool frozen, const std::vector<Fp8WeightRange>& fp8_weights)
    : table_(table),
      frozen_(frozen),
      be_(be),
      topo_(topo),
      zero_(topo.zero_group()),
      stage_(place.stage),
      prefetch_(place.prefetch),
      ct_(be.compute_dtype()),
      esize_(dtype_size(ct_)),
      mixed_(ct_ != DType::F32 || place.offloads_optimizer()),
      fp8_(fp8_gathered_weights(fp8_weights, place, size_t(topo.shard_size()), esize_)),
      fp8_cuts_(fp8_gather_cuts(fp8_, table)),
      // Units padded to a multiple of 2P in mixed precision: whole 32-bit words per 16-bit shard
      // (4P with the FP8 gather: per byte shard). ZeRO's parts: the data-parallel ranks, or with
      // replicas the ranks of one replica
      layout_(group_sizes(table), stage_ == 0 ? 1 : topo.shard_size(), stage_ == 0 ? 0 : topo.shard_rank(),
              size_t(place.bucket_mb * 1048576.0 / sizeof(float)),
              size_t(stage_ == 0 ? 1 : topo.shard_size()) * (!fp8_.empty() ? 4 : mixed_ ? 2 : 1), fp8_cuts_),
      units_(layout_.units()) {
  offload_params_ = place.offloads_compute_shards();
  flat_n_ = stage_ == 0 ? layout_.total_full() : layout_.total_shard();  // masters and moments alike
  ZT_CHECK(!frozen_ || !place.offloads_optimizer(), "a frozen store with offload");
  TierShape shape;
  // frozen: no moments; fp32 masters only when they are the parameters the model reads (fp32)
  shape.flat = frozen_ ? 0 : flat_n_;
  shape.master_elems = frozen_ && mixed_ ? 0 : sharded_masters() ? layout_.total_shard() : layout_.total_full();
  shape.compute = ct_;
  for (size_t g = 0; g < table_.groups().size(); ++g)
    shape.largest_group_shard_bytes = std::max(shape.largest_group_shard_bytes, group_shard_bytes(int(g)));
  shape.rank = topo.world_rank;
  tier_ = make_state_tier(be_, place, shape, clock_);
  (sharded_masters() ? shard_params_ : full_params_) = tier_->masters();  // null on NVMe: streamed
  auto alloc = [&](size_t n, MemTag tag) { return static_cast<float*>(be_.alloc(n * sizeof(float), tag)); };
  if (stage_ <= 1 && !frozen_) full_grads_ = alloc(layout_.total_full(), MemTag::Grads);
  // with optimizer offload, stages 2-3 accumulate the gradient shard on the host only
  if (!frozen_ && (stage_ == 1 || (stage_ >= 2 && !tier_->offloaded())))
    grad_shard_ = alloc(layout_.total_shard(), MemTag::Grads);
  if (mixed_ && stage_ <= 2) full_compute_ = be_.alloc(layout_.total_full() * esize_, MemTag::Params);
  if (mixed_ && stage_ == 3 && !offload_params_)
    shard_compute_ = be_.alloc(layout_.total_shard() * esize_, MemTag::Params);
  index_fp8_units();
  build_spans();
}

ParamStore::~ParamStore() {
  units_final_ = nullptr;  // an early update still scheduled (a step that failed midway) gets no more
  closing_ = true;         // and no new collective across replicas: its peers may be gone
  try {
    complete_all();
    // the all-reduces across replicas in flight write grad_shard_: done before it is freed
    for (const Comm::Handle h : across_replicas_) topo_.replica_group->wait(h);
  } catch (...) {
  }
  try {
    while (!gathered_.empty()) drop_gathered(gathered_.begin());
    be_.wait_upload(last_upload_);  // the latest upload from pinned memory: every earlier one too
  } catch (...) {
  }
  for (auto& [g, buf] : grad_tmp_) be_.free(buf);
  for (void* p : {(void*)full_grads_, (void*)grad_shard_, full_compute_, shard_compute_, (void*)fp8_shards_,
                  (void*)fp8_amax_, (void*)fp8_scales_})
    be_.free(p);
  tier_.reset();  // its reads finished and its arrays freed, after every upload from them
}

void ParamStore::step_states(int, const SpanStep& step, const std::vector<char>* done) {
  // The update rewrites the pinned compute copy: the uploads that read it (the same copy stream,
  // in order) have finished
  be_.wait_upload(last_upload_);
  if (done) {  // the units the early update has not stepped (none, normally)
    ZT_CHECK(!tier_->streams() && done->size() == spans_.size(), "early update over a streamed tier");
    std::vector<StateSpan> rest;
    for (size_t i = 0; i < spans_.size(); ++i)
      if (!(*done)[i]) rest.push_back(spans_[i]);
    if (!rest.empty()) step(rest);
    return;
  }
  if (!tier_->streams()) {
    step(spans_);
    return;
  }
  // Each block of the flat arrays: the parts of the spans inside it, as spans over the buffers.
  tier_->stream(true, true, [&](size_t b0, size_t n, float* master, float* m, float* v, void* cblock) {
    std::vector<StateSpan> part;
    for (size_t i = 0; i < spans_.size(); ++i) {
      const StateSpan& s = spans_[i];
      const size_t lo = std::max(b0, span_flat_[i]), hi = std::min(b0 + n, span_flat_[i] + s.n);
      if (lo >= hi) continue;
      StateSpan q;
      const size_t d = lo - span_flat_[i];  // offset of the part within the span
      q.master = master + (lo - b0), q.m = m + (lo - b0), q.v = v + (lo - b0);
      q.grad = s.grad + d;
      // the compute copy: the host's, or with parameters on NVMe the block's buffer, written back
      q.compute = cblock ? cbyte(cblock, lo - b0) : s.compute ? cbyte(s.compute, d) : nullptr;
      q.n = hi - lo;
      for (const StateSpan::Piece& p : s.pieces) {
        const size_t plo = std::max(p.off, d), phi = std::min(p.off + p.n, d + q.n);
        if (plo < phi) q.pieces.push_back({plo - d, phi - plo, p.decay, p.counted});
      }
      part.push_back(std::move(q));
    }
    step(part);
  });
}

float* ParamStore::shard_params(const Unit& u) {
  return sharded_masters() ? shard_params_ + u.shard_off : full_params_ + u.full_off + my_begin(u);
}

void* ParamStore::compute_copy(const Unit& u) {
  if (!mixed_) return nullptr;
  return stage_ == 3 ? cbyte(shard_compute_, u.shard_off) : cbyte(full_compute_, u.full_off + my_begin(u));
}

void ParamStore::upload_compute_copy() {
  // AdamW wrote each span's compute copy on the host; the device copy the model reads gets it
  // (stage 3 with parameter offload reads the host copy at each gather instead).
  if (!tier_->offloaded() || offload_params_) return;
  // Straight from the pinned copy on the copy stream: the host goes on, and the compute stream
  // waits for the copies before the next step's ops.
  clock_.wait("parameters to device", [&] {
    for (size_t i = 0; i < units_.size(); ++i) {
      const StateSpan& s = spans_[i];
      if (s.n) last_upload_ = be_.upload_pinned_async(compute_copy(units_[i]), s.compute, s.n * esize_);
    }
  });
}

Comm::Handle ParamStore::all_gather_compute(const void* send, void* recv, size_t elems) {
  // Compute-precision elements travel as 32-bit words (16-bit shards have even lengths): an
  // all-gather only moves bytes.
  return zero_.all_gather(static_cast<const float*>(send), static_cast<float*>(recv), elems * esize_ / sizeof(float));
}

void ParamStore::gather_compute_copy() {
  // Each rank's part of the compute copy was written by its AdamW.
  std::vector<Comm::Handle> hs;
  zero_.group_begin();
  for (const Unit& u : units_) hs.push_back(all_gather_compute(compute_copy(u), cbyte(full_compute_, u.full_off), u.shard));
  zero_.group_end();
  for (auto h : hs) zero_.wait(h);
}

float* ParamStore::shard_grads(const Unit& u) {
  if (tier_->offloaded()) return tier_->grad() + (stage_ == 0 ? u.full_off : u.shard_off);
  return stage_ == 0 ? full_grads_ + u.full_off : grad_shard_ + u.shard_off;
}

void ParamStore::write_compute(void* dst, const float* host, size_t n) {
  float* wide = static_cast<float*>(be_.alloc(n * sizeof(float), MemTag::CommBuffers));
  be_.copy_to_device(wide, host, n * sizeof(float));
  be_.convert(dst, ct_, wide, DType::F32, int64_t(n));
  be_.free(wide);
}

void ParamStore::new_params_version() {
  static std::atomic<int64_t> versions{0};
  params_version_ = ++versions;
}

void ParamStore::init(uint64_t seed) {
  new_params_version();
  const auto& groups = table_.groups();
  std::vector<float> host;
  if (frozen_ && mixed_) {  // no masters: the values go straight into the compute copy
    for (const Unit& u : units_) {
      const size_t n = stage_ == 3 ? my_len(u) : u.len;
      if (n == 0) continue;
      const size_t lo = groups[u.group].offset + u.begin + (stage_ == 3 ? my_begin(u) : 0);
      host.assign(n, 0.0f);
      table_.init_range(seed, lo, lo + n, host.data());
      write_compute(stage_ == 3 ? compute_copy(u) : cbyte(full_compute_, u.full_off), host.data(), n);
    }
    cast_fp8_shards();
    return;
  }
  // masters into the tier's array (flat: its element)
  auto put = [&](size_t flat, const float* src, size_t n) { tier_->write(State::Master, flat, src, n); };
  const bool offloaded = tier_->offloaded();
  if (!sharded_masters()) {
    for (size_t g = 0; g < groups.size(); ++g) {
      host.assign(groups[g].numel, 0.0f);
      table_.init_range(seed, groups[g].offset, groups[g].offset + groups[g].numel, host.data());
      put(layout_.group_full_off(g), host.data(), host.size());
    }
    if (offloaded) publish_written_masters();
    else if (mixed_) be_.convert(full_compute_, ct_, full_params_, DType::F32, int64_t(layout_.total_full()));
    return;
  }
  for (const Unit& u : units_) {  // only this rank's fp32 shards are ever materialized
    const size_t n = my_len(u);
    if (n == 0) continue;
    const size_t lo = groups[u.group].offset + u.begin + my_begin(u);
    host.assign(n, 0.0f);
    table_.init_range(seed, lo, lo + n, host.data());
    put(u.shard_off, host.data(), n);
    if (mixed_ && !offloaded) be_.convert(compute_copy(u), ct_, shard_params_ + u.shard_off, DType::F32, int64_t(n));
  }
  if (offloaded) {
    publish_written_masters();
    return;
  }
  if (stage_ <= 2) gather_compute_copy();  // stages 1-2 (mixed): every rank needs the full copy
  cast_fp8_shards();
}

void ParamStore::zero_grad() {
  if (full_grads_) be_.fill_zero(full_grads_, layout_.total_full() * sizeof(float));
  if (grad_shard_) be_.fill_zero(grad_shard_, layout_.total_shard() * sizeof(float));
  if (tier_->grad()) tier_->backend().fill_zero(tier_->grad(), flat_n_ * sizeof(float));
}

// ---- parameters ----

void ParamStore::begin_pass(const std::vector<int>& order) {
  // A group's gradient buffer may still be in flight from the previous micro-batch (group 0 is
  // the last one done); finish it before the model opens the group again.
  if (stage_ >= 2) complete_all();
  order_ = order;
  order_pos_ = 0;
}

// A group's units are consecutive in the flat shard: one range of it (and of the compute copy).
size_t ParamStore::group_shard_len(int g) const {
  size_t n = 0;
  for (int ui : layout_.group_units(g)) n += units_[ui].shard;
  return n;
}

size_t ParamStore::group_shard_off(int g) const { return units_[layout_.group_units(g).front()].shard_off; }

size_t ParamStore::group_shard_bytes(int g) const { return group_shard_len(g) * esize_; }

uint64_t ParamStore::group_shard_begin(int g) const { return uint64_t(group_shard_off(g)) * esize_; }

void ParamStore::read_ahead(int g) {
  // Parameters on NVMe: the group's compute shards read into a pinned buffer of the tier, in
  // flight while earlier groups compute; gather_group takes them and uploads from the buffer.
  if (!offload_params_ || gathered_.count(g)) return;
  tier_->read_ahead(g, group_shard_begin(g), group_shard_bytes(g));
}

void ParamStore::gather_group(int g) {
  auto it = gathered_.find(g);
  if (it != gathered_.end() && it->second.fp8 == fp8_gather(g)) return;  // launched already
  if (it != gathered_.end()) drop_gathered(it);  // in the other form (a pass of other rows)
  read_ahead(g);                                 // params on NVMe, unless read ahead already (else nothing)
  Gathered& gb = gathered_[g];
  gb.fp8 = fp8_gather(g);
  gb.buf = be_.alloc(layout_.group_padded(g) * esize_, MemTag::CommBuffers);
  const std::vector<int>& us = layout_.group_units(g);
  if (offload_params_) {  // this rank's shards of the group, one upload from pinned host memory
    const size_t bytes = group_shard_bytes(g);
    gb.staging = be_.alloc(bytes, MemTag::CommBuffers);
    // null in the planner with parameters on NVMe: no file, nothing to read or upload
    if (const void* src = tier_->take(g, group_shard_begin(g), bytes)) {
      last_upload_ = be_.upload_pinned_async(gb.staging, src, bytes);
      tier_->uploaded(g, last_upload_);
    }
  }
  size_t off = 0;
  zero_.group_begin();  // the group's units: one launch
  for (int ui : us) {
    const Unit& u = units_[ui];
    if (const int k = unit_fp8_[size_t(ui)]; gb.fp8 && k >= 0) {  // FP8 bytes, after the copy's scales
      char* bytes = static_cast<char*>(fp8_weight_place(gb.buf, k)) + fp8_recipe::kWeightScalesBytes;
      gb.handles.push_back(zero_.all_gather(reinterpret_cast<const float*>(fp8_shards_ + unit_fp8_off_[size_t(ui)]),
                                            reinterpret_cast<float*>(bytes + (u.begin - fp8_[size_t(k)].rel)),
                                            u.shard / sizeof(float)));
      continue;
    }
    const void* src = offload_params_ ? cbyte(gb.staging, off)
                      : mixed_        ? cbyte(shard_compute_, u.shard_off)
                                      : static_cast<const void*>(shard_params_ + u.shard_off);
    gb.handles.push_back(all_gather_compute(src, cbyte(gb.buf, u.full_off - layout_.group_full_off(g)), u.shard));
    off += u.shard;
  }
  zero_.group_end();
  if (gb.fp8)  // each FP8 weight's scales at the head of its copy (written beside the gather's bytes)
    for (const int k : group_fp8_[size_t(g)])
      be_.copy_device(fp8_weight_place(gb.buf, k), fp8_scales_ + 2 * k, 2 * sizeof(float));
}

void* ParamStore::params(int g) {
  if (stage_ <= 2) return mixed_ ? cbyte(full_compute_, layout_.group_full_off(g)) : full_params_ + layout_.group_full_off(g);
  gather_group(g);
  // Prefetch: start the gathers of the next groups of this pass while this one computes, and
  // with parameters on NVMe the read of the group after those.
  while (order_pos_ < order_.size() && order_[order_pos_] != g) ++order_pos_;
  for (size_t k = order_pos_ + 1; k < order_.size() && k <= order_pos_ + size_t(prefetch_); ++k)
    gather_group(order_[k]);
  if (order_pos_ + size_t(prefetch_) + 1 < order_.size()) read_ahead(order_[order_pos_ + size_t(prefetch_) + 1]);
  if (order_pos_ < order_.size()) ++order_pos_;
  Gathered& gb = gathered_[g];
  for (auto h : gb.handles) zero_.wait(h);
  gb.handles.clear();
  if (gb.staging) {
    be_.free(gb.staging);
    gb.staging = nullptr;
  }
  return gb.buf;
}

void ParamStore::drop_gathered(std::map<int, Gathered>::iterator it) {
  Gathered& gb = it->second;
  for (auto h : gb.handles) zero_.wait(h);
  if (gb.buf) be_.free(gb.buf);
  if (gb.staging) be_.free(gb.staging);
  gathered_.erase(it);
}

void ParamStore::release_params(int g) {
  if (stage_ <= 2) return;
  auto it = gathered_.find(g);
  if (it != gathered_.end()) drop_gathered(it);
}

// ---- gradients ----

float* ParamStore::grads(int g) {
  if (frozen_) return nullptr;  // no gradient: the model computes input gradients only
  if (stage_ <= 1) return full_grads_ + layout_.group_full_off(g);
  auto it = grad_tmp_.find(g);
  if (it != grad_tmp_.end()) return it->second;
  float* buf = static_cast<float*>(be_.alloc(layout_.group_padded(g) * sizeof(float), MemTag::CommBuffers));
  grad_tmp_[g] = buf;
  return buf;
}

void ParamStore::grads_done(int g) {
  if (frozen_) return;
  if (stage_ <= 1 && !last_micro_) return;  // accumulate locally until the step's last micro-batch
  // Stages 2-3: at most one group in flight, which bounds the temporary gradient buffers.
  if (stage_ >= 2) complete_all();
  Pending p;
  p.group = g;
  p.last = last_micro_;
  if (stage_ >= 2) p.recv = static_cast<float*>(be_.alloc(group_shard_len(g) * sizeof(float), MemTag::CommBuffers));
  zero_.group_begin();  // the group's units (one bucket each): one launch
  if (stage_ == 0) {
    for (int ui : layout_.group_units(g))
      p.handles.push_back(zero_.all_reduce(full_grads_ + units_[ui].full_off, units_[ui].padded, ReduceOp::Sum));
  } else if (stage_ == 1) {
    for (int ui : layout_.group_units(g)) {
      const Unit& u = units_[ui];
      p.handles.push_back(zero_.reduce_scatter(full_grads_ + u.full_off, grad_shard_ + u.shard_off, u.shard));
    }
  } else {
    float* tmp = grad_tmp_.at(g);
    size_t off = 0;
    for (int ui : layout_.group_units(g)) {
      const Unit& u = units_[ui];
      p.handles.push_back(zero_.reduce_scatter(tmp + (u.full_off - layout_.group_full_off(g)), p.recv + off, u.shard));
      off += u.shard;
    }
  }
  zero_.group_end();
  pending_.push_back(std::move(p));
}

// Hybrid sharding: a group's reduced shard summed over the replicas (each holds the same shard of
// its own ranks' gradients), `n` floats at `shard`. Waited for at once when the host reads it next,
// else by finish_backward: at stages 2-3 the replicas' all-reduce overlaps the rest of the backward
// (stage 1 reduces after it).
void ParamStore::reduce_across_replicas(float* shard, size_t n, bool wait_now) {
  if (!topo_.replica_group || n == 0 || closing_) return;
  const Comm::Handle h = topo_.replica_group->all_reduce(shard, n, ReduceOp::Sum);
  if (wait_now) topo_.replica_group->wait(h);
  else across_replicas_.push_back(h);
}

void ParamStore::complete(Pending& p) {
  for (auto h : p.handles) zero_.wait(h);
  const size_t group_shard = group_shard_len(p.group), group_off = group_shard_off(p.group);
  // Across replicas once the step's gradient is whole: stage 1 reduces on the last micro-batch
  // only, stages 2-3 accumulate on the device; an offloaded shard goes to the host at once, so
  // each micro-batch's is summed first.
  if (stage_ == 1) reduce_across_replicas(grad_shard_ + group_off, group_shard, false);
  if (p.recv && tier_->offloaded()) reduce_across_replicas(p.recv, group_shard, true);
  if (p.recv) {  // stages 2-3: add this micro-batch's reduced shard, free the group's buffers
    size_t off = 0;
    for (int ui : layout_.group_units(p.group)) {
      const Unit& u = units_[ui];
      if (tier_->offloaded()) {  // optimizer offload: the shard goes to the host as soon as it is reduced
        reduced_.resize(std::max(reduced_.size(), u.shard));  // grows to the largest unit once
        if (off == 0) be_.synchronize();  // the group's backward and reduction: not offload time
        clock_.wait("gradient to host", [&] { be_.copy_to_host(reduced_.data(), p.recv + off, u.shard * sizeof(float)); });
        float* grad = tier_->grad() + u.shard_off;
        tier_->backend().add(grad, grad, reduced_.data(), int64_t(u.shard));
      } else {
        be_.add(grad_shard_ + u.shard_off, grad_shard_ + u.shard_off, p.recv + off, int64_t(u.shard));
      }
      off += u.shard;
    }
    be_.free(p.recv);
    be_.free(grad_tmp_.at(p.group));
    grad_tmp_.erase(p.group);
    if (p.last && !tier_->offloaded()) reduce_across_replicas(grad_shard_ + group_off, group_shard, false);
    if (p.last && units_final_ && tier_->offloaded()) {  // the group's gradient is final on the host
      be_.wait_upload(last_upload_);  // its update rewrites the pinned compute copy earlier uploads read
      units_final_(layout_.group_units(p.group));
    }
  }
}

void ParamStore::complete_all() {
  for (auto& p : pending_) complete(p);
  pending_.clear();
}

void ParamStore::finish_backward() {
  complete_all();
  for (const Comm::Handle h : across_replicas_) topo_.replica_group->wait(h);
  across_replicas_.clear();
  if (!tier_->offloaded() || stage_ >= 2) return;
  // Stages 0-1 reduce on the device after the last micro-batch; the optimizer's part goes to the host.
  be_.synchronize();  // backward and the reductions: not offload time
  clock_.wait("gradients to host", [&] {
    if (stage_ == 0) be_.copy_to_host(tier_->grad(), full_grads_, layout_.total_full() * sizeof(float));
    else be_.copy_to_host(tier_->grad(), grad_shard_, layout_.total_shard() * sizeof(float));
  });
}

// ---- optimizer ----

void ParamStore::build_spans() {
  // Replicated tensors (norms, row-parallel biases, positions) are the same on every
  // tensor-parallel rank and count in the gradient norm on rank 0 of the group only.
  // With replicas every shard is held once in each: only the first's count.
  const bool first_replica = topo_.replica_rank() == 0;
  const bool count_replicated = topo_.tp_rank == 0 && first_replica;
  for (const Unit& u : units_) {
    StateSpan s;
    const size_t flat = stage_ == 0 ? u.full_off : u.shard_off;  // in the flat state arrays
    span_flat_.push_back(flat);
    const bool streamed = tier_->streams();  // the NVMe tier streams masters and moments (step_states)
    s.master = streamed ? nullptr : shard_params(u);
    s.grad = shard_grads(u);
    s.m = streamed ? nullptr : tier_->m() + flat;
    s.v = streamed ? nullptr : tier_->v() + flat;
    s.compute = !tier_->offloaded() ? compute_copy(u) : tier_->compute() ? cbyte(tier_->compute(), flat) : nullptr;
    s.n = my_len(u);
    s.all_counted = count_replicated;
    layout_.for_each_tensor_piece(table_, u, [&](size_t param, size_t off, size_t n) {
      const ParamInfo& info = table_.params()[param];
      s.pieces.push_back({off, n, info.decay, info.tp_primary(topo_.tp_rank) && first_replica});
      // Runs of consecutive elements in the full tensor (a column-split tensor: one per row).
      const size_t local0 = off + (table_.groups()[size_t(u.group)].offset + u.begin + my_begin(u)) - info.offset;
      // A local row is contiguous in the full tensor; extend a run row by row while it stays so.
      const size_t cols = info.shape.size() > 1 ? size_t(info.shape[1])
                         : info.split == TpSplit::None ? local0 + n : 1;
      auto gidx = [&](size_t local) { return table_.global_index(info, local, topo_.tp_rank); };
      for (size_t k = 0; k < n;) {
        const size_t g0 = gidx(local0 + k);
        size_t len = std::min(n - k, cols - (local0 + k) % cols);
        while (k + len < n && gidx(local0 + k + len) == g0 + len) len += std::min(n - k - len, cols);
        // one writer of each element: the first data-parallel rank's whole copy (stage 0), or the
        // shards of the first replica
        const bool owner = (stage_ != 0 ? first_replica : topo_.dp_rank == 0) && info.tp_primary(topo_.tp_rank);
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
  new_params_version();  // every update and load ends here
  upload_compute_copy();
  cast_fp8_shards();
  if (stage_ != 1 && stage_ != 2) return;  // every rank needs the full updated parameters again
  if (mixed_) {
    gather_compute_copy();  // in compute precision: half the bytes of the fp32 masters
    return;
  }
  std::vector<Comm::Handle> hs;
  zero_.group_begin();
  for (const Unit& u : units_)
    hs.push_back(zero_.all_gather(full_params_ + u.full_off + my_begin(u), full_params_ + u.full_off, u.shard));
  zero_.group_end();
  for (auto h : hs) zero_.wait(h);
}

}  // namespace zt
