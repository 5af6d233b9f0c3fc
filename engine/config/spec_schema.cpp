// The run spec's key table (see spec_schema.h) and the "did you mean" helper.
#include "engine/config/spec_schema.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace zt {

#define ZT_KEY(sec, member, req, help) \
  SpecKey { #sec, #member, req, [](RunSpec& s) -> SpecField { return &s.sec.member; }, help }

#define ZT_SECRET(sec, member, help) \
  SpecKey { #sec, #member, false, [](RunSpec& s) -> SpecField { return &s.sec.member; }, help, true }

#define ZT_OPTIONAL(sec, member, range, help) \
  SpecKey { #sec, #member, false, [](RunSpec& s) -> SpecField { return &s.sec.member; }, help, false, true, range }

#define ZT_RANGED(sec, member, req, range, help) \
  SpecKey { #sec, #member, req, [](RunSpec& s) -> SpecField { return &s.sec.member; }, help, false, false, range }

// A key with a fixed set of values (a typed enum): the loader refuses any other, the reference
// lists them.
#define ZT_CHOICE(sec, member, help) \
  SpecKey { #sec, #member, false, [](RunSpec& s) -> SpecField { return spec_choice(&s.sec.member); }, help }

const std::vector<SpecKey>& spec_schema() {
  static const std::vector<SpecKey> keys = {
      ZT_KEY(run, name, false, "run name, shown in logs"),
      ZT_KEY(run, out_dir, false, "directory for metrics.jsonl and config.resolved.toml"),
      ZT_KEY(run, seed, false, "seed for initialization and data order"),
      ZT_CHOICE(run, device, "where the model runs (auto: a GPU when one is visible, else the CPU)"),
      ZT_KEY(run, threads, false, "CPU threads (0 = all cores)"),
      ZT_KEY(run, tensorboard, false, "also write every metrics.jsonl scalar as TensorBoard event files (events.out.tfevents.*), against steps and consumed tokens"),
      ZT_KEY(run, tensorboard_dir, false, "directory of the TensorBoard event files, created if missing (empty = out_dir); e.g. runs/tb/<name> under one logdir"),
      ZT_KEY(run, deterministic, false, "bitwise-reproducible GPU runs: ordered reductions, NCCL Ring/Simple, the first heuristic GEMM"),
      ZT_KEY(run, device_memory_limit, false, "the backend never holds more device memory (e.g. \"40GB\"; empty = none)"),
      ZT_RANGED(run, telemetry_s, false, between(0, 3600), "seconds between device telemetry rows in metrics.jsonl (0 = none, else at least 0.05)"),
      ZT_RANGED(run, straggler_threshold, false, between(0, 100, true), "a rank busy (compute, data, offload, host) this fraction above the other ranks' median over a log interval is named as a straggler"),
      ZT_KEY(run, trace_steps, false, "steps (\"5\" or \"5-7\") traced to out_dir/trace.rankR.json (Chrome trace)"),
      ZT_RANGED(run, peak_tflops, false, at_least(0), "peak TFLOP/s of one device for MFU (0 = known GPUs' table; CPU: measured)"),
      ZT_KEY(model, arch, false, "model family: \"gpt2\", \"llama\", \"mistral\", \"qwen2\" or \"qwen3\""),
      ZT_RANGED(model, n_layer, true, at_least(1), "transformer blocks"),
      ZT_RANGED(model, n_head, true, at_least(1), "attention heads"),
      ZT_RANGED(model, d_model, true, at_least(1), "embedding width"),
      ZT_KEY(model, d_ff, false, "MLP hidden width (default 4 * d_model)"),
      ZT_RANGED(model, vocab_size, true, at_least(2), "vocabulary size: the tokenizer's (>= it)"),
      ZT_RANGED(model, vocab_multiple, false, between(1, 65536), "pad the vocabulary internally to a multiple of this x tensor (1 = no padding)"),
      ZT_RANGED(model, seq_len, true, at_least(1), "context length in tokens"),
      ZT_KEY(model, n_kv_head, false, "key/value heads, grouped-query attention (the Llama-shaped families; default n_head)"),
      ZT_RANGED(model, head_dim, false, at_least(0), "each attention head's width (0 = d_model / n_head; another value: the Llama-shaped families, not gpt2)"),
      ZT_RANGED(model, rope_theta, false, above(1), "rotary embedding base (the Llama-shaped families)"),
      ZT_KEY(model, rope_scaling, false, "RoPE frequency scaling (Llama-shaped families): \"\" (none) or \"llama3\" (Llama 3.1-3.3's rule, with the four rope_scaling_* keys)"),
      ZT_RANGED(model, rope_scaling_factor, false, at_least(1), "llama3 scaling: how much longer a context than the original the low frequencies are stretched to"),
      ZT_RANGED(model, rope_scaling_low_freq_factor, false, above(0), "llama3 scaling: wavelengths above original / this are divided by the factor"),
      ZT_RANGED(model, rope_scaling_high_freq_factor, false, above(0), "llama3 scaling: wavelengths below original / this are unchanged (between the two: interpolated)"),
      ZT_RANGED(model, rope_scaling_original_max_positions, false, at_least(1), "llama3 scaling: the context the model was pre-trained at"),
      ZT_RANGED(model, norm_eps, false, between(0, 1, true, true), "LayerNorm (gpt2) / RMSNorm (the Llama-shaped families) epsilon"),
      ZT_KEY(model, init_from, false, "Hugging Face model directory whose weights (and shape) start a fresh run"),
      ZT_KEY(model, tie_embeddings, false, "output head = token embedding (gpt2: always; the Llama-shaped families: default false)"),
      ZT_KEY(lora, rank, false, "low-rank adapters' rank r (0 = none: every weight trains); with r > 0 the model's weights are frozen and only the adapters train"),
      ZT_RANGED(lora, alpha, false, above(0), "adapters' scale numerator: the update is alpha / rank x B A x"),
      ZT_RANGED(lora, dropout, false, between(0, 1, false, true), "dropout on the adapters' input in training (PEFT's lora_dropout): a mask drawn by each element's place in the global batch, the same for any layout"),
      ZT_KEY(lora, targets, false, "the linear layers that get adapters, by role, comma-separated or a list: q, k, v, o, gate, up, down (GPT-2: qkv, o, up, down), or all; empty: the family's default as PEFT's (Llama-shaped: q,v; GPT-2: qkv)"),
      ZT_CHOICE(lora, init, "A's initial draw (B starts at zero): kaiming = uniform(+-1/sqrt(in)) as PEFT's default, gaussian = normal(0, 1/rank)"),
      ZT_KEY(lora, init_from, false, "a PEFT adapter directory (adapter_config.json, adapter_model.safetensors) whose adapters start a fresh run: its r, lora_alpha and layers must agree with this section; the base is [model] init_from"),
      ZT_RANGED(train, micro_batch, false, at_least(1), "sequences per forward/backward"),
      ZT_RANGED(train, global_batch, false, at_least(1), "sequences per optimizer step"),
      ZT_KEY(train, max_steps, false, "optimizer steps"),
      ZT_RANGED(train, log_every, false, at_least(1), "steps between progress lines / metrics"),
      ZT_KEY(train, eval_every, false, "steps between evaluations (0 = at the end only)"),
      ZT_RANGED(train, eval_steps, false, at_least(1), "micro-batches per evaluation"),
      ZT_KEY(train, sample_tokens, false, "tokens to generate after training (0 = none)"),
      ZT_RANGED(train, sample_temperature, false, above(0), "sampling temperature"),
      ZT_CHOICE(train, spike_policy, "\"off\", \"skip\" (skip a step whose loss is above spike_factor x the running median; non-finite steps are always skipped) or \"rollback\" (skip, and after rollback_after skips in a row go back to the checkpoint before them)"),
      ZT_RANGED(train, spike_factor, false, above(1), "a loss above this many times the median of the last spike_window steps is a spike"),
      ZT_RANGED(train, spike_window, false, at_least(1), "applied steps whose losses make the running median"),
      ZT_RANGED(train, max_skipped_steps, false, at_least(1), "skipped steps in a row (non-finite or spikes) that end the run"),
      ZT_RANGED(train, rollback_after, false, at_least(1), "spike_policy = \"rollback\": skipped steps in a row that roll back to the newest checkpoint before them (< max_skipped_steps)"),
      ZT_RANGED(train, max_rollbacks, false, at_least(1), "spike_policy = \"rollback\": rollbacks in one launch; the next one ends the run"),
      ZT_CHOICE(train, recompute, "activation recompute: \"none\", \"selective\" (norms, SwiGLU) or \"full\" (whole blocks)"),
      ZT_RANGED(optim, lr, false, at_least(0), "peak learning rate"),
      ZT_RANGED(optim, min_lr, false, at_least(0), "final learning rate of the decay (<= lr)"),
      ZT_KEY(optim, warmup_steps, false, "linear warmup steps"),
      ZT_CHOICE(optim, schedule, "the learning rate after warmup: decayed to min_lr (cosine, linear) or constant"),
      ZT_RANGED(optim, weight_decay, false, at_least(0), "decoupled weight decay (not on biases/norms)"),
      ZT_RANGED(optim, beta1, false, between(0, 1, false, true), "AdamW beta1"),
      ZT_RANGED(optim, beta2, false, between(0, 1, false, true), "AdamW beta2"),
      ZT_RANGED(optim, eps, false, above(0), "AdamW epsilon"),
      ZT_RANGED(optim, grad_clip, false, at_least(0), "global gradient-norm clip (0 = off)"),
      ZT_CHOICE(precision, compute, "\"auto\" (bf16 on GPU, fp32 on CPU), \"fp32\", \"bf16\" or \"fp16\""),
      ZT_RANGED(precision, loss_scale, false, at_least(0), "fp16 loss scale: 0 = dynamic, > 0 = fixed"),
      ZT_RANGED(precision, initial_scale, false, above(0), "fp16 dynamic loss scaling: starting scale (>= min_scale)"),
      ZT_RANGED(precision, scale_window, false, at_least(1), "fp16 dynamic loss scaling: clean steps before the scale doubles"),
      ZT_RANGED(precision, min_scale, false, above(0), "fp16 dynamic loss scaling: overflow at this scale stops the run"),
      ZT_CHOICE(precision, fp8, "the transformer blocks' linear layers in FP8: \"none\" or \"tensorwise\" (per-tensor current scaling: E4M3 inputs and weights, E5M2 output gradients, fp32 accumulation; needs FP8 tensor cores, compute capability 8.9+)"),
      ZT_CHOICE(precision, fp8_layers, "which linear layers fp8 converts: \"auto\" (not those too small to gain: weight (out, in) with out <= 4096 and in <= 1024, torchao's H100 rule) or \"all\" (every one whose sizes are multiples of 16)"),
      ZT_KEY(precision, fp8_all_gather, false, "ZeRO-3 with fp8: each rank casts its shards of the FP8 layers' weights once per update, with the whole weight's scale, and the passes gather those bytes (half the traffic of the compute type; the same numbers as casting the gathered weight); false gathers them in the compute type and casts in each product. No effect below ZeRO-3 (the weights are cast once per update there)"),
      ZT_KEY(precision, fp8_reference, false, "CPU backend only: run fp8's recipe as its quantize-dequantize reference, to check its numerics (no speed-up; slower than without)"),
      ZT_RANGED(parallel, tensor, false, at_least(1), "tensor-parallel degree (data-parallel = world / tensor)"),
      ZT_RANGED(parallel, zero_stage, false, between(0, 3), "ZeRO stage 0-3 over the data-parallel group"),
      ZT_RANGED(parallel, bucket_mb, false, above(0), "gradient reduce-scatter bucket size in MiB"),
      ZT_KEY(parallel, prefetch, false, "ZeRO-3 layers gathered ahead of use"),
      ZT_RANGED(parallel, replicate, false, at_least(1), "hybrid sharding: the data-parallel group as this many replicas of consecutive ranks; ZeRO shards within each, gradients all-reduced across them (1: shard over all)"),
      ZT_KEY(parallel, sequence_parallel, false, "Megatron sequence parallelism: the norm and residual activations split by rows across the tensor group (tensor >= 2; tensor = 1: nothing to split)"),
      ZT_CHOICE(offload, optimizer, "\"none\", \"cpu\" or \"nvme\": masters, AdamW moments (and gradient shard) off the device; AdamW on the CPU"),
      ZT_CHOICE(offload, params, "\"none\", \"cpu\" or \"nvme\": ZeRO-3 parameter shards in pinned host memory (cpu) or on the SSD (nvme, with optimizer = \"nvme\"), uploaded per layer"),
      ZT_KEY(offload, nvme_path, false, "directory on a local SSD for optimizer = \"nvme\""),
      ZT_RANGED(offload, buffer_mb, false, between(0.0625, 1024), "nvme: MiB per I/O request (one request moves at most 2 GiB)"),
      ZT_RANGED(offload, io_depth, false, between(1, 64), "nvme: I/O requests in flight"),
      ZT_KEY(offload, pinned_limit, false, "pinned host memory per rank (e.g. \"64GB\"; empty = half the host's memory / ranks on it)"),
      ZT_CHOICE(comm, backend, "collectives: NCCL on GPU buffers, MPI on host buffers (auto: NCCL for a GPU run when built with it)"),
      ZT_RANGED(comm, timeout_s, false, between(0, 604800, true), "seconds before a stuck collective ends the job (at most a week)"),
      ZT_RANGED(comm, flight_entries, false, between(0, 1000000), "collectives each rank keeps for flight_rank_NNNNN.json (0 = off)"),
      ZT_KEY(comm, nccl_algo, false, "NCCL_ALGO for this run (empty = NCCL's choice)"),
      ZT_KEY(comm, nccl_proto, false, "NCCL_PROTO for this run (empty = NCCL's choice)"),
      ZT_KEY(data, train, false, "training shards: a directory with manifest.json (or [[data.sources]])"),
      ZT_KEY(data, val, false, "validation shards (optional; or [[data.sources]] with split = \"val\")"),
      ZT_KEY(data, allow_mixture_change, false, "a resumed run may change [[data.sources]] and [[data.stages]] (new weights apply from the resume step)"),
      ZT_CHOICE(data, packing, "fine-tuning datasets' rows: \"documents\" (whole documents packed best-fit into each row; attention stays inside each document, positions restart, the loss covers the tokens the dataset marks), \"padded\" (one document a row, padded) or \"none\" (the token stream of pre-training)"),
      ZT_KEY(data, sample_log, false, "write out_dir/samples.rankNNNNN.tsv: each sample's step, global index, source and index in it"),
      ZT_KEY(data, cache_dir, false, "local SSD cache of remote shards"),
      ZT_KEY(data, cache_limit, false, "cache size: bytes or e.g. \"200GB\""),
      ZT_KEY(data, prefetch, false, "blocks of shards downloaded ahead of use"),
      ZT_RANGED(data, shuffle_block, false, at_least(1), "shards whose samples are shuffled together"),
      ZT_RANGED(data, retries, false, between(0, 100), "retries of a failed request (5xx, 429, reset, timeout)"),
      ZT_RANGED(data, timeout_s, false, between(0, 86400, true), "a request stalled this long is retried"),
      ZT_KEY(data, s3_endpoint, false, "S3-compatible endpoint URL (empty = AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS)"),
      ZT_KEY(data, s3_region, false, "S3 region for request signing (empty = AWS_REGION / AWS_DEFAULT_REGION, else us-east-1)"),
      ZT_KEY(data, s3_path_style, false, "path-style S3 addressing (endpoint/bucket/key)"),
      ZT_SECRET(data, s3_access_key_id, "S3 access key (default: AWS_ACCESS_KEY_ID)"),
      ZT_SECRET(data, s3_secret_access_key, "S3 secret key (default: AWS_SECRET_ACCESS_KEY)"),
      ZT_SECRET(data, s3_session_token, "S3 session token (default: AWS_SESSION_TOKEN)"),
      ZT_KEY(checkpoint, dir, false, "checkpoint directory or s3://bucket/prefix (empty = no checkpoints)"),
      ZT_KEY(checkpoint, local_dir, false, "s3:// dir: local copy and cache (default <run.out_dir>/checkpoints)"),
      ZT_RANGED(checkpoint, upload_part_mb, false, at_least(5), "s3:// dir: multipart upload part size in MiB (S3's smallest part is 5)"),
      ZT_KEY(checkpoint, every_steps, false, "steps between checkpoints (0 = at the end and on signals only)"),
      ZT_RANGED(checkpoint, every_minutes, false, between(0, 525600), "minutes between checkpoints (0 = off; at most a year)"),
      ZT_KEY(checkpoint, keep_last, false, "complete checkpoints kept (0 = all)"),
      ZT_KEY(checkpoint, async, false, "write checkpoints in the background"),
      ZT_KEY(checkpoint, resume, false, "\"auto\" (newest complete checkpoint in dir), a checkpoint path, or empty"),
      ZT_KEY(checkpoint, init_from, false, "checkpoint whose weights start this run (optimizer fresh)"),
      ZT_KEY(checkpoint, exit_after, false, "stop after this many steps of this launch, with a checkpoint (0 = off)"),
      ZT_OPTIONAL(checkpoint, preemption_notice_s, between(0, 86400, true), "seconds of notice before a preemption (AWS spot 120, GCP 30): a save's time is estimated at start and checked against it (unset: no check)"),
  };
  return keys;
}

#undef ZT_KEY
#undef ZT_SECRET
#undef ZT_OPTIONAL
#undef ZT_RANGED
#undef ZT_CHOICE

std::string range_text(const SpecRange& r) {
  const bool low = std::isfinite(r.lo), high = std::isfinite(r.hi);
  if (low && high)
    return fmt::format("in {}{}, {}{}", r.lo_open ? '(' : '[', r.lo, r.hi, r.hi_open ? ')' : ']');
  if (low) return fmt::format("{} {}", r.lo_open ? ">" : ">=", r.lo);
  if (high) return fmt::format("{} {}", r.hi_open ? "<" : "<=", r.hi);
  return "any value";
}

bool has_range(const SpecKey& k) {
  RunSpec spec;
  return std::holds_alternative<int64_t*>(k.field(spec)) ? std::string(k.key) != "seed"
                                                          : std::isfinite(k.range.lo) || std::isfinite(k.range.hi);
}

SpecRange key_range(const SpecKey& k) {
  RunSpec spec;
  const bool integer = std::holds_alternative<int64_t*>(k.field(spec));
  if (!integer || std::isfinite(k.range.lo) || std::isfinite(k.range.hi) || std::string(k.key) == "seed") return k.range;
  return at_least(0);
}

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
}  // namespace

std::string nearest_name(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    size_t d = edit_distance(name, c);
    if (d < best_d) best_d = d, best = c;
  }
  // Close enough to be a typo: at most a third of the longer name.
  size_t limit = std::max<size_t>(2, std::max(name.size(), best.size()) / 3);
  return best_d <= limit ? best : "";
}

std::string full_name(const SpecKey& k) { return fmt::format("[{}] {}", k.section, k.key); }

std::vector<std::string> key_choices(const SpecKey& k) {
  RunSpec spec;
  const SpecField f = k.field(spec);
  const auto* c = std::get_if<SpecChoice>(&f);
  return c ? std::vector<std::string>(c->names, c->names + c->count) : std::vector<std::string>{};
}

std::string choices_text(const SpecKey& k) {
  std::string out;
  for (const std::string& c : key_choices(k)) out += (out.empty() ? "\"" : ", \"") + c + "\"";
  return out;
}

}  // namespace zt
