// Tensor parallelism as operations on tensors (Megatron-Core's mappings), so that a model's
// blocks read like the paper and never call a communicator themselves. The (N, C) activations
// between the parallel regions (norms, residual adds, the embedding's sum: the "sequence region")
// are whole on every rank, or with sequence parallelism (Megatron's) split by rows:
//   reduce_to_sequence_region     the group's sum of partial results (row-parallel Linear output,
//                                 column-parallel Linear input gradient): an all-reduce, or with
//                                 sequence parallelism a reduce-scatter to this rank's rows
//   gather_from_sequence_region   the input of a column-parallel Linear: the identity, or with
//                                 sequence parallelism an all-gather of every rank's rows
//   SequenceGrads                 the gradient of a parameter applied to the region's rows (a norm)
//   once                 a replicated addend (bias of a row-parallel Linear, position embedding)
//                        that must enter such a sum once: rank 0 adds it
//   vocab_local_ids      vocabulary-parallel embedding: token ids -> rows of this rank's slice
//   gather_vocab_row     a full-vocabulary logits row from every rank's slice
//   VocabParallelCrossEntropy  the loss over logits split by vocabulary, never gathered
// The two mappings also start and finish apart, so that a GEMM runs while they are in flight.
// With a group of one (or none) every helper is the identity.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "engine/backend/backend.h"
#include "engine/comm/comm.h"

namespace zt {

class TensorParallel {
 public:
  // `group`: the tensor-parallel communicator (null or size 1: no tensor parallelism).
  // `max_rows` x `width`: the largest (N, C) activation reduced (16-bit activations are reduced
  // in an fp32 scratch). `sequence_parallel`: split the sequence region's rows across the group
  // (no effect with a group of one).
  TensorParallel(Backend& be, Comm* group, int64_t max_rows, int64_t width, bool sequence_parallel = false);
  ~TensorParallel();
  TensorParallel(const TensorParallel&) = delete;
  TensorParallel& operator=(const TensorParallel&) = delete;

  int size() const { return size_; }
  int rank() const { return rank_; }
  Comm& group() const { return *group_; }

  // `replicated` on rank 0, null on the others.
  template <typename P>
  P* once(P* replicated) const { return rank_ == 0 ? replicated : nullptr; }
  // out (n) <- each id's row in this rank's slice [rank * vocab_local, + vocab_local) of the
  // vocabulary, or -1 when another rank holds it (host arrays).
  void vocab_local_ids(const int32_t* ids, int64_t n, int vocab_local, int32_t* out) const;
  // out_host (vocab_local * size) <- every rank's `row` (vocab_local, compute dtype, device) in
  // fp32, in rank (= vocabulary) order. Collective.
  void gather_vocab_row(const void* row, int64_t vocab_local, float* out_host) const;

