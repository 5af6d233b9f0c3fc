// GPU checks that need no dependency beyond the CUDA toolkit (built by tools/gpu_check.sh):
//   parity: GPT-2, Llama, Qwen2, Qwen3 and Mistral forward/backward and 5 AdamW steps on CUDA vs the
//           CPU backend (which the PyTorch parity tests prove), at odd sizes, and GPT-2 and Llama with
//           low-rank adapters over the frozen weights; prints per-tensor errors; exit 1 on failure
//   parity runs in fp32, bf16 and fp16 (the CPU backend emulating the same storage rounding)
//   bench:  GPT-2 124M (12 layers, d_model 768, 12 heads, seq_len 1024, vocab 50304) training
//           steps in bf16 with the largest micro-batch that fits; tokens/s, step ms, peak memory,
//           MFU, and the step's phases (forward, backward, optimizer) timed with CUDA events
//           (bench-fp32: the same in fp32; bench-deterministic: with [run] deterministic's kernels)
//   attention: the attention kernels' TFLOP/s forward and backward (CUDA events over 20 calls), bf16
//           at head size 64 and 128, T 1024 and 4096 (8192 tokens), then fp32 at GPT-2's shape (B 8,
//           T 1024, 12 x 64); GPU_CHECK_ATTENTION_DUMP=DIR also writes each bf16 shape's inputs and
//           results for tools/gpu_check/torch_attention.py
//   zero3:  GPT-2 124M step time through the job's store with ZeRO-0 and ZeRO-3 at world size 1: the
//           stage-3 machinery's own overhead (gathers into temporary buffers, per-group grads);
//           then with every block layer in FP8 at both: ZeRO-3's FP8 gather must give ZeRO-0's
//           losses bit for bit (zero3_fp8_gather), with each one's step time
// Output: one JSON object per check on stdout.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/fp8_recipe.h"
#include "engine/core/dtype.h"
#include "engine/backend/cuda/device.h"
#include "engine/config/spec.h"
#include "engine/comm/topology.h"
#include "engine/backend/nvml.h"
#include "engine/job/job.h"
#include "engine/job/step.h"
#include "engine/model/registry.h"
#include "engine/observe/throughput.h"
#include "engine/plan/planned_job.h"

using namespace zt;

