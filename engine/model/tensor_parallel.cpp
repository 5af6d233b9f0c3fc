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

void TensorParallel::reduce_from_region(void* x, int64_t n) const {
  if (size_ == 1) return;
  const DType ct = be_.compute_dtype();
  if (ct == DType::F32) {
    group_->all_reduce_sync(static_cast<float*>(x), size_t(n));
    return;
  }
  be_.convert(scratch_, DType::F32, x, ct, n);
  group_->all_reduce_sync(scratch_, size_t(n));
  be_.convert(x, ct, scratch_, DType::F32, n);
}

int64_t TensorParallel::seq_real_rows(int64_t N) const {
  if (!sp_) return N;
  const int64_t R = seq_rows(N);
  return std::clamp<int64_t>(N - int64_t(rank_) * R, 0, R);
}

const void* TensorParallel::gather_from_sequence_region(const void* local, void* full, int64_t N, int64_t C) const {
  if (!sp_) return local;
  const int64_t n = seq_rows(N) * C;
  const size_t es = be_.compute_size();
  // A copy: 16-bit elements travel two to a float (the width is even, so n is).
  const size_t floats = size_t(n) * es / sizeof(float);
  group_->wait(group_->all_gather(static_cast<const float*>(local), static_cast<float*>(full), floats));
  return full;
}

void TensorParallel::reduce_to_sequence_region(void* partial, void* local, int64_t N, int64_t C) const {
  if (!sp_) {
    reduce_from_region(local, N * C);
    return;
  }
  const int64_t R = seq_rows(N), padded = int64_t(size_) * R * C, real = N * C;
  const DType ct = be_.compute_dtype();
  if (ct == DType::F32) {
    float* send = static_cast<float*>(partial);
    if (padded > real) be_.fill_zero(send + real, size_t(padded - real) * sizeof(float));
    group_->wait(group_->reduce_scatter(send, static_cast<float*>(local), size_t(R * C)));
    return;
  }
  float* send = scratch_;
  float* recv = scratch_ + padded;
  be_.convert(send, DType::F32, partial, ct, real);
  if (padded > real) be_.fill_zero(send + real, size_t(padded - real) * sizeof(float));
  group_->wait(group_->reduce_scatter(send, recv, size_t(R * C)));
  be_.convert(local, ct, recv, DType::F32, R * C);
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

SequenceGrads::SequenceGrads(Backend& be, const TensorParallel& tp, int64_t width)
    : be_(be), tp_(tp), width_(width) {
  if (tp_.sequence_parallel())
    parts_ = static_cast<float*>(be_.alloc(size_t(kMax * width) * sizeof(float), MemTag::Grads));
}

SequenceGrads::~SequenceGrads() { be_.free(parts_); }

float* const* SequenceGrads::begin(std::initializer_list<float*> grads, int64_t n) {
  ZT_CHECK(grads.size() <= size_t(kMax) && n <= width_ && count_ == 0,
           "SequenceGrads::begin: {} tensors of {} (at most {} of {}), or nested", grads.size(), n, kMax, width_);
  count_ = int(grads.size());
  n_ = n;
  int i = 0;
  for (float* g : grads) {
    grads_[i] = g;
    slots_[i] = parts_ ? parts_ + int64_t(i) * n : g;
    ++i;
  }
  if (parts_) be_.fill_zero(parts_, size_t(count_ * n) * sizeof(float));
  return slots_;
}

void SequenceGrads::end() {
  if (parts_) {
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
                                        float grad_scale, int64_t mean_rows) {
  if (tp_.size() == 1) {
    be_.softmax_crossentropy(losses_, logits, targets, int(N), Vl, Vr, grad_scale);
    be_.sum_accumulate(device_sum_, losses_, N, 1.0 / double(mean_rows));
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
  be_.copy_to_host(mx.data(), d_max, size_t(N) * sizeof(float));
  be_.copy_to_host(sum.data(), row_sum_, size_t(N) * sizeof(float));
  be_.copy_to_host(tgt.data(), target_logit_, size_t(N) * sizeof(float));
  double total = 0;
  for (int64_t i = 0; i < N; ++i) {
    const float lse = mx[i] + std::log(sum[i]);
    total += lse - tgt[i];
    mx[i] = lse;
  }
  host_sum_ += total / double(mean_rows);
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
