// The job's model and states (see job.h).
#include "engine/job/job.h"

#include "engine/core/status.h"
#include "engine/model/registry.h"
#include "engine/observe/throughput.h"

namespace zt {

double model_flops_per_token(const RunSpec::Model& m, const RunSpec::Lora& l) {
  const ModelFamily& f = model_family(m.arch);
  return flops_per_token(m, f.matmul_params(m), f.lora_params(m, l));
}

int64_t micro_batches_per_step(const RunSpec& spec, const Topology& topo) {
  const auto& t = spec.train;
  if (t.global_batch % (t.micro_batch * topo.dp) != 0)
    user_error("{}: [train] global_batch = {} is not a multiple of micro_batch * data-parallel degree = {} * {} "
               "(world {} / tensor {})", spec.source, t.global_batch, t.micro_batch, topo.dp, topo.world_size, topo.tp);
  return t.global_batch / topo.dp / t.micro_batch;
}

namespace {
// [precision] fp8 where the backend runs it: FP8 tensor cores, 16-bit outputs; on the CPU only as
// the recipe's reference when asked for (it computes the numerics, slower than without).
void check_fp8(const RunSpec& spec, const Backend& backend, DType compute) {
  const RunSpec::Precision& p = spec.precision;
  if (p.fp8_reference && (p.fp8 == Fp8Recipe::None || backend.kind() != DeviceKind::CPU))
    user_error("{}: [precision] fp8_reference = true runs fp8's recipe as the CPU backend's reference: {}", spec.source,
               p.fp8 == Fp8Recipe::None ? "it needs fp8 = \"tensorwise\""
                                        : "on a GPU fp8 runs on the FP8 tensor cores; remove it");
  if (p.fp8 == Fp8Recipe::None) return;
  const std::string key = fmt::format("{}: [precision] fp8 = \"{}\"", spec.source, choice_name(p.fp8));
  if (const int64_t rows = spec.train.micro_batch * spec.model.seq_len; rows % 16 != 0)
    user_error("{} needs [train] micro_batch x [model] seq_len in multiples of 16 (the FP8 products' rows), not {} x "
               "{} = {}", key, spec.train.micro_batch, spec.model.seq_len, rows);
  if (backend.kind() == DeviceKind::CPU) {
    if (!p.fp8_reference)
      user_error("{} needs a GPU with FP8 tensor cores (compute capability 8.9 or newer: L4, L40S, H100, H200); the "
                 "CPU backend has none ([precision] fp8_reference = true runs the recipe's CPU reference: its "
                 "numerics, no speed-up)", key);
    return;
  }
  if (compute != DType::BF16 && compute != DType::F16)
    user_error("{} needs [precision] compute = \"bf16\" or \"fp16\" (the FP8 products write 16-bit outputs), not "
               "\"{}\"", key, dtype_name(compute));
  for (const char* op : {"fp8_weight_copy", "matmul_forward_fp8", "matmul_backward_fp8"})
    if (const std::string why = backend.supports({op, compute}); !why.empty()) user_error("{}: {}", key, why);
}
}  // namespace

void configure_backend(const RunSpec& spec, Backend& backend) {
  const DType compute = compute_dtype_of(spec.precision.compute, backend.kind());
  backend.set_compute_dtype(compute);
  backend.set_deterministic(spec.run.deterministic);  // the CUDA attention backward's scratch depends on it
  if (const std::string op = unsupported_op(backend, spec.model, compute); !op.empty())
    user_error("{}: the {} backend cannot run this model in {}: {}", spec.source,
               backend.kind() == DeviceKind::CUDA ? "CUDA" : "CPU", dtype_name(compute), op);
  check_fp8(spec, backend, compute);
}

namespace {
std::unique_ptr<Model> build_model(const RunSpec& spec, Topology& topo, Backend& backend, std::unique_ptr<Model> given) {
  configure_backend(spec, backend);
  std::unique_ptr<Model> m = given ? std::move(given)
                                   : make_model(spec.model, backend, int(spec.train.micro_batch), topo.tp_group.get(),
                                                spec.train.recompute, spec.parallel.sequence_parallel, spec.lora);
  if (spec.precision.fp8 != Fp8Recipe::None) m->set_fp8(spec.precision.fp8_layers);
  return m;
}
}  // namespace

Job::Job(const RunSpec& spec_in, Topology& topo_in, Backend& backend_in, const ZeroPlacement& placement,
         std::unique_ptr<Model> given)
    : spec(spec_in),
      topo(topo_in),
      backend(backend_in),
      micro_batches(micro_batches_per_step(spec, topo)),
      model(build_model(spec, topo, backend, std::move(given))),
      // the FP8 products' weights to the store of the model's own table (LoRA: the frozen base)
      base(model->adapter_table()
               ? std::make_unique<ParamStore>(model->table(), backend, topo, placement, true, model->fp8_weights())
               : nullptr),
      store(std::make_unique<ParamStore>(store_table(*model), backend, topo, placement, false,
                                         base ? std::vector<Fp8WeightRange>{} : model->fp8_weights())),
      optimizer(std::make_unique<AdamW>(spec.optim, store->optimizer_backend())),
      early(*store),
      scaler(spec.precision, backend.compute_dtype()),
      skips(spec.train),
      inputs(size_t(spec.train.micro_batch * spec.model.seq_len)),
      targets(inputs.size()) {
  model->set_provider(base ? base.get() : store.get());
  model->set_adapter_provider(store.get());
}

// An early host AdamW still queued (a step that failed mid-backward) uses the optimizer and the
// store: it is waited for before either goes.
Job::~Job() { early.cancel(); }

void Job::init_params(uint64_t seed) {
  if (base) base->init(seed);
  store->init(seed);
}

}  // namespace zt