namespace {

// A job at world size 1 (self communicators: device copies on the GPU), built and stepped as the
// trainer does (engine/job): what the check measures is the engine's own step.
struct SingleRank {
  Topology topo;
  std::unique_ptr<Job> job;
  SingleRank(const RunSpec& spec, Backend& be) {
    topo.world = make_self_comm("world");
    topo.tp_group = make_device_self_comm("tp", be);  // copies with the backend: device pointers
    topo.dp_group = make_device_self_comm("dp", be);
    job = std::make_unique<Job>(spec, topo, be, ZeroPlacement(spec));
    job->init_params(uint64_t(spec.run.seed));
  }
  StepResult step(int64_t s, const std::vector<int32_t>& in, const std::vector<int32_t>& tg, StepHook& hooks) {
    return train_step(*job, s, [&](int64_t, MicroBatch& mb) {
      std::copy(in.begin(), in.end(), mb.inputs);
      std::copy(tg.begin(), tg.end(), mb.targets);
      mb.positions = nullptr;
    }, hooks);
  }
};

// One micro-batch of B sequences per step, in `dt`, at a constant learning rate. fp16 at a fixed
// loss scale of 1: its gradients compare unscaled, as bf16's and fp32's do.
RunSpec check_spec(const RunSpec::Model& m, int B, DType dt, double lr, double grad_clip, bool deterministic = false,
                   int zero_stage = 0) {
  RunSpec s;
  s.model = m;
  s.train.micro_batch = s.train.global_batch = B;
  s.train.max_steps = 1 << 30;
  s.precision.compute = precision_choice_of(dt);
  s.precision.loss_scale = 1;
  s.optim.lr = lr, s.optim.schedule = LrSchedule::Constant, s.optim.warmup_steps = 0, s.optim.grad_clip = grad_clip;
  s.run.deterministic = deterministic;
  s.run.seed = 7;
  s.parallel.zero_stage = zero_stage;
  return s;
}

// The step's phases timed with CUDA events (the backend's timing points) at the step's hooks:
// forward (with the head's backward), backward (with the last gradient reductions), the
// optimizer (clipping, AdamW, publishing); summed over the steps it watches.
struct PhaseTimes final : StepHook {
  Backend& be;
  int point[4] = {0, 0, 0, 0};
  double ms[3] = {0, 0, 0};
  explicit PhaseTimes(Backend& b) : be(b) {}
  void forward_begin(int64_t, int64_t) override { point[0] = be.timing_point(); }
  void backward_begin(int64_t, int64_t) override { point[1] = be.timing_point(); }
  void optimizer_begin(int64_t) override { point[2] = be.timing_point(); }
  void optimizer_end(int64_t) override { point[3] = be.timing_point(); }
  void step_end(int64_t, StepResult&) override {  // the device has synchronized
    for (int i = 0; i < 3; ++i) ms[i] += be.timing_ms(point[i], point[i + 1]);
  }
};

std::vector<int32_t> tokens(size_t n, int vocab, unsigned seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = int32_t(g() % unsigned(vocab));
  return v;
}
// Ids as text has them, for the bench's embedding backward (whose rows collide on frequent
// tokens): Zipf's law with exponent 1 over the vocabulary, the commonest id taking about 1/ln(V)
// of the rows (9% at 50257; English text's commonest GPT-2 tokens take 3-5% each)
std::vector<int32_t> text_like_tokens(size_t n, int vocab, unsigned seed) {
  std::vector<double> w(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) w[size_t(i)] = 1.0 / (i + 1);
  std::discrete_distribution<int32_t> zipf(w.begin(), w.end());
  std::mt19937 g(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = zipf(g);
  return v;
}

double rel(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// The CPU backend runs the same compute type (it emulates bf16 storage rounding), so the two
// sides differ by summation order only; in bf16 such differences flip roundings, which then
// propagate: tolerances 1e-2 (loss) and 5e-2 (worst gradient tensor) there, 1e-4 in fp32.
// GPU_CHECK_TINY=1 (tools/gpu_check.sh --emulated): the same programs at sizes the emulated
// device runs in seconds; their figures say nothing about speed and are labelled so.
bool tiny() {
  static const bool t = std::getenv("GPU_CHECK_TINY") && std::string(std::getenv("GPU_CHECK_TINY")) == "1";
  return t;
}
int parity(DType dt) {
  auto cpu = make_cpu_backend(0);
  auto gpu = make_backend(DeviceChoice::Cuda, 0);
  const double loss_tol = dt == DType::F32 ? 1e-4 : 1e-2, grad_tol = dt == DType::F32 ? 1e-4 : 5e-2;
  int failures = 0;
  std::printf("{\"check\": \"parity\", \"precision\": \"%s\", \"cases\": [", dtype_name(dt));
  // GPT-2 and Llama at odd sizes (Llama: grouped-query 6 / 2 with head size 16 for the
  // tensor-core attention, multi-query with head size 6 for the CUDA-core one)
  std::vector<RunSpec::Model> cases;
  for (auto [L, NH, C, F, V, T] : {std::tuple{2, 3, 48, 192, 263, 33}, {3, 4, 64, 200, 509, 64},
                                   {2, 2, 256, 1024, 1024, 96}}) {
    RunSpec::Model m;
    m.n_layer = L, m.n_head = NH, m.n_kv_head = NH, m.d_model = C, m.d_ff = F, m.vocab_size = V, m.seq_len = T;
    m.vocab_multiple = 1;
    cases.push_back(m);
  }
  for (auto [L, NH, NKV, C, F, V, T, tie] : {std::tuple{2, 6, 2, 96, 160, 263, 65, false},
                                             {2, 4, 1, 24, 40, 300, 33, true}}) {
    RunSpec::Model m;
    m.arch = "llama";
    m.n_layer = L, m.n_head = NH, m.n_kv_head = NKV, m.d_model = C, m.d_ff = F, m.vocab_size = V, m.seq_len = T;
    m.vocab_multiple = 1, m.rope_theta = 500.0, m.tie_embeddings = tie;
    cases.push_back(m);
  }
  // the families' options (heads 16 wide for the tensor-core attention): Qwen2's q/k/v biases,
  // Qwen3's per-head q/k norms with 4 x 16 over d_model 40, Mistral's head_dim 16 over 48 / 4
  for (auto [arch, NH, NKV, C, hd, tie] : {std::tuple{"qwen2", 6, 2, 96, 0, true}, {"qwen3", 4, 2, 40, 16, true},
                                           {"mistral", 4, 1, 48, 16, false}}) {
    RunSpec::Model m;
    m.arch = arch;
    m.n_layer = 2, m.n_head = NH, m.n_kv_head = NKV, m.d_model = C, m.head_dim = hd, m.d_ff = 128, m.vocab_size = 263;
    m.seq_len = 65, m.vocab_multiple = 1, m.rope_theta = 500.0, m.tie_embeddings = tie;
    cases.push_back(m);
  }
  // low-rank adapters (rank 4) over the frozen GPT-2 and grouped-query Llama shapes: every layer
  std::vector<RunSpec::Lora> loras(cases.size());
  for (auto [c, targets] : {std::pair{size_t(0), "qkv,o,up,down"}, {size_t(3), "q,k,v,o,gate,up,down"}}) {
    cases.push_back(cases[c]);
    loras.emplace_back();
    loras.back().rank = 4, loras.back().alpha = 8, loras.back().targets = targets;
  }
  if (tiny()) cases = {cases[0], cases[3]}, loras.resize(2);  // one GPT-2 and one Llama (grouped-query) shape
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const RunSpec::Model& cfg = cases[ci];
    const int B = 3, T = int(cfg.seq_len);
    RunSpec spec = check_spec(cfg, B, dt, 3e-3, /*grad_clip=*/0);  // raw updates compared
    spec.lora = loras[ci];
    SingleRank sc(spec, *cpu), sg(spec, *gpu);
    double worst_grad = 0, worst_loss = 0;
    std::string worst_name;
    struct FirstGrads final : StepHook {  // step 0's reduced gradients, before AdamW
      Job& job;
      std::vector<float> grads;
      explicit FirstGrads(Job& j) : job(j) {}
      void gradients_final(int64_t step) override {
        if (step == 0) grads = job.store->full_grads();
      }
    } gc(*sc.job), gg(*sg.job);
    for (int step = 1; step <= 5; ++step) {
      const auto in = tokens(size_t(B) * T, int(cfg.vocab_size), 100 + step),
                 tg = tokens(size_t(B) * T, int(cfg.vocab_size), 200 + step);
      const double lc = sc.step(step - 1, in, tg, gc).loss, lg = sg.step(step - 1, in, tg, gg).loss;
      worst_loss = std::max(worst_loss, std::abs(lg - lc) / std::abs(lc));
    }
    for (const auto& p : sc.job->trained_table().params()) {  // the adapters' with [lora]
      const double e = rel(gg.grads.data() + p.global_offset, gc.grads.data() + p.global_offset, p.global_numel);
      if (e > worst_grad) worst_grad = e, worst_name = p.name;
    }
    const bool ok = worst_loss <= loss_tol && worst_grad <= grad_tol;
    failures += !ok;
    std::printf("%s{\"arch\": \"%s\", \"lora_rank\": %d, \"n_layer\": %d, \"d_model\": %d, \"n_head\": %d, \"n_kv_head\": %d, "
                "\"vocab\": %d, \"seq_len\": %d, \"worst_loss_rel_5_steps\": %.3e, \"worst_grad_rel\": %.3e, "
                "\"worst_grad_tensor\": \"%s\", \"ok\": %s}",
                ci ? ", " : "", cfg.arch.c_str(), int(loras[ci].rank), int(cfg.n_layer), int(cfg.d_model), int(cfg.n_head),
                int(cfg.n_kv_head), int(cfg.vocab_size), int(cfg.seq_len), worst_loss, worst_grad, worst_name.c_str(),
                ok ? "true" : "false");
  }
  std::printf("], \"ok\": %s}\n", failures ? "false" : "true");
  return failures ? 1 : 0;
}

// GPT-2 124M (its vocabulary held padded to 50304), or a tiny GPT-2 on the emulated device
RunSpec::Model bench_model() {
  RunSpec::Model m;
  m.arch = "gpt2";
  if (tiny()) m.n_layer = 2, m.n_head = 2, m.d_model = 64, m.d_ff = 256, m.vocab_size = 260, m.seq_len = 64;
  else m.n_layer = 12, m.n_head = 12, m.d_model = 768, m.d_ff = 3072, m.vocab_size = 50257, m.seq_len = 1024;
  m.n_kv_head = m.n_head;
  return m;
}

// deterministic: [run] deterministic's kernels (and no GEMM autotune); batch 0: the largest that
// fits. The trainer's step with its default clipping (grad_clip 1).
int bench(int steps, DType dt, bool deterministic = false, int batch = 0) {
  const RunSpec::Model cfg = bench_model();
  const int T = int(cfg.seq_len), V = int(cfg.vocab_size);
  std::vector<int> batches = tiny() ? std::vector<int>{4} : std::vector<int>{64, 48, 32, 16, 8, 4, 2, 1};
  if (batch > 0) batches = {batch};
  for (int B : batches) {
    try {
      auto gpu = make_backend(DeviceChoice::Cuda, 0);
      const RunSpec spec = check_spec(cfg, B, dt, 6e-4, /*grad_clip=*/1.0, deterministic);
      SingleRank st(spec, *gpu);
      const Model& m = *st.job->model;
      // GPU_CHECK_TOKENS=text: Zipf-distributed ids (text_like_tokens) instead of uniform ones
      const bool text = std::getenv("GPU_CHECK_TOKENS") && std::string(std::getenv("GPU_CHECK_TOKENS")) == "text";
      const auto in = text ? text_like_tokens(size_t(B) * T, V, 1) : tokens(size_t(B) * T, V, 1),
                 tg = tokens(size_t(B) * T, V, 2);
      StepHook unwatched;
      int64_t s = 0;
      for (int w = 0; w < 3; ++w) st.step(s++, in, tg, unwatched);
      gpu->synchronize();
      Nvml nvml;  // the telemetry's NVML reader; this first sample starts GPM's window over the timed steps
      if (nvml.ok()) (void)nvml.sample();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) st.step(s++, in, tg, unwatched);
      gpu->synchronize();
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
      const double n_params = double(m.num_params());
      // ztrain's one FLOP count (engine/observe/throughput.h), the training log's: 6 x the matrix
      // products' parameters (the model family's count) + 6 L C T for causal attention
      const RunSpec::Model& ms_ = cfg;
      const double matmul_params = model_family("gpt2").matmul_params(ms_);
      const double flops_per_token = zt::flops_per_token(ms_, matmul_params);
      // the forward with targets also runs the head's backward (dX and dW of the tied head, a chunk
      // at a time: models/gpt2.cpp), 4 V C per token, which the backward phase then does not
      const double head_backward_per_token = 4.0 * double(cfg.vocab_size) * double(cfg.d_model);  // as the family counts
      // the step's phases, CUDA events at the step's hooks over 3 more steps: forward (a third of
      // the FLOPs, plus the head's backward), backward (the rest), the optimizer
      PhaseTimes phases(*gpu);
      for (int i = 0; i < 3; ++i) st.step(s++, in, tg, phases);
      const double phase_ms[3] = {phases.ms[0] / 3, phases.ms[1] / 3, phases.ms[2] / 3};
      const double tokens = double(B) * T;
      std::printf("{\"check\": \"bench_phases\", \"deterministic\": %s, \"forward_ms\": %.2f, \"backward_ms\": %.2f, "
                  "\"optimizer_ms\": %.2f, \"forward_tflops\": %.1f, \"backward_tflops\": %.1f}\n",
                  deterministic ? "true" : "false", phase_ms[0], phase_ms[1], phase_ms[2],
                  (flops_per_token / 3 + head_backward_per_token) * tokens / (phase_ms[0] / 1e3) / 1e12,
                  (flops_per_token * 2 / 3 - head_backward_per_token) * tokens / (phase_ms[1] / 1e3) / 1e12);
      const double tok_s = double(B) * T / sec;
      const MemoryStats ms = gpu->memory_stats();
      // the planner's prediction (ztrain plan's): the same job and step, run nowhere
      PlannedJob plan(spec, 1, DeviceKind::CUDA);
      plan.step();
      const double planned = double(plan.backend().memory_stats().peak);
      // the telemetry's NVML reader, sampled right after the timed steps (the GPU still warm; GPM:
      // SM, tensor and DRAM activity over them)
      {
        std::printf("{\"check\": \"nvml\", \"ok\": %s, \"why\": \"%s\", \"gpm\": %s, \"samples\": [",
                    nvml.ok() ? "true" : "false", nvml.why().c_str(), nvml.gpm() ? "true" : "false");
        const auto samples = nvml.ok() ? nvml.sample() : std::vector<GpuSample>{};
        for (size_t i = 0; i < samples.size(); ++i) {
          const GpuSample& g = samples[i];
          std::string reasons;
          for (const auto& r : g.clock_event_reasons) reasons += (reasons.empty() ? "\"" : ", \"") + r + "\"";
          std::printf("%s{\"gpu\": %d, \"util_gpu\": %.2f, \"sm_clock_mhz\": %lld, \"mem_used_bytes\": %lld, "
                      "\"power_w\": %.1f, \"temp_c\": %.0f, \"sm_active\": %.3f, \"sm_occupancy\": %.3f, "
                      "\"tensor_active\": %.3f, \"dram_active\": %.3f, \"clock_event_reasons\": [%s]}",
                      i ? ", " : "", g.index, g.util_gpu, g.sm_clock_mhz, g.mem_used_bytes, g.power_w, g.temp_c,
                      g.sm_active, g.sm_occupancy, g.tensor_active, g.dram_active, reasons.c_str());
        }
        std::printf("]}\n");
      }
      std::printf("{\"check\": \"%s\", \"precision\": \"%s\", \"deterministic\": %s, \"tokens\": \"%s\", "
                  "\"micro_batch\": %d, \"seq_len\": %d, "
                  "\"params\": %.0f, \"step_ms\": %.2f, \"tokens_per_s\": %.0f, \"peak_memory_gib\": %.2f, "
                  "\"reserved_gib\": %.2f, \"fragmentation\": %.3f, "
                  "\"model_tflops\": %.2f, \"mfu_vs_989_bf16\": %.4f, \"peak_bytes\": %zu, \"planned_peak_bytes\": %.0f, "
                  "\"plan_error\": %.4f}\n",
                  tiny() ? "bench_gpt2_tiny" : "bench_gpt2_124m", dtype_name(dt), deterministic ? "true" : "false",
                  text ? "text" : "uniform", B, T, n_params, sec * 1e3, tok_s, ms.peak / 1073741824.0, ms.reserved / 1073741824.0,
                  ms.fragmentation(), flops_per_token * tok_s / 1e12, flops_per_token * tok_s / 989e12, ms.peak, planned,
                  planned / double(ms.peak) - 1.0);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "micro_batch %d: %s\n", B, e.what());
    }
  }
  return 1;
}

