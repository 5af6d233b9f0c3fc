// The run spec's key table (see spec_schema.h) and the "did you mean" helper.
#include "engine/config/spec_schema.h"

#include <algorithm>

namespace zt {

#define ZT_KEY(sec, member, req, help) \
  SpecKey { #sec, #member, req, [](RunSpec& s) -> SpecField { return &s.sec.member; }, help }

#define ZT_SECRET(sec, member, help) \
  SpecKey { #sec, #member, false, [](RunSpec& s) -> SpecField { return &s.sec.member; }, help, true }

#define ZT_OPTIONAL(sec, member, help) \
  SpecKey { #sec, #member, false, [](RunSpec& s) -> SpecField { return &s.sec.member; }, help, false, true }

const std::vector<SpecKey>& spec_schema() {
  static const std::vector<SpecKey> keys = {
      ZT_KEY(run, name, false, "run name, shown in logs"),
      ZT_KEY(run, out_dir, false, "directory for metrics.jsonl and config.resolved.toml"),
      ZT_KEY(run, seed, false, "seed for initialization and data order"),
      ZT_KEY(run, device, false, "\"auto\", \"cpu\" or \"cuda\""),
      ZT_KEY(run, threads, false, "CPU threads (0 = all cores)"),
      ZT_KEY(run, deterministic, false, "bitwise-reproducible GPU runs: ordered reductions, NCCL Ring/Simple, the first heuristic GEMM"),
      ZT_KEY(run, device_memory_limit, false, "the backend never holds more device memory (e.g. \"40GB\"; empty = none)"),
      ZT_KEY(run, telemetry_s, false, "seconds between device telemetry rows in metrics.jsonl (0 = none)"),
      ZT_KEY(run, straggler_threshold, false, "a rank busy (compute, data, offload, host) this fraction above the other ranks' median over a log interval is named as a straggler"),
      ZT_KEY(run, trace_steps, false, "steps (\"5\" or \"5-7\") traced to out_dir/trace.rankR.json (Chrome trace)"),
      ZT_KEY(run, peak_tflops, false, "peak TFLOP/s of one device for MFU (0 = known GPUs' table; CPU: measured)"),
      ZT_KEY(model, arch, false, "model family: \"gpt2\" or \"llama\""),
      ZT_KEY(model, n_layer, true, "transformer blocks"),
      ZT_KEY(model, n_head, true, "attention heads"),
      ZT_KEY(model, d_model, true, "embedding width"),
      ZT_KEY(model, d_ff, false, "MLP hidden width (default 4 * d_model)"),
      ZT_KEY(model, vocab_size, true, "vocabulary size: the tokenizer's (>= it)"),
      ZT_KEY(model, vocab_multiple, false, "pad the vocabulary internally to a multiple of this x tensor (1 = no padding)"),
      ZT_KEY(model, seq_len, true, "context length in tokens"),
      ZT_KEY(model, n_kv_head, false, "key/value heads, grouped-query attention (llama; default n_head)"),
      ZT_KEY(model, rope_theta, false, "rotary embedding base (llama)"),
      ZT_KEY(model, norm_eps, false, "LayerNorm (gpt2) / RMSNorm (llama) epsilon"),
      ZT_KEY(model, init_from, false, "Hugging Face model directory whose weights (and shape) start a fresh run"),
      ZT_KEY(model, tie_embeddings, false, "output head = token embedding (gpt2: always; llama: default false)"),
      ZT_KEY(train, micro_batch, false, "sequences per forward/backward"),
      ZT_KEY(train, global_batch, false, "sequences per optimizer step"),
      ZT_KEY(train, max_steps, false, "optimizer steps"),
      ZT_KEY(train, log_every, false, "steps between progress lines / metrics"),
      ZT_KEY(train, eval_every, false, "steps between evaluations (0 = at the end only)"),
      ZT_KEY(train, eval_steps, false, "micro-batches per evaluation"),
      ZT_KEY(train, sample_tokens, false, "tokens to generate after training (0 = none)"),
      ZT_KEY(train, sample_temperature, false, "sampling temperature"),
      ZT_KEY(train, spike_policy, false, "\"off\", \"skip\" (skip a step whose loss is above spike_factor x the running median; non-finite steps are always skipped) or \"rollback\" (skip, and after rollback_after skips in a row go back to the checkpoint before them)"),
      ZT_KEY(train, spike_factor, false, "a loss above this many times the median of the last spike_window steps is a spike (> 1)"),
      ZT_KEY(train, spike_window, false, "applied steps whose losses make the running median"),
      ZT_KEY(train, max_skipped_steps, false, "skipped steps in a row (non-finite or spikes) that end the run (>= 1)"),
      ZT_KEY(train, rollback_after, false, "spike_policy = \"rollback\": skipped steps in a row that roll back to the newest checkpoint before them (>= 1, < max_skipped_steps)"),
      ZT_KEY(train, max_rollbacks, false, "spike_policy = \"rollback\": rollbacks in one launch; the next one ends the run (>= 1)"),
      ZT_KEY(train, recompute, false, "activation recompute: \"none\", \"selective\" (norms, SwiGLU) or \"full\" (whole blocks)"),
      ZT_KEY(optim, lr, false, "peak learning rate"),
      ZT_KEY(optim, min_lr, false, "final learning rate of the decay"),
      ZT_KEY(optim, warmup_steps, false, "linear warmup steps"),
      ZT_KEY(optim, schedule, false, "\"cosine\", \"linear\" or \"constant\""),
      ZT_KEY(optim, weight_decay, false, "decoupled weight decay (not on biases/norms)"),
      ZT_KEY(optim, beta1, false, "AdamW beta1"),
      ZT_KEY(optim, beta2, false, "AdamW beta2"),
      ZT_KEY(optim, eps, false, "AdamW epsilon"),
      ZT_KEY(optim, grad_clip, false, "global gradient-norm clip (0 = off)"),
      ZT_KEY(precision, compute, false, "\"auto\" (bf16 on GPU, fp32 on CPU), \"fp32\", \"bf16\" or \"fp16\""),
      ZT_KEY(precision, loss_scale, false, "fp16 loss scale: 0 = dynamic, > 0 = fixed"),
      ZT_KEY(precision, initial_scale, false, "fp16 dynamic loss scaling: starting scale"),
      ZT_KEY(precision, scale_window, false, "fp16 dynamic loss scaling: clean steps before the scale doubles"),
      ZT_KEY(precision, min_scale, false, "fp16 dynamic loss scaling: overflow at this scale stops the run"),
      ZT_KEY(parallel, tensor, false, "tensor-parallel degree (data-parallel = world / tensor)"),
      ZT_KEY(parallel, zero_stage, false, "ZeRO stage 0-3 over the data-parallel group"),
      ZT_KEY(parallel, bucket_mb, false, "gradient reduce-scatter bucket size in MiB"),
      ZT_KEY(parallel, prefetch, false, "ZeRO-3 layers gathered ahead of use"),
      ZT_KEY(offload, optimizer, false, "\"none\", \"cpu\" or \"nvme\": masters, AdamW moments (and gradient shard) off the device; AdamW on the CPU"),
      ZT_KEY(offload, params, false, "\"none\", \"cpu\" or \"nvme\": ZeRO-3 parameter shards in pinned host memory (cpu) or on the SSD (nvme, with optimizer = \"nvme\"), uploaded per layer"),
      ZT_KEY(offload, nvme_path, false, "directory on a local SSD for optimizer = \"nvme\""),
      ZT_KEY(offload, buffer_mb, false, "nvme: MiB per I/O request"),
      ZT_KEY(offload, io_depth, false, "nvme: I/O requests in flight"),
      ZT_KEY(offload, pinned_limit, false, "pinned host memory per rank (e.g. \"64GB\"; empty = half the host's memory / ranks on it)"),
      ZT_KEY(comm, backend, false, "\"auto\", \"mpi\" or \"nccl\""),
      ZT_KEY(comm, timeout_s, false, "seconds before a stuck collective ends the job"),
      ZT_KEY(comm, flight_entries, false, "collectives each rank keeps for flight_rank_NNNNN.json (0 = off)"),
      ZT_KEY(comm, nccl_algo, false, "NCCL_ALGO for this run (empty = NCCL's choice)"),
      ZT_KEY(comm, nccl_proto, false, "NCCL_PROTO for this run (empty = NCCL's choice)"),
      ZT_KEY(data, train, false, "training shards: a directory with manifest.json (or [[data.sources]])"),
      ZT_KEY(data, val, false, "validation shards (optional; or [[data.sources]] with split = \"val\")"),
      ZT_KEY(data, allow_mixture_change, false, "a resumed run may change [[data.sources]] and [[data.stages]] (new weights apply from the resume step)"),
      ZT_KEY(data, sample_log, false, "write out_dir/samples.rankNNNNN.tsv: each sample's step, global index, source and index in it"),
      ZT_KEY(data, cache_dir, false, "local SSD cache of remote shards"),
      ZT_KEY(data, cache_limit, false, "cache size: bytes or e.g. \"200GB\""),
      ZT_KEY(data, prefetch, false, "blocks of shards downloaded ahead of use"),
      ZT_KEY(data, shuffle_block, false, "shards whose samples are shuffled together"),
      ZT_KEY(data, retries, false, "retries of a failed request (5xx, 429, reset, timeout)"),
      ZT_KEY(data, timeout_s, false, "a request stalled this long is retried"),
      ZT_KEY(data, s3_endpoint, false, "S3-compatible endpoint URL (empty = AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS)"),
      ZT_KEY(data, s3_region, false, "S3 region for request signing (empty = AWS_REGION / AWS_DEFAULT_REGION, else us-east-1)"),
      ZT_KEY(data, s3_path_style, false, "path-style S3 addressing (endpoint/bucket/key)"),
      ZT_SECRET(data, s3_access_key_id, "S3 access key (default: AWS_ACCESS_KEY_ID)"),
      ZT_SECRET(data, s3_secret_access_key, "S3 secret key (default: AWS_SECRET_ACCESS_KEY)"),
      ZT_SECRET(data, s3_session_token, "S3 session token (default: AWS_SESSION_TOKEN)"),
      ZT_KEY(checkpoint, dir, false, "checkpoint directory or s3://bucket/prefix (empty = no checkpoints)"),
      ZT_KEY(checkpoint, local_dir, false, "s3:// dir: local copy and cache (default <run.out_dir>/checkpoints)"),
      ZT_KEY(checkpoint, upload_part_mb, false, "s3:// dir: multipart upload part size in MiB (>= 5)"),
      ZT_KEY(checkpoint, every_steps, false, "steps between checkpoints (0 = at the end and on signals only)"),
      ZT_KEY(checkpoint, every_minutes, false, "minutes between checkpoints (0 = off)"),
      ZT_KEY(checkpoint, keep_last, false, "complete checkpoints kept (0 = all)"),
      ZT_KEY(checkpoint, async, false, "write checkpoints in the background"),
      ZT_KEY(checkpoint, resume, false, "\"auto\" (newest complete checkpoint in dir), a checkpoint path, or empty"),
      ZT_KEY(checkpoint, init_from, false, "checkpoint whose weights start this run (optimizer fresh)"),
      ZT_KEY(checkpoint, exit_after, false, "stop after this many steps of this launch, with a checkpoint (0 = off)"),
      ZT_OPTIONAL(checkpoint, preemption_notice_s, "seconds of notice before a preemption (AWS spot 120, GCP 30): a save's time is estimated at start and checked against it (> 0; unset: no check)"),
  };
  return keys;
}

#undef ZT_KEY
#undef ZT_SECRET

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

}  // namespace zt
