// Tensor parallelism as operations on tensors (Megatron-Core's mappings), so that a model's
// blocks read like the paper and never call a communicator themselves:
//   reduce_from_region   sum of the group's partial results (row-parallel Linear output,
//                        column-parallel Linear input gradient)
//   once                 a replicated addend (bias of a row-parallel Linear, position embedding)
//                        that must enter such a sum once: rank 0 adds it
//   vocab_local_ids      vocabulary-parallel embedding: token ids -> rows of this rank's slice
//   gather_vocab_row     a full-vocabulary logits row from every rank's slice
//   VocabParallelCrossEntropy  the loss over logits split by vocabulary, never gathered
// With a group of one (or none) every helper is the identity.
#pragma once
#include <cstdint>

#include "engine/backend/backend.h"
#include "engine/comm/comm.h"

namespace zt {

class TensorParallel {
 public:
  // `group`: the tensor-parallel communicator (null or size 1: no tensor parallelism).
  // `max_reduce`: the most elements reduce_from_region() is asked for (16-bit activations are
  // reduced in an fp32 scratch of that size).
  TensorParallel(Backend& be, Comm* group, int64_t max_reduce);
  ~TensorParallel();
  TensorParallel(const TensorParallel&) = delete;
  TensorParallel& operator=(const TensorParallel&) = delete;

  int size() const { return size_; }
  int rank() const { return rank_; }
  Comm& group() const { return *group_; }

  // x (n, compute dtype, device) <- sum over the group of x, reduced in fp32.
  void reduce_from_region(void* x, int64_t n) const;
  // `replicated` on rank 0, null on the others.
  template <typename P>
  P* once(P* replicated) const { return rank_ == 0 ? replicated : nullptr; }
  // out (n) <- each id's row in this rank's slice [rank * vocab_local, + vocab_local) of the
  // vocabulary, or -1 when another rank holds it (host arrays).
  void vocab_local_ids(const int32_t* ids, int64_t n, int vocab_local, int32_t* out) const;
  // out_host (vocab_local * size) <- every rank's `row` (vocab_local, compute dtype, device) in
  // fp32, in rank (= vocabulary) order. Collective.
  void gather_vocab_row(const void* row, int64_t vocab_local, float* out_host) const;

 private:
  Backend& be_;
  Comm* group_;
  int size_ = 1, rank_ = 0;
  float* scratch_ = nullptr;  // (max_reduce) fp32, for 16-bit compute
};

// Softmax cross-entropy over logits split by vocabulary across the group: the row max, the sum
// of exponentials and the target's logit are reduced ((N) floats each, in device memory so that
// the group may be NCCL); the full logits never exist on one rank. Losses are summed on the
// device (no synchronization per micro-batch) or, when the group is larger than one, on the host.
class VocabParallelCrossEntropy {
 public:
  VocabParallelCrossEntropy(Backend& be, const TensorParallel& tp, int64_t max_rows);
  ~VocabParallelCrossEntropy();
  VocabParallelCrossEntropy(const VocabParallelCrossEntropy&) = delete;
  VocabParallelCrossEntropy& operator=(const VocabParallelCrossEntropy&) = delete;

  // A micro-batch's loss begins: its rows come in one or more forward() calls (chunks).
  void begin() { ++pending_; }
  // logits (N, vocab_local) of this rank's slice, its first vocab_real columns real ids (the rest
  // padding, left out of the softmax), targets (N) global ids (device): N rows of a micro-batch of
  // mean_rows. Adds their losses / mean_rows to the pending sum (the micro-batch's mean, once
  // every chunk is in); with grad_scale != 0 the logits are replaced by dloss/dlogits *
  // grad_scale (0 on the padding).
  void forward(void* logits, const int32_t* targets, int64_t N, int vocab_local, int vocab_real, float grad_scale,
               int64_t mean_rows);
  double take();  // the pending sum of mean losses; resets it
  int pending() const { return pending_; }

 private:
  Backend& be_;
  const TensorParallel& tp_;
  float *losses_, *row_sum_, *target_logit_;  // (max_rows) each
  double* device_sum_;                        // (1)
  double host_sum_ = 0;
  int pending_ = 0;
};

}  // namespace zt