// Milliseconds per call of fn over `reps` back-to-back calls after one warm-up, by the backend's
// CUDA events (its timing points)
template <typename Fn>
double per_call_ms(Backend& gpu, int reps, Fn fn) {
  fn();
  gpu.synchronize();
  const int a = gpu.timing_point();
  for (int i = 0; i < reps; ++i) fn();
  const int b = gpu.timing_point();
  gpu.synchronize();
  return gpu.timing_ms(a, b) / reps;
}

// One shape: B sequences of T tokens, NH heads of size C / NH.
void attention_shape(DType dt, int B, int T, int C, int NH) {
  auto gpu = make_backend(DeviceChoice::Cuda, 0);
  gpu->set_compute_dtype(dt);
  const size_t nq = size_t(B) * T * 3 * C, es = gpu->compute_size();
  void* qkv = gpu->alloc(nq * es);
  void* out = gpu->alloc(size_t(B) * T * C * es);
  float* lse = static_cast<float*>(gpu->alloc(size_t(B) * NH * T * 4));
  void* dqkv = gpu->alloc(nq * es);
  std::vector<float> h(nq);
  std::mt19937 g(3);
  std::normal_distribution<float> d;
  for (auto& x : h) x = d(g);
  std::vector<char> raw(nq * es);
  convert_host(raw.data(), dt, h.data(), DType::F32, int64_t(nq));
  gpu->copy_to_device(qkv, raw.data(), raw.size());
  const int reps = tiny() ? 2 : 20;
  auto time = [&](auto fn) { return per_call_ms(*gpu, reps, fn) / 1e3; };  // seconds
  const double fwd = time([&] { gpu->attention_forward(out, lse, qkv, B, T, C, NH, NH); });
  const double bwd = time([&] { gpu->attention_backward(dqkv, out, out, qkv, lse, B, T, C, NH, NH); });
  // GPU_CHECK_ATTENTION_DUMP=DIR: this shape's inputs and results (one forward, one backward with
  // dout = out into a zeroed dqkv) for tools/gpu_check/torch_attention.py to compare with PyTorch's
  // attention: DIR/attention_B{B}_T{T}_hs{hs}.{json,bin}, the .bin holding qkv, out, dqkv
  // (compute type) and lse (fp32) in that order
  if (const char* dir = std::getenv("GPU_CHECK_ATTENTION_DUMP"); dir && *dir && dt != DType::F32) {
    gpu->attention_forward(out, lse, qkv, B, T, C, NH, NH);
    gpu->fill_zero(dqkv, nq * es);
    gpu->attention_backward(dqkv, out, out, qkv, lse, B, T, C, NH, NH);
    gpu->synchronize();
    const std::string base = std::string(dir) + "/attention_B" + std::to_string(B) + "_T" + std::to_string(T) + "_hs" +
                             std::to_string(C / NH);
    std::vector<char> buf(nq * es);
    if (FILE* f = std::fopen((base + ".bin").c_str(), "wb")) {
      for (auto [p, bytes] : {std::pair{(const void*)qkv, nq * es}, {out, size_t(B) * T * C * es}, {dqkv, nq * es},
                              {(const void*)lse, size_t(B) * NH * T * 4}}) {
        gpu->copy_to_host(buf.data(), p, bytes);
        std::fwrite(buf.data(), 1, bytes, f);
      }
      std::fclose(f);
    }
    if (FILE* f = std::fopen((base + ".json").c_str(), "w")) {
      std::fprintf(f, "{\"B\": %d, \"T\": %d, \"C\": %d, \"heads\": %d, \"dtype\": \"%s\"}\n", B, T, C, NH,
                   dtype_name(dt));
      std::fclose(f);
    }
  }
  // causal: half of the 4 * B * NH * T^2 * hs forward FLOPs; backward is 2.5x forward
  const double f = 4.0 * B * NH * double(T) * T * (C / NH) / 2;
  std::printf("{\"check\": \"attention\", \"B\": %d, \"T\": %d, \"heads\": %d, \"head_size\": %d, \"precision\": \"%s\", "
              "\"fwd_ms\": %.3f, \"bwd_ms\": %.3f, \"fwd_tflops\": %.2f, \"bwd_tflops\": %.2f}\n",
              B, T, NH, C / NH, dtype_name(dt), fwd * 1e3, bwd * 1e3, f / fwd / 1e12, 2.5 * f / bwd / 1e12);
  std::fflush(stdout);
  for (void* p : {qkv, out, (void*)lse, dqkv}) gpu->free(p);
}

