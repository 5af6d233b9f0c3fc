// Tensor-parallel mappings and the vocabulary-parallel cross-entropy (see tensor_parallel.h).
#include "engine/model/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/status.h"

namespace zt {

TensorParallel::TensorParallel(Backend& be, Comm* group, int64_t max_rows, int64_t width, bool sequence_parallel)
    : be_(be), group_(group) {
  if (group_ && group_->size() > 1) {
    size_ = group_->size();
    rank_ = group_->rank();
  }
  sp_ = sequence_parallel && size_ > 1;
  // The all-gather moves 16-bit rows as pairs packed in floats (a copy: no arithmetic touches them).
  ZT_CHECK(!sp_ || width % 2 == 0, "sequence parallelism needs an even width, got {}", width);
  if (size_ > 1 && be_.compute_dtype() != DType::F32) {
    const int64_t rows = sp_ ? (size_ + 1) * seq_rows(max_rows) : max_rows;  // send + receive
    scratch_ = static_cast<float*>(be_.alloc(size_t(rows * width) * sizeof(float), MemTag::Activations));
  }
}

TensorParallel::~TensorParallel() { be_.free(scratch_); }

int64_t TensorParallel::seq_real_rows(int64_t N) const {
  if (!sp_) return N;
  const int64_t R = seq_rows(N);
  return std::clamp<int64_t>(N - int64_t(rank_) * R, 0, R);
}

TensorParallel::Pending TensorParallel::start_gather_from_sequence_region(const void* local, void* full, int64_t N,
                                                                          int64_t C) const {
  if (!sp_) return {-1, local};
  // A copy: 16-bit elements travel two to a float (the width is even, so every count is).
  const size_t floats = size_t(seq_rows(N) * C) * be_.compute_size() / sizeof(float);
  return {group_->all_gather(static_cast<const float*>(local), static_cast<float*>(full), floats), full};
}

TensorParallel::Pending TensorParallel::start_reduce_to_sequence_region(void* partial, void* local, int64_t N,
                                                                        int64_t C) const {
  if (size_ == 1) return {};
  const DType ct = be_.compute_dtype();
  const bool f32 = ct == DType::F32;
  if (!sp_) {  // the all-reduce, in place (16-bit: in the fp32 scratch)
    if (!f32) be_.convert(scratch_, DType::F32, local, ct, N * C);
    return {group_->all_reduce(f32 ? static_cast<float*>(local) : scratch_, size_t(N * C), ReduceOp::Sum), nullptr,
            f32 ? nullptr : local, scratch_, N * C};
  }
  const int64_t R = seq_rows(N), padded = int64_t(size_) * R * C, real = N * C;
  float* send = f32 ? static_cast<float*>(partial) : scratch_;
  float* recv = f32 ? static_cast<float*>(local) : scratch_ + padded;
  if (!f32) be_.convert(send, DType::F32, partial, ct, real);
  if (padded > real) be_.fill_zero(send + real, size_t(padded - real) * sizeof(float));
  return {group_->reduce_scatter(send, recv, size_t(R * C)), nullptr, f32 ? nullptr : local, recv, R * C};
}

const void* TensorParallel::finish(const Pending& p) const {
  if (p.handle < 0) return p.result;
  group_->wait(p.handle);
  if (p.local) be_.convert(p.local, be_.compute_dtype(), p.reduced, DType::F32, p.n);  // 16-bit: back from fp32
  return p.result;
}

void TensorParallel::vocab_local_ids(const int32_t* ids, int64_t n, int vocab_local, int32_t* out) const {
  const int32_t v0 = rank_ * vocab_local;
  for (int64_t i = 0; i < n; ++i) out[i] = (ids[i] >= v0 && ids[i] < v0 + vocab_local) ? ids[i] - v0 : -1;
}

void TensorParallel::gather_vocab_row(const void* row, int64_t Vl, float* out) const {
  // Converted to fp32 in device memory, gathered there (the group may be NCCL), then copied out.
  float* all = static_cast<float*>(be_.alloc(size_t(Vl) * size_t(size_) * sizeof(float), MemTag::CommBuffers));
  float* mine = all + int64_t(rank_) * Vl;
  be_.convert(mine, DType::F32, row, be_.compute_dtype(), Vl);
  if (size_ > 1) group_->wait(group_->all_gather(mine, all, size_t(Vl)));
  be_.copy_to_host(out, all, size_t(Vl) * size_t(size_) * sizeof(float));
  be_.free(all);
}

SequenceGrads::SequenceGrads(Backend& be, const TensorParallel& tp, int64_t width, bool per_head)
    : be_(be), tp_(tp), width_(width) {
  if (width > 0 && (per_head ? tp_.size() > 1 : tp_.sequence_parallel()))
    parts_ = static_cast<float*>(be_.alloc(size_t(kMax * width) * sizeof(float), MemTag::Grads));
}

SequenceGrads::~SequenceGrads() { be_.free(parts_); }

float* const* SequenceGrads::begin(std::initializer_list<float*> grads, int64_t n) {
  ZT_CHECK(grads.size() <= size_t(kMax) && n <= width_ && count_ == 0,
           "SequenceGrads::begin: {} tensors of {} (at most {} of {}), or nested", grads.size(), n, kMax, width_);
  // A frozen tensor (LoRA's base) has no gradient: every slot null, nothing summed.
  const bool frozen = std::all_of(grads.begin(), grads.end(), [](const float* g) { return g == nullptr; });
  count_ = frozen ? 0 : int(grads.size());
  n_ = n;
  int i = 0;
  for (float* g : grads) {
    grads_[i] = g;
    slots_[i] = parts_ && !frozen ? parts_ + int64_t(i) * n : g;
    ++i;
  }
  if (parts_ && !frozen) be_.fill_zero(parts_, size_t(count_ * n) * sizeof(float));
  return slots_;
}

void SequenceGrads::end() {
  if (parts_ && count_ > 0) {
    tp_.group().all_reduce_sync(parts_, size_t(count_ * n_));
    for (int i = 0; i < count_; ++i) be_.add(grads_[i], grads_[i], slots_[i], n_);
  }
  count_ = 0;
}

VocabParallelCrossEntropy::VocabParallelCrossEntropy(Backend& be, const TensorParallel& tp, int64_t max_rows)
    : be_(be), tp_(tp) {
  auto floats = [&](int64_t n) { return static_cast<float*>(be_.alloc(size_t(n) * sizeof(float), MemTag::Activations)); };
  losses_ = floats(max_rows);
  row_sum_ = floats(max_rows);
  target_logit_ = floats(max_rows);
  device_sum_ = static_cast<double*>(be_.alloc(sizeof(double), MemTag::Activations));
}

VocabParallelCrossEntropy::~VocabParallelCrossEntropy() {
  for (void* p : {(void*)losses_, (void*)row_sum_, (void*)target_logit_, (void*)device_sum_}) be_.free(p);
}

void VocabParallelCrossEntropy::forward(void* logits, const int32_t* targets, int64_t N, int Vl, int Vr,
                                        float grad_scale) {
  if (tp_.size() == 1) {
    be_.softmax_crossentropy(losses_, logits, targets, int(N), Vl, Vr, grad_scale);  // 0 where no loss
    be_.sum_accumulate(device_sum_, losses_, N, 1.0);
    return;
  }
  const int v0 = tp_.rank() * Vl;  // this rank's vocabulary slice [v0, v0 + Vl)
  Comm& group = tp_.group();
  float* d_max = losses_;  // (N) scratch, free until the losses are known
  be_.logits_row_max(d_max, logits, int(N), Vl, Vr);
  group.wait(group.all_reduce(d_max, size_t(N), ReduceOp::Max));
  be_.logits_row_sumexp(row_sum_, logits, d_max, int(N), Vl, Vr);
  be_.logits_pick_target(target_logit_, logits, targets, int(N), Vl, v0);
  group.all_reduce_sync(row_sum_, size_t(N));
  group.all_reduce_sync(target_logit_, size_t(N));
  std::vector<float> mx(N), sum(N), tgt(N);
  std::vector<int32_t> ids(N);
  be_.copy_to_host(mx.data(), d_max, size_t(N) * sizeof(float));
  be_.copy_to_host(sum.data(), row_sum_, size_t(N) * sizeof(float));
  be_.copy_to_host(tgt.data(), target_logit_, size_t(N) * sizeof(float));
  be_.copy_to_host(ids.data(), targets, size_t(N) * sizeof(int32_t));
  double total = 0;
  for (int64_t i = 0; i < N; ++i) {
    const float lse = mx[i] + std::log(sum[i]);
    if (ids[i] >= 0) total += lse - tgt[i];  // -1: no loss
    mx[i] = lse;
  }
  host_sum_ += total;
  if (grad_scale != 0.0f) {
    be_.copy_to_device(d_max, mx.data(), size_t(N) * sizeof(float));
    be_.crossentropy_grad_from_lse(logits, d_max, targets, int(N), Vl, Vr, v0, grad_scale);
  }
}

double VocabParallelCrossEntropy::take() {
  double device_sum = 0;
  be_.copy_to_host(&device_sum, device_sum_, sizeof device_sum);
  be_.fill_zero(device_sum_, sizeof(double));
  const double total = device_sum + host_sum_;
  host_sum_ = 0;
  pending_ = 0;
  return total;
}

}  // namespace zt
