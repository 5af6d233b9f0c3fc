// The job on a PlanBackend (see planned_job.h).
#include "engine/plan/planned_job.h"

#include "engine/core/status.h"
#include "engine/job/step.h"

namespace zt {

namespace {

// Moves nothing; on a PlanBackend, each collective and each wait goes into its books (the step's
// timeline, priced by step_time.h) with nccl-tests' size: the whole buffer, 4-byte elements.
class ShapeOnlyComm final : public Comm {
 public:
  ShapeOnlyComm(int size, int stride, std::string name, PlanBackend* books)
      : size_(size), stride_(stride), name_(std::move(name)), books_(books) {}
  int size() const override { return size_; }
  int rank() const override { return 0; }
  std::string name() const override { return name_ + "(plan)"; }
  Handle all_reduce(float*, size_t n, ReduceOp) override { return record(CollectiveKind::AllReduce, 4.0 * double(n)); }
  Handle reduce_scatter(const float*, float*, size_t n) override {
    return record(CollectiveKind::ReduceScatter, 4.0 * double(n) * size_);
  }
  Handle all_gather(const float*, float*, size_t n) override {
    return record(CollectiveKind::AllGather, 4.0 * double(n) * size_);
  }
  Handle broadcast(float*, size_t n, int) override { return record(CollectiveKind::Broadcast, 4.0 * double(n)); }
  void wait(Handle h) override {
    if (books_) books_->record_wait(h);
  }
  void all_reduce_doubles(double*, size_t n) override { wait(record(CollectiveKind::AllReduce, 8.0 * double(n))); }
  void barrier() override { wait(record(CollectiveKind::AllReduce, 0)); }

 private:
  Handle record(CollectiveKind kind, double bytes) {
    return books_ ? books_->record_collective(kind, name_, size_, stride_, bytes) : 0;
  }
  int size_, stride_;
  std::string name_;
  PlanBackend* books_;
};

// The counting backend's reads give zeros (the loss's logarithm -inf): the loss is taken as 0.
struct CountedValues final : StepHook {
  void loss_reduced(int64_t, double& loss) override { loss = 0; }
};

}  // namespace

std::unique_ptr<Comm> make_shape_only_comm(int size, const char* name, Backend& be, int stride) {
  if (size == 1) return make_device_self_comm(name, be);
  return std::make_unique<ShapeOnlyComm>(size, stride, name, dynamic_cast<PlanBackend*>(&be));
}

PlannedJob::PlannedJob(const RunSpec& spec, int world, DeviceKind kind) : be_(kind) {
  const int tensor = int(spec.parallel.tensor);
  if (world < 1 || tensor < 1 || world % tensor != 0)
    user_error("[parallel] tensor = {} does not divide the world size {}", tensor, world);
  topo_.world_size = world, topo_.tp = tensor, topo_.dp = world / tensor;
  (void)micro_batches_per_step(spec, topo_);  // before anything is built
  topo_.world = make_shape_only_comm(world, "world", be_);
  topo_.tp_group = make_shape_only_comm(topo_.tp, "tp", be_);
  topo_.dp_group = make_shape_only_comm(topo_.dp, "dp", be_, topo_.tp);  // ranks tensor apart
  const int replicas = int(spec.parallel.replicate);
  if (replicas < 1 || topo_.dp % replicas != 0)
    user_error("[parallel] replicate = {} does not divide the data-parallel degree {}", replicas, topo_.dp);
  topo_.replicas = replicas;
  if (replicas > 1) {  // hybrid sharding: a replica's S ranks, tensor apart; a shard's R, S x tensor apart
    topo_.shard_group = make_shape_only_comm(topo_.shard_size(), "shard", be_, topo_.tp);
    topo_.replica_group = make_shape_only_comm(replicas, "replica", be_, topo_.tp * topo_.shard_size());
  }
  ZeroPlacement placement(spec);
  placement.count_only = true;  // tiers in the books, no files
  job_ = std::make_unique<Job>(spec, topo_, be_, placement);  // not initialized: values do not matter here
}

PlannedJob::~PlannedJob() = default;

void PlannedJob::step() {
  const size_t vocab = size_t(job_->spec.model.vocab_size);
  CountedValues values;
  const StepResult r = train_step(*job_, 0, [&](int64_t, MicroBatch& mb) {
    for (size_t i = 0; i < job_->inputs.size(); ++i) mb.inputs[i] = mb.targets[i] = int32_t(i % vocab);
    mb.positions = nullptr;  // one document a row: attention priced over whole rows, its most
  }, values);
  ZT_CHECK(!r.skipped, "the plan's step skipped its update ({}): the optimizer's memory would be missing",
           r.skip_reason);
}

}  // namespace zt