// The targets are at head size 64 and 128, T = 1024 and 4096 (8192 tokens each); fp32
// (the CUDA-core kernels) at GPT-2's shape only.
int attention(DType dt) {
  if (tiny()) {  // both head sizes, a few tiles
    for (const int hs : {64, 128}) attention_shape(dt, 1, 130, 256, 256 / hs);
    return 0;
  }
  if (dt == DType::F32) {
    attention_shape(dt, 8, 1024, 768, 12);
    return 0;
  }
  for (const int T : {1024, 4096})
    for (const int hs : {64, 128}) attention_shape(dt, 8192 / T, T, 768, 768 / hs);
  return 0;
}

// FP8 linear layers (engine/backend/fp8_recipe.h) against the compute type's at one shape: forward
// and backward (input and weight gradients) timed by CUDA events over `reps` calls each (the
// amax and quantize passes included: the effective rate a training step sees; and again with the
// weight cast once beforehand, as training keeps it between updates at ZeRO 0-2), and the FP8
// forward's output against the bf16 one (normalized error: what the recipe's rounding costs,
// about 1e-3 for E4M3 operands). Fails (returns 1) above 1e-2 or when not finite: a wrong scale.
int fp8_linear_shape(const char* name, int N, int C, int OC) {
  auto gpu = make_backend(DeviceChoice::Cuda, 0);
  gpu->set_compute_dtype(DType::BF16);
  const size_t es = 2;
  void* x = gpu->alloc(size_t(N) * C * es);
  void* w = gpu->alloc(size_t(OC) * C * es);
  void* out = gpu->alloc(size_t(N) * OC * es);
  void* out8 = gpu->alloc(size_t(N) * OC * es);
  void* dx = gpu->alloc(size_t(N) * C * es);
  float* dw = static_cast<float*>(gpu->alloc(size_t(OC) * C * 4));
  std::minstd_rand g(5);  // uniform, unit variance: cheap for the 10^8 values of Llama's shapes
  std::uniform_real_distribution<float> d(-1.7320508f, 1.7320508f);
  auto upload = [&](void* p, size_t n, float scale) {
    std::vector<float> h(n);
    for (auto& v : h) v = d(g) * scale;
    std::vector<char> raw(n * es);
    convert_host(raw.data(), DType::BF16, h.data(), DType::F32, int64_t(n));
    gpu->copy_to_device(p, raw.data(), raw.size());
  };
  upload(x, size_t(N) * C, 1.0f);
  upload(w, size_t(OC) * C, 0.02f);
  const int reps = tiny() ? 2 : 10;
  auto time = [&](auto fn) { return per_call_ms(*gpu, reps, fn); };
  const double fwd16 = time([&] { gpu->matmul_forward(out, x, w, nullptr, N, C, OC); });
  const double fwd8 = time([&] { gpu->matmul_forward_fp8(out8, x, w, nullptr, N, C, OC, nullptr); });
  const double bwd16 = time([&] { gpu->matmul_backward(dx, dw, nullptr, out, x, w, N, C, OC); });
  const double bwd8 = time([&] { gpu->matmul_backward_fp8(dx, dw, nullptr, out, x, w, N, C, OC, nullptr); });
  // with the weight cast once beforehand (its copy, as training keeps it at ZeRO 0-2)
  void* w_copy = gpu->alloc(size_t(fp8_recipe::weight_copy_bytes(OC, C)));
  gpu->fp8_weight_copy(w_copy, w, OC, C);
  const double fwd8c = time([&] { gpu->matmul_forward_fp8(out8, x, w, nullptr, N, C, OC, w_copy); });
  const double bwd8c = time([&] { gpu->matmul_backward_fp8(dx, dw, nullptr, out, x, w, N, C, OC, w_copy); });
  gpu->free(w_copy);
  std::vector<char> a(size_t(N) * OC * es), b(a.size());
  gpu->copy_to_host(a.data(), out, a.size());
  gpu->copy_to_host(b.data(), out8, b.size());
  std::vector<float> fa(size_t(N) * OC), fb(fa.size());
  convert_host(fa.data(), DType::F32, a.data(), DType::BF16, int64_t(fa.size()));
  convert_host(fb.data(), DType::F32, b.data(), DType::BF16, int64_t(fb.size()));
  double num = 0, den = 0;
  for (size_t i = 0; i < fa.size(); ++i) num += double(fa[i] - fb[i]) * (fa[i] - fb[i]), den += double(fa[i]) * fa[i];
  const double flops = 2.0 * N * C * OC, nmse = den > 0 ? num / den : 0.0;
  std::printf("{\"check\": \"fp8_linear\", \"shape\": \"%s\", \"N\": %d, \"C\": %d, \"OC\": %d, \"bf16_fwd_ms\": %.3f, "
              "\"fp8_fwd_ms\": %.3f, \"bf16_bwd_ms\": %.3f, \"fp8_bwd_ms\": %.3f, \"fwd_speedup\": %.3f, "
              "\"bwd_speedup\": %.3f, \"fp8_fwd_weight_copy_ms\": %.3f, \"fp8_bwd_weight_copy_ms\": %.3f, "
              "\"fp8_fwd_effective_tflops\": %.1f, \"fp8_vs_bf16_nmse\": %.3e, \"ok\": %s}\n",
              name, N, C, OC, fwd16, fwd8, bwd16, bwd8, fwd16 / fwd8, bwd16 / bwd8, fwd8c, bwd8c, flops / fwd8 / 1e9, nmse,
              std::isfinite(nmse) && nmse <= 1e-2 ? "true" : "false");
  std::fflush(stdout);
  for (void* p : {x, w, out, out8, dx, static_cast<void*>(dw)}) gpu->free(p);
  return std::isfinite(nmse) && nmse <= 1e-2 ? 0 : 1;
}