  // ---- The sequence region: the rows between the tensor-parallel regions (norms, residual adds,
  // the embedding's sum, the final norm). With sequence parallelism rank r holds rows
  // [r * seq_rows(N), + seq_rows(N)) of the N = B*T rows: ceil(N / size) each, the last ranks'
  // tails padding (never read) when size does not divide N.
  bool sequence_parallel() const { return sp_; }
  int64_t seq_rows(int64_t N) const { return sp_ ? (N + size_ - 1) / size_ : N; }
  // Of them, the rows holding tokens on this rank (0 for a rank past the end when N < size).
  int64_t seq_real_rows(int64_t N) const;
  // The (N, C) input of a column-parallel Linear: `local` (seq_rows(N), C) itself, or every
  // rank's rows gathered into `full` (size * seq_rows(N), C) and returned. Collective.
  const void* gather_from_sequence_region(const void* local, void* full, int64_t N, int64_t C) const {
    return finish(start_gather_from_sequence_region(local, full, N, C));
  }
  // Where a row-parallel Linear (or the vocabulary-parallel embedding) writes its (N, C) partial
  // sums: `local` itself (summed in place), or `full` (size * seq_rows(N), C).
  void* partial_sums(void* local, void* full) const { return sp_ ? full : local; }
  // local (seq_rows(N), C) <- this rank's rows of the group's sum of `partial` (N, C) from
  // partial_sums(local, full): the all-reduce, or with sequence parallelism its reduce-scatter
  // (the padding rows of `full` are zeroed first). Reduced in fp32. Collective.
  void reduce_to_sequence_region(void* partial, void* local, int64_t N, int64_t C) const {
    finish(start_reduce_to_sequence_region(partial, local, N, C));
  }
  // The same two mappings started, to be finished after other work (the weight gradient's GEMM:
  // Megatron's overlap of the tensor group's communication). Between start and finish the
  // buffers belong to the collective: `full` (gather), `partial` and `local` (reduce), and the
  // fp32 scratch of 16-bit reductions (one reduction in flight at a time).
  struct Pending {
    Comm::Handle handle = -1;  // -1: nothing in flight (no tensor parallelism, or the identity)
    const void* result = nullptr;  // a gather's rows
    void* local = nullptr;         // a 16-bit reduction's destination, converted from
    const float* reduced = nullptr;  // its fp32 result in the scratch
    int64_t n = 0;                   // of n elements
  };
  Pending start_gather_from_sequence_region(const void* local, void* full, int64_t N, int64_t C) const;
  Pending start_reduce_to_sequence_region(void* partial, void* local, int64_t N, int64_t C) const;
  // Waits for it (a gather: returns the gathered rows, or `local` itself without sequence parallelism).
  const void* finish(const Pending& p) const;

 private:
  Backend& be_;
  Comm* group_;
  int size_ = 1, rank_ = 0;
  bool sp_ = false;
  // fp32, for 16-bit compute: (max_rows x width), or with sequence parallelism a padded
  // (size x seq_rows, width) send buffer and a (seq_rows, width) receive buffer
  float* scratch_ = nullptr;
};

// The gradients of the parameters applied to the sequence region's rows (the norms' weights and
// biases). Without sequence parallelism every rank sees every row and computes the whole
// gradient; with it each rank's rows give a part, and the gradient is the group's sum.
//   float* const* g = grads.begin({dw1, db1, dw2}, C);  // where this micro-batch's part goes
//   ... the norms' backward accumulate into g[0..2] ...
//   grads.end();  // sequence parallel: one all-reduce of the parts, added into dw1, db1, dw2
// Without sequence parallelism begin() hands back the gradients themselves and end() does nothing.
class SequenceGrads {
 public:
  static constexpr int kMax = 4;  // tensors per begin()
  // `width`: the most elements of one tensor. `per_head`: the parameters apply to this rank's
  // attention heads (Qwen3's q/k norms), so each rank's gradient is a part whenever the group is
  // larger than one, sequence parallel or not. Width 0: no tensors (nothing is allocated).
  SequenceGrads(Backend& be, const TensorParallel& tp, int64_t width, bool per_head = false);
  ~SequenceGrads();
  SequenceGrads(const SequenceGrads&) = delete;
  SequenceGrads& operator=(const SequenceGrads&) = delete;

  // Every gradient null (a frozen base): slots null, end() does nothing.
  float* const* begin(std::initializer_list<float*> grads, int64_t n);
  void end();

 private:
  Backend& be_;
  const TensorParallel& tp_;
  int64_t width_;
  float* parts_ = nullptr;  // (kMax, width) fp32, sequence parallel only
  float* grads_[kMax] = {};
  float* slots_[kMax] = {};
  int count_ = 0;
  int64_t n_ = 0;
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
  // padding, left out of the softmax), targets (N) global ids (device; -1: no loss): N rows of a
  // micro-batch. Adds their losses to the pending sum; with grad_scale != 0 the logits are
  // replaced by dloss/dlogits * grad_scale (0 on the padding, and on the rows without loss).
  void forward(void* logits, const int32_t* targets, int64_t N, int vocab_local, int vocab_real, float grad_scale);
  double take();  // the pending sum of losses; resets it
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
