// The run spec: a TOML file the user edits, turned into a typed struct with every default filled
// in and every value validated. Errors are UserError naming the file, the key and the line.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/run_choices.h"

namespace zt {

// [model] arch when the spec gives none (models/registry.cpp).
const char* default_model_family();

struct RunSpec {
  struct Run {
    std::string name = "run";
    std::string out_dir = "runs/run";
    int64_t seed = 1337;
    DeviceChoice device = DeviceChoice::Auto;  // auto: a GPU when one is visible (see make_backend)
    int64_t threads = 0;          // CPU threads; 0 = all cores
    bool deterministic = false;   // bitwise-reproducible GPU runs (fixed reduction orders)
    bool tensorboard = false;     // metrics also as TensorBoard event files
    std::string tensorboard_dir;  // where (created if missing); empty = out_dir
    double peak_tflops = 0;       // MFU's peak per device; 0 = known GPUs' table / CPU probe
    std::string device_memory_limit;  // the backend never holds more ("40GB"); empty = no limit
    std::string trace_steps;          // "5-7": a Chrome trace of those steps per rank; empty = none
    double telemetry_s = 1;           // seconds between device telemetry rows (0 = none)
    // a rank busy this much above the median rank over a log interval is a straggler (verdict)
    double straggler_threshold = 0.2;
  } run;
  struct Model {
    std::string arch = default_model_family();
    int64_t n_layer = 0, n_head = 0, d_model = 0;
    int64_t d_ff = 0;  // 0 in the file: the family's default, resolved after loading
    int64_t vocab_size = 0, seq_len = 0;
    int64_t vocab_multiple = 128;  // padded internally to a multiple of this x [parallel] tensor
    // Grouped-query attention's key/value heads (0 in the file means n_head), the rotary
    // embedding's base, and whether the output head is the token embedding (the family's
    // default, resolved after loading); which families use them: models/*_family.cpp.
    int64_t n_kv_head = 0;
    // Each attention head's width: 0 in the file means d_model / n_head; a family may allow
    // another (Qwen3: n_head x head_dim differs from d_model). head_size() is the one to read.
    int64_t head_dim = 0;
    int64_t head_size() const { return head_dim > 0 ? head_dim : d_model / n_head; }
    double rope_theta = 10000.0;
    // RoPE frequency scaling: "" none, "llama3" Llama 3.1's rule (engine/backend/rope_scaling.h)
    std::string rope_scaling;
    double rope_scaling_factor = 8.0, rope_scaling_low_freq_factor = 1.0, rope_scaling_high_freq_factor = 4.0;
    int64_t rope_scaling_original_max_positions = 8192;
    // The first rope_scaling_* key whose value is not its default, or null: what means something
    // only with rope_scaling = "llama3" (a resolved spec writes the defaults back, and they pass).
    const char* rope_scaling_parameter_set() const {
      const Model d;
      if (rope_scaling_factor != d.rope_scaling_factor) return "rope_scaling_factor";
      if (rope_scaling_low_freq_factor != d.rope_scaling_low_freq_factor) return "rope_scaling_low_freq_factor";
      if (rope_scaling_high_freq_factor != d.rope_scaling_high_freq_factor) return "rope_scaling_high_freq_factor";
      if (rope_scaling_original_max_positions != d.rope_scaling_original_max_positions)
        return "rope_scaling_original_max_positions";
      return nullptr;
    }
    double norm_eps = 1e-5;  // the family's normalization epsilon (LayerNorm, RMSNorm)
    bool tie_embeddings = true;
    // A Hugging Face model directory (config.json + safetensors) whose weights start a fresh run;
    // the model's shape comes from its config.json.
    std::string init_from;
  } model;
  // Low-rank adapters (LoRA): with rank > 0 the model's weights are frozen (held in the compute
  // precision only: no fp32 master, gradient or AdamW state) and each targeted linear layer W
  // gains B A (A: rank x in, B: out x rank, B zero at the start), its output W x + alpha / rank
  // B A x; only A and B train (engine/model/lora.h).
  struct Lora {
    int64_t rank = 0;       // 0: no adapters, every weight trains
    double alpha = 16;      // the update's scale is alpha / rank
    double dropout = 0;     // on the adapters' input, in training (PEFT's lora_dropout)
    // The linear layers that get adapters, by family-neutral role, comma-separated (or a TOML
    // list): "q", "k", "v", "o", "gate", "up", "down" (GPT-2: "qkv", "o", "up", "down"); "all"; empty:
    // the family's default (PEFT's: Llama-shaped "q,v", GPT-2 "qkv"). Resolved to roles on load.
    std::string targets;
    LoraInit init = LoraInit::Kaiming;  // A's draw: PEFT's kaiming-uniform, or normal(0, 1 / rank)
    // A PEFT adapter directory (adapter_config.json + adapter_model.safetensors) whose adapters
    // start a fresh run (r, lora_alpha and the layers must agree); the base is [model] init_from.
    std::string init_from;
    bool enabled() const { return rank > 0; }
  } lora;
  struct Train {
    int64_t micro_batch = 8;    // sequences per forward/backward
    int64_t global_batch = 8;   // sequences per optimizer step (multiple of micro_batch)
    int64_t max_steps = 100;
    int64_t log_every = 10;
    int64_t eval_every = 0;     // 0 = evaluate only at the end (when [data] val is set)
    int64_t eval_steps = 10;    // micro-batches per evaluation
    int64_t sample_tokens = 0;  // tokens generated after training (0 = none)
    double sample_temperature = 0.8;
    // Activation recompute: "none"; "selective" (the norm outputs, and Llama's SwiGLU output, are
    // recomputed in backward from what is kept); "full" (only each block's input is kept; the
    // block's forward runs again in backward).
    Recompute recompute = Recompute::None;
    // Steps that are skipped (no update): a non-finite loss or gradient norm always (every rank
    // agrees: both are global); with spike_policy = "skip" also a loss above spike_factor x the
    // median of the last spike_window applied steps. max_skipped_steps in a row end the run.
    // "rollback": after rollback_after skipped steps in a row, the weights and optimizer go back to
    // the newest checkpoint before the first of them, and training goes on from the next step's
    // data (the samples since that checkpoint are skipped); at most max_rollbacks per launch.
    SpikePolicy spike_policy = SpikePolicy::Off;
    double spike_factor = 3.0;
    int64_t spike_window = 64;
    int64_t max_skipped_steps = 5;
    int64_t rollback_after = 3;
    int64_t max_rollbacks = 4;
  } train;
  struct Optim {
    double lr = 6e-4, min_lr = 6e-5;
    int64_t warmup_steps = 0;
    LrSchedule schedule = LrSchedule::Cosine;
    double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
    double grad_clip = 1.0;  // global-norm clipping threshold; 0 disables
  } optim;
  struct Precision {
    PrecisionChoice compute = PrecisionChoice::Auto;  // auto: bf16 on GPU, fp32 on CPU
    double loss_scale = 0;         // fp16: 0 = dynamic loss scaling, > 0 = this fixed scale
    double initial_scale = 65536;  // dynamic: the starting scale (2^16)
    int64_t scale_window = 1000;   // dynamic: clean steps before the scale doubles
    double min_scale = 1;          // dynamic: overflow at this scale ends the run
    // FP8 linear layers (engine/backend/fp8_recipe.h): the blocks' matrix products with per-tensor
    // current scaling; "auto" leaves the layers too small to gain in the compute type.
    Fp8Recipe fp8 = Fp8Recipe::None;
    Fp8Layers fp8_layers = Fp8Layers::Auto;
    bool fp8_reference = false;  // the CPU backend runs the recipe's reference (numerics checks)
    bool fp8_all_gather = true;  // ZeRO-3 gathers the FP8 layers' weights as FP8 bytes
  } precision;
  struct Parallel {
    int64_t tensor = 1;       // tensor-parallel degree T; data-parallel D = world / T
    int64_t zero_stage = 0;   // 0: replicate; 1: shard optimizer states; 2: + gradients; 3: + parameters
    double bucket_mb = 25.0;  // gradient reduce-scatter bucket size (MiB)
    int64_t prefetch = 1;     // ZeRO-3: layers whose parameters are gathered ahead of use
    // Hybrid sharding: the data-parallel group as R replicas of D / R consecutive data-parallel
    // ranks; ZeRO shards within a replica, gradients are then all-reduced across replicas.
    int64_t replicate = 1;
    // Megatron sequence parallelism (tensor >= 2): the norms, residual adds and the embedding's
    // sum hold B*T / tensor rows per rank; the tensor group's all-reduces become all-gathers before
    // the column-parallel matmuls and reduce-scatters after the row-parallel ones.
    bool sequence_parallel = false;
  } parallel;
  // ZeRO-Infinity: where the model states live when the device is not enough.
  struct Offload {
    OffloadTier optimizer = OffloadTier::None;  // cpu | nvme: fp32 masters, AdamW moments and the
                                     // gradient shard in pinned host memory (or masters and moments
                                     // in files under nvme_path); AdamW runs on the CPU
    OffloadTier params = OffloadTier::None;     // cpu | nvme: ZeRO-3's compute-precision shards in pinned
                                     // host memory, uploaded per layer ahead of use
    std::string nvme_path;           // directory for the nvme tier (a local SSD)
    double buffer_mb = 64;           // nvme: bytes per I/O request (the streaming block)
    int64_t io_depth = 4;            // nvme: requests in flight (read-ahead and write-behind)
    std::string pinned_limit;        // page-locked host memory per rank (empty: half the host's
                                     // memory, shared by the ranks on it)
  } offload;
  struct Comm {
    CommBackendChoice backend = CommBackendChoice::Auto;
    double timeout_s = 300;        // a collective slower than this ends the job
    int64_t flight_entries = 1000; // the flight recorder's ring: collectives kept per rank (0 = off)
    std::string nccl_algo;         // exported as NCCL_ALGO when set
    std::string nccl_proto;        // exported as NCCL_PROTO when set
  } comm;
  struct Data {
    std::string train;  // directory, file://, http(s):// or s3:// prefix with manifest.json (or sources)
    std::string val;    // optional, same forms
    // [[data.sources]]: the datasets training draws from, mixed by weight (data/mixture.h), and
    // the validation sets (split = "val"). After loading, `train` / `val` given as keys are
    // sources here too (named "train" / "val"), so the trainer reads only this list.
    struct Source {
      std::string name;            // unique; default: the URI's last path component(s)
      std::string uri;             // same forms as train
      std::string split = "train"; // "train" | "val"
      double weight = -1;          // train: the share of samples (relative); -1 = not given
      std::string at;              // "file:line" of its table, for messages
    };
    std::vector<Source> sources;
    // [[data.stages]]: from `step` on, the train sources' weights are `weights` (one per train
    // source, in their order); before the first stage, the sources' own weights.
    struct Stage {
      int64_t step = 0;
      std::vector<std::pair<std::string, double>> by_name;  // as written: source name -> weight
      std::vector<double> weights;                          // resolved: in the train sources' order
      std::string at;
    };
    std::vector<Stage> stages;
    bool allow_mixture_change = false;  // a resumed run may change sources, weights and stages
    bool sample_log = false;            // out_dir/samples.rankNNNNN.tsv: every sample's source and index
    // How a fine-tuning dataset's documents become rows (data/loader.h): none (a token stream),
    // documents (whole documents packed by best-fit decreasing, attending within themselves),
    // padded (one document a row).
    Packing packing = Packing::None;
    std::vector<Source> of_split(const std::string& split) const {
      std::vector<Source> out;
      for (const Source& s : sources)
        if (s.split == split) out.push_back(s);
      return out;
    }
    std::string cache_dir = "/tmp/ztrain-cache";  // local SSD cache of remote shards
    std::string cache_limit = "200GB";            // bytes, or a size such as "200GB"
    int64_t prefetch = 1;                         // blocks of shards downloaded ahead
    int64_t shuffle_block = 4;                    // shards whose windows are shuffled together
    int64_t retries = 8;                          // retries of a failed request
    double timeout_s = 60;                        // a request stalled this long is retried
    std::string s3_endpoint;                      // S3-compatible endpoint URL (default AWS)
    std::string s3_region;  // empty: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1
    bool s3_path_style = false;                   // endpoint/bucket/key addressing
    std::string s3_access_key_id, s3_secret_access_key, s3_session_token;  // default: AWS_* env
  } data;
  struct Checkpoint {
    std::string dir;            // where checkpoints go: a local directory or s3://bucket/prefix; empty: none
    std::string local_dir;      // s3:// dir: the local copy (written first, uploaded, kept as a cache);
                                // empty: <run.out_dir>/checkpoints
    int64_t upload_part_mb = 64;  // s3:// dir: files above this upload in parts of this size
    int64_t every_steps = 0;    // 0: only at the end, on exit_after and on signals
    double every_minutes = 0;   // 0: off (spot instances: a few minutes)
    int64_t keep_last = 3;      // complete checkpoints kept (0 = all)
    bool async = true;          // write in the background while training continues
    std::string resume;         // "" (fresh start), "auto" (newest complete in dir) or a path
    std::string init_from;      // a checkpoint whose weights start this run (optimizer fresh)
    int64_t exit_after = 0;     // stop after this many steps of this launch, with a checkpoint
    // The provider's notice before a preemption (AWS spot 120 s, GCP 30 s); 0 = not given. When
    // given, a save's time is estimated at start and a warning says when it would not fit.
    double preemption_notice_s = 0;
    bool resume_unchecked = false;  // `train --resume-unchecked` (not a spec key): skip the resume check
  } checkpoint;

  std::string source;  // the file the spec came from, for messages
};

class ModelKeyRules;  // engine/config/model_keys.h

// Loads and validates `path`, applying `overrides` ("section.key=value") after the file; [model]
// is resolved and checked by `rules` (the model families': engine/hf/spec_loading.h loads with
// them, and is what callers above the model layers use).
RunSpec load_run_spec(const std::string& path, const std::vector<std::string>& overrides, const ModelKeyRules& rules);

// Same, from TOML text (tests, fuzzing); `source` names it in messages.
RunSpec parse_run_spec(const std::string& toml_text, const std::string& source,
                       const std::vector<std::string>& overrides, const ModelKeyRules& rules);

// The fully resolved spec as TOML, every key present.
std::string resolved_toml(const RunSpec& spec);

// Every key of the run spec as a Markdown reference (docs/spec-reference.md): type, default, help.
std::string spec_reference_markdown();
// The same values as ("[section] key", TOML value) pairs in schema order; secrets are "" (never
// shown). The ranks of a job compare these.
std::vector<std::pair<std::string, std::string>> resolved_entries(const RunSpec& spec);

}  // namespace zt