// GPT-2 124M's and Llama 3 8B's linear layers at 8192 tokens (issue 50's shapes)
int fp8_linear() {
  if (tiny()) return fp8_linear_shape("tiny", 64, 64, 96);
  const int N = 8192;
  int failed = 0;
  failed |= fp8_linear_shape("gpt2_qkv", N, 768, 2304);
  failed |= fp8_linear_shape("gpt2_mlp_up", N, 768, 3072);
  failed |= fp8_linear_shape("gpt2_mlp_down", N, 3072, 768);
  failed |= fp8_linear_shape("llama8b_qkv", N, 4096, 6144);
  failed |= fp8_linear_shape("llama8b_gate_up", N, 4096, 28672);
  failed |= fp8_linear_shape("llama8b_down", N, 14336, 4096);
  return failed;
}

// GPT-2 124M through the trainer's job and step at world size 1 (self communicators), B = 4, in
// bf16 at ZeRO `stage`, with every block layer in FP8 where `fp8`: 3 warm-up steps, then `steps`
// timed; every step's loss, the timed steps' mean time and the peak device memory.
struct StepsRun {
  std::vector<float> losses;
  double ms = 0;
  size_t peak = 0;
};
StepsRun run_steps(int stage, bool fp8, int steps, DType dt) {
  const RunSpec::Model cfg = bench_model();
  const int T = int(cfg.seq_len), B = 4;
  auto gpu = make_backend(DeviceChoice::Cuda, 0);
  RunSpec spec = check_spec(cfg, B, dt, 6e-4, /*grad_clip=*/1.0, false, stage);
  if (fp8) spec.precision.fp8 = Fp8Recipe::Tensorwise, spec.precision.fp8_layers = Fp8Layers::All;
  SingleRank rank(spec, *gpu);
  const auto in = tokens(size_t(B) * T, int(cfg.vocab_size), 1), tg = tokens(size_t(B) * T, int(cfg.vocab_size), 2);
  StepHook unwatched;
  StepsRun r;
  int64_t s = 0;
  for (int w = 0; w < 3; ++w) r.losses.push_back(rank.step(s++, in, tg, unwatched).loss);
  gpu->synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) r.losses.push_back(rank.step(s++, in, tg, unwatched).loss);
  gpu->synchronize();
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
  r.peak = gpu->memory_stats().peak;
  return r;
}

