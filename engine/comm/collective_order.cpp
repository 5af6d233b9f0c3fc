// CollectiveOrder and the recording communicator (see collective_order.h).
#include "engine/comm/collective_order.h"

#include <unordered_map>

#include "engine/core/faults.h"
#include "engine/core/status.h"

namespace zt {

CollectiveOrder::CollectiveOrder(Comm& world, int world_rank) : world_(world), world_rank_(world_rank) {}

void CollectiveOrder::begin_step(int64_t step) { step_ = step; }

void CollectiveOrder::record(const Entry& e) {
  entries_.push_back(e);
  for (uint64_t v : {uint64_t(e.group), uint64_t(e.op), e.bytes})
    for (int b = 0; b < 8; ++b) hash_ = (hash_ ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
}

std::string CollectiveOrder::describe(const Entry& e) const {
  return fmt::format("{} {} of {} bytes", kGroups[e.group], kOps[e.op], e.bytes);
}

void CollectiveOrder::end_step() {
  if (held.launch) {  // a held collective nobody waited for: issued now, and counted in this step
    auto launch = std::move(held.launch);
    held.launch = nullptr;
    launch();
  }
  // Every rank's (hash, count) in its own slots of one sum: 32-bit halves are exact in doubles.
  const int P = world_.size(), me = world_.rank();
  std::vector<double> slots(size_t(3 * P), 0.0);
  slots[size_t(3 * me)] = double(hash_ & 0xffffffffu);
  slots[size_t(3 * me + 1)] = double(hash_ >> 32);
  slots[size_t(3 * me + 2)] = double(entries_.size());
  world_.all_reduce_doubles(slots.data(), slots.size());
  bool same = true;
  for (int r = 1; r < P; ++r)
    for (int k = 0; k < 3; ++k) same = same && slots[size_t(3 * r + k)] == slots[size_t(k)];
  const std::vector<Entry> mine = std::move(entries_);
  entries_.clear();
  hash_ = 1469598103934665603ull;
  if (same) return;
  // Rank 0's sequence to every rank (only it contributes to the sums), then each rank's first
  // difference from it; every rank then names the earliest one.
  std::vector<double> n0(1, me == 0 ? double(mine.size()) : 0.0);
  world_.all_reduce_doubles(n0.data(), 1);
  std::vector<double> seq(size_t(3 * n0[0]), 0.0);
  if (me == 0)
    for (size_t i = 0; i < mine.size(); ++i)
      seq[3 * i] = mine[i].group, seq[3 * i + 1] = mine[i].op, seq[3 * i + 2] = double(mine[i].bytes);
  if (!seq.empty()) world_.all_reduce_doubles(seq.data(), seq.size());
  std::vector<Entry> first(static_cast<size_t>(n0[0]));
  for (size_t i = 0; i < first.size(); ++i)
    first[i] = {int(seq[3 * i]), int(seq[3 * i + 1]), uint64_t(seq[3 * i + 2])};
  size_t at = 0;
  while (at < mine.size() && at < first.size() && mine[at].group == first[at].group && mine[at].op == first[at].op &&
         mine[at].bytes == first[at].bytes)
    ++at;
  const bool differs = at < mine.size() || at < first.size();
  std::vector<double> diff(size_t(P), 0.0);  // each rank's first differing index + 1 (0: none)
  diff[size_t(me)] = differs ? double(at + 1) : 0.0;
  world_.all_reduce_doubles(diff.data(), diff.size());
  int worst = -1;
  for (int r = 0; r < P; ++r)
    if (diff[size_t(r)] > 0 && (worst < 0 || diff[size_t(r)] < diff[size_t(worst)])) worst = r;
  const size_t k = worst < 0 ? 0 : size_t(diff[size_t(worst)] - 1);
  auto entry_at = [](const std::vector<Entry>& v, size_t i, const CollectiveOrder& o) {
    return i < v.size() ? o.describe(v[i]) : std::string("nothing more");
  };
  if (worst == me)
    throw RuntimeFailure(fmt::format(
        "collective order differs between ranks in step {}: this rank's collective #{} was {} where rank 0 "
        "issued {} (every rank must issue the same sequence of tensor- and data-parallel collectives: "
        "docs/parallelism.md, \"Collective order\")",
        step_ + 1, k + 1, entry_at(mine, k, *this), entry_at(first, k, *this)));
  throw RuntimeFailure(fmt::format("collective order differs between ranks in step {}: rank {} differs from rank "
                                   "0 first at collective #{}",
                                   step_ + 1, worst, k + 1));
}

namespace {

int group_index(const char* group) {
  for (int i = 0; i < int(std::size(CollectiveOrder::kGroups)); ++i)
    if (std::string(CollectiveOrder::kGroups[i]) == group) return i;
  return 0;
}

class OrderCheckedComm final : public WrappedComm {
 public:
  OrderCheckedComm(std::unique_ptr<Comm> inner, const char* group, std::shared_ptr<CollectiveOrder> order)
      : WrappedComm(std::move(inner)), group_(group_index(group)), order_(std::move(order)) {}

  Handle all_reduce(float* buf, size_t n, ReduceOp op) override {
    return issue(0, n * sizeof(float), [=, this] { return inner_->all_reduce(buf, n, op); });
  }
  Handle reduce_scatter(const float* send, float* recv, size_t n) override {
    return issue(1, n * size_t(size()) * sizeof(float), [=, this] { return inner_->reduce_scatter(send, recv, n); });
  }
  Handle all_gather(const float* send, float* recv, size_t n) override {
    return issue(2, n * sizeof(float), [=, this] { return inner_->all_gather(send, recv, n); });
  }
  Handle broadcast(float* buf, size_t n, int root) override {
    return issue(3, n * sizeof(float), [=, this] { return inner_->broadcast(buf, n, root); });
  }
  void wait(Handle h) override {
    if (!inner_handles_.count(h)) release_held();  // waiting for the held collective: issue it now
    auto it = inner_handles_.find(h);
    ZT_CHECK(it != inner_handles_.end(), "wait on unknown handle {}", h);
    const Handle inner = it->second;
    inner_handles_.erase(it);
    inner_->wait(inner);
  }
  // A group is held as a whole (ZeRO's gathers go in groups): its launches are collected and
  // issued, between their own group_begin/end, after the next collective of another group.
  void group_begin() override {
    release_held();
    if (depth_++ > 0) {
      if (!collecting_) inner_->group_begin();
      return;
    }
    collecting_ = armed();
    if (!collecting_) inner_->group_begin();
  }
  void group_end() override {
    if (--depth_ > 0) {
      if (!collecting_) inner_->group_end();
      return;
    }
    if (!collecting_) return inner_->group_end();
    collecting_ = false;
    auto& held = order_->held;
    held.launch = [this, launches = std::move(collected_)] {
      inner_->group_begin();
      for (const auto& launch : launches) launch();
      inner_->group_end();
    };
    held.by = this;
    collected_.clear();
  }
  void all_reduce_doubles(double* buf, size_t n) override {
    release_held();
    order_->record({group_, 4, n * sizeof(double)});
    inner_->all_reduce_doubles(buf, n);
  }
  void barrier() override {
    release_held();
    order_->record({group_, 5, 0});
    inner_->barrier();
  }

 private:
  Handle issue(int op, size_t bytes, std::function<Handle()> go) {
    const Handle h = next_++;
    auto launch = [this, h, op, bytes, go = std::move(go)] {
      order_->record({group_, op, bytes});
      inner_handles_[h] = go();
    };
    if (collecting_) {  // inside a held group
      collected_.push_back(std::move(launch));
      return h;
    }
    CollectiveOrder::Held& held = order_->held;
    if (held.launch) {
      if (held.by != this && depth_ == 0) {  // the swap: this one first, then the held one
        launch();
        release_held();
        held.done = true;
        return h;
      }
      release_held();
    }
    if (depth_ == 0 && armed()) {
      held.launch = std::move(launch), held.by = this;
      return h;
    }
    launch();
    return h;
  }
  bool armed() const {
    return !order_->held.done && faults().swap_collectives.hits(order_->world_rank(), order_->step());
  }
  void release_held() {
    CollectiveOrder::Held& held = order_->held;
    if (!held.launch) return;
    auto launch = std::move(held.launch);
    held.launch = nullptr;
    launch();
  }

  int group_;
  std::shared_ptr<CollectiveOrder> order_;
  Handle next_ = 1;
  std::unordered_map<Handle, Handle> inner_handles_;
  int depth_ = 0;
  bool collecting_ = false;                    // the open group is held (the swap)
  std::vector<std::function<void()>> collected_;  // its launches
};

}  // namespace

std::unique_ptr<Comm> make_order_checked_comm(std::unique_ptr<Comm> inner, const char* group,
                                              std::shared_ptr<CollectiveOrder> order) {
  return std::make_unique<OrderCheckedComm>(std::move(inner), group, std::move(order));
}

}  // namespace zt
