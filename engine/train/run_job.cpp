// The run's job (see run_job.h).
#include "engine/train/run_job.h"

#include "engine/comm/agreement.h"
#include "engine/core/byte_size.h"
#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/offload/async_io.h"
#include "engine/offload/core_binding.h"
#include "engine/offload/pinned_pool.h"
#include "engine/plan/layout_plan.h"
#include "engine/plan/memory_check.h"

namespace zt {

namespace {

void log_precision(const RunSpec& spec, const Job& job) {
  const LossScaler& scaler = job.scaler;
  spdlog::info("precision: {} compute, fp32 master weights, gradients and optimizer states{}",
               dtype_name(job.backend.compute_dtype()),
               scaler.active() ? fmt::format(", loss scale {} ({})", scaler.scale(),
                                             spec.precision.loss_scale == 0 ? "dynamic" : "fixed")
                               : "");
}

void log_nvme(const RunSpec& spec, const NvmeFile& nvme) {
  spdlog::info("offload: NVMe tier in {} through {}, {} requests of {} MiB in flight", spec.offload.nvme_path,
               AsyncIo::io_uring_available() ? "io_uring" : "a thread per request (no io_uring here)",
               spec.offload.io_depth, spec.offload.buffer_mb);
  if (!nvme.direct())
    spdlog::warn("offload: {} does not support O_DIRECT (tmpfs?): buffered I/O, which the page cache doubles in "
                 "host memory", spec.offload.nvme_path);
}

}  // namespace

void build_run_job(const RunSpec& spec, Topology& topo, RunJob& out) {
  // Offload runs AdamW on the host's cores: ranks sharing a machine (and not bound by the
  // launcher) each take their own slice, so their optimizer threads do not fight.
  if (spec.offload.optimizer != OffloadTier::None) bind_rank_to_cores(topo.local_rank, topo.local_size);
  out.backend = make_backend(spec.run.device, int(spec.run.threads), topo.local_rank);
  Backend& be = *out.backend;
  out.comms = finish_communicators(topo, be, spec.comm.backend, spec.comm.timeout_s,
                                   size_t(std::max<int64_t>(0, spec.comm.flight_entries)), spec.run.out_dir);
  if (spec.comm.backend == CommBackendChoice::Nccl && be.kind() != DeviceKind::CUDA)
    user_error("{}: [comm] backend = \"nccl\" needs GPU buffers, but this run is on the {} backend "
               "(use \"mpi\" or \"auto\")", spec.source, be.name());
  if (!spec.run.device_memory_limit.empty())
    be.set_memory_limit(parse_byte_size(spec.run.device_memory_limit, "[run] device_memory_limit"));
  const PinnedPool pinned = pinned_pool(spec, topo.local_size);
  be.set_pinned_limit(size_t(pinned.limit));
  configure_backend(spec, be);
  // before anything large is allocated: a spec that cannot fit says so with the numbers
  MemoryBudget budget;
  budget.device = be.memory_available();
  budget.sharing = be.kind() == DeviceKind::CPU && spec.run.device_memory_limit.empty() ? topo.local_size : 1;
  budget.pinned = pinned.limit;
  budget.where = !spec.run.device_memory_limit.empty() ? "[run] device_memory_limit"
                 : be.kind() == DeviceKind::CPU ? "this machine" : "the GPU";
  // on a GPU ztrain has a profile of, the same plan also prices the step there (the ranks taken as
  // filling 8-GPU machines of that GPU, as the built-in profiles have them)
  MachineProfile profile;
  const bool priced = be.kind() == DeviceKind::CUDA && machine_profile_for_gpu(be.name(), profile);
  const LayoutPlan plan =
      check_memory_fits(spec, topo.world_size, be.kind(), be.compute_dtype(), budget, priced ? &profile : nullptr);
  if (spec.offload.optimizer == OffloadTier::Nvme)  // room for this rank's files (masters, moments, parameters on NVMe)
    run_agreed(*topo.world, [&] { check_nvme_path(spec.offload.nvme_path, uint64_t(plan.nvme_bytes)); });
  // the offloaded states, the NVMe tier's block buffers and the checkpoint staging within the pinned pool
  run_agreed(*topo.world, [&] { check_pinned_fits(pinned, double(plan.memory.pinned_host), spec); });
  out.job = std::make_unique<Job>(spec, topo, be, ZeroPlacement(spec));
  if (topo.is_root()) log_precision(spec, *out.job);
  if (priced && topo.is_root()) {
    out.predicted_step_ms = plan.time.step_s * 1e3, out.predicted_on = profile.name;
    spdlog::info("plan: a step predicted at {:.3g} ms on the {} profile ({}; calibration {})", out.predicted_step_ms,
                 profile.name, profile.source, default_calibration().source);
  }
  if (const NvmeFile* nvme = out.job->store->nvme(); nvme && topo.local_rank == 0) log_nvme(spec, *nvme);
  out.job->init_params(uint64_t(spec.run.seed));
}

}  // namespace zt