// ZeRO-3 against ZeRO-0 (the stage-3 machinery's own cost); then both with every block layer in
// FP8: ZeRO-0 casts each weight once per update into a copy, ZeRO-3 casts its shards once per
// update and gathers them as FP8 bytes (issue 50): the same losses bit for bit on the GPU's own
// cuBLASLt and casts, and each one's step time.
int zero3(int steps, DType dt) {
  const StepsRun z0 = run_steps(0, false, steps, dt), z3 = run_steps(3, false, steps, dt);
  std::printf("{\"check\": \"zero3_overhead\", \"micro_batch\": 4, \"zero0_step_ms\": %.2f, \"zero3_step_ms\": %.2f, "
              "\"overhead\": %.3f, \"zero0_peak_gib\": %.2f, \"zero3_peak_gib\": %.2f}\n",
              z0.ms, z3.ms, z3.ms / z0.ms - 1.0, z0.peak / 1073741824.0, z3.peak / 1073741824.0);
  std::fflush(stdout);
  const StepsRun f0 = run_steps(0, true, steps, DType::BF16), f3 = run_steps(3, true, steps, DType::BF16);
  const bool same = f0.losses == f3.losses;
  std::printf("{\"check\": \"zero3_fp8_gather\", \"micro_batch\": 4, \"steps\": %d, \"zero0_fp8_step_ms\": %.2f, "
              "\"zero3_fp8_step_ms\": %.2f, \"last_loss\": %.6f, \"losses_equal\": %s, \"ok\": %s}\n",
              int(f0.losses.size()), f0.ms, f3.ms, double(f3.losses.back()), same ? "true" : "false",
              same ? "true" : "false");
  std::fflush(stdout);
  return same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (cuda_device_count() == 0) {
    std::puts("{\"skip\": \"no CUDA device visible\"}");
    return 77;
  }
  const std::string what = argc > 1 ? argv[1] : "parity";
  try {
    if (what == "parity") {
      int failed = parity(DType::F32);
      failed |= parity(DType::BF16);
      failed |= parity(DType::F16);
      return failed;
    }
    if (what == "bench") return bench(argc > 2 ? std::atoi(argv[2]) : 30, DType::BF16);
    if (what == "bench-fp32") return bench(argc > 2 ? std::atoi(argv[2]) : 30, DType::F32);
    if (what == "bench-deterministic")
      return bench(argc > 2 ? std::atoi(argv[2]) : 30, DType::BF16, true, argc > 3 ? std::atoi(argv[3]) : 0);
    if (what == "attention") {
      const int failed = attention(DType::BF16);
      return failed | attention(DType::F32);
    }
    if (what == "zero3") return zero3(argc > 2 ? std::atoi(argv[2]) : 10, DType::BF16);
    if (what == "fp8") return fp8_linear();
  } catch (const std::exception& e) {
    std::printf("{\"check\": \"%s\", \"error\": \"%s\"}\n", what.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: gpt2_cuda_check parity|bench [steps]|bench-fp32 [steps]|bench-deterministic [steps [batch]]|"
                       "attention|zero3 [steps]|fp8\n");
  return 2;
}
