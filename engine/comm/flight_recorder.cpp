// The flight recorder (see flight_recorder.h).
#include "engine/comm/flight_recorder.h"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "engine/comm/collective_order.h"  // the group and op names
#include "engine/core/status.h"

namespace zt {

namespace {

constexpr int kQuestion = 7101, kAnswer = 7102;  // tags on the recorder's own communicator
constexpr double kAnswerWait_s = 5;              // a rank inside a collective answers in milliseconds
constexpr int kGroupCount = 5;                   // world, tp, dp, shard, replica (CollectiveOrder::kGroups)

double unix_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int group_index(const std::string& name) {
  for (int g = 0; g < kGroupCount; ++g)
    if (name.rfind(CollectiveOrder::kGroups[g], 0) == 0) return g;
  return 0;
}

// One collective: its place in its group's sequence, what it was, and when.
struct Entry {
  int64_t seq = 0, step = 0;
  int group = 0, op = 0;
  uint64_t bytes = 0;
  double start_ms = 0, end_ms = -1;  // unix ms; end: its wait returned (-1: not yet)
};

// A rank's answer: where it is. (All int64, sent as MPI_INT64_T.)
struct Where {
  int64_t step = 0, wait_group = -1, wait_seq = -1, wait_op = -1;
  int64_t issued[kGroupCount] = {};
};
constexpr int kWhereWords = int(sizeof(Where) / sizeof(int64_t));

FlightRecorder* g_recorder = nullptr;
struct sigaction g_prev[32];
std::atomic<int> g_usr2_pipe{-1};  // the handler's write end (read in a signal handler: lock-free)

// SIGUSR2: the recorder's thread writes its file; without a recorder a line says so (write(2):
// async-signal-safe). Either way the run goes on.
void on_usr2(int) {
  const int saved_errno = errno;
  const char d = 'd';
  if (const int fd = g_usr2_pipe.load(); fd >= 0) {
    (void)!::write(fd, &d, 1);
    errno = saved_errno;
    return;
  }
  static const char kOff[] = "ztrain: SIGUSR2: no flight recorder in this run (one process, or [comm] flight_entries "
                             "= 0): nothing written; the run goes on\n";
  (void)!::write(STDERR_FILENO, kOff, sizeof(kOff) - 1);
  errno = saved_errno;
}

}  // namespace

void install_usr2_handler() {
  struct sigaction sa{};
  sa.sa_handler = on_usr2;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, nullptr);
}

class FlightRecorder {
 public:
  FlightRecorder(const Topology& topo, const std::string& out_dir, size_t entries)
      : ring_(std::max<size_t>(entries, 1)), side_owner_(topo.mpi_side),
        side_(*static_cast<MPI_Comm*>(topo.mpi_side.get())), rank_(topo.world_rank), size_(topo.world_size),
        tensor_(std::max(topo.tp, 1)), shard_(std::max(topo.shard_size(), 1)), hosts_(topo.hosts) {
    int level = 0;
    MPI_Query_thread(&level);
    any_thread_ = level == MPI_THREAD_MULTIPLE;
    path_ = fmt::format("{}/flight_rank_{:05d}.json", out_dir, rank_);
    tmp_path_ = path_ + ".tmp";
    json_.resize(4096 + ring_.size() * 200);  // formatted in place: the fatal-signal path allocates nothing
    if (::pipe(usr2_pipe_) == 0) {
      g_usr2_pipe = usr2_pipe_[1];
      dumper_ = std::thread([this] {  // SIGUSR2: write the file whatever the main thread is doing
        char c = 0;
        while (::read(usr2_pipe_[0], &c, 1) == 1 && c == 'd') dump("SIGUSR2");
      });
    }
    install_signal_handlers();
  }
  ~FlightRecorder() {
    if (g_recorder == this) g_recorder = nullptr, set_comm_hooks({});
    g_usr2_pipe = -1;
    if (dumper_.joinable()) {
      const char q = 'q';
      (void)!::write(usr2_pipe_[1], &q, 1);
      dumper_.join();
      ::close(usr2_pipe_[0]);
      ::close(usr2_pipe_[1]);
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      for (auto& [buf, req] : answers_) MPI_Request_free(&req);
  }

  int64_t issue(int group, int op, uint64_t bytes) {
    std::lock_guard lock(mu_);
    const int64_t index = count_++;
    ring_[size_t(index % int64_t(ring_.size()))] = {issued_[group]++, step_, group, op, bytes, unix_ms(), -1};
    return index;
  }
  void begin_wait(int64_t index) {
    std::lock_guard lock(mu_);
    waiting_ = index;
  }
  void end_wait(int64_t index) {
    std::lock_guard lock(mu_);
    waiting_ = -1;
    if (Entry* e = at(index)) e->end_ms = unix_ms();
  }
  void set_step(int64_t step) {
    std::lock_guard lock(mu_);
    step_ = step;
  }

  // Answers every question that has arrived; the first one also writes this rank's file (each
  // surviving rank's file is there once one rank has timed out).
  void serve() {
    if (!on_asking_thread()) return;
    for (;;) {
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, kQuestion, side_, &flag, &st);
      if (!flag) break;
      int64_t from = 0;
      MPI_Recv(&from, 1, MPI_INT64_T, st.MPI_SOURCE, kQuestion, side_, MPI_STATUS_IGNORE);
      if (!asked_) {
        asked_ = true;
        dump(fmt::format("rank {} timed out in a collective and asked where this rank is", from).c_str());
      }
      answers_.emplace_back();
      auto& [buf, req] = answers_.back();
      buf = where();
      MPI_Isend(&buf, kWhereWords, MPI_INT64_T, st.MPI_SOURCE, kAnswer, side_, &req);
    }
    while (!answers_.empty()) {  // sent answers: their buffers can go
      int done = 0;
      MPI_Test(&answers_.front().second, &done, MPI_STATUS_IGNORE);
      if (!done) break;
      answers_.pop_front();
    }
  }

  std::string on_timeout(const std::string& group_name) {
    const int g = group_index(group_name);
    Entry stuck;
    {
      std::lock_guard lock(mu_);
      const Entry* w = at(waiting_);
      if (w && w->group == g) stuck = *w;
      else  // a device communicator's watchdog: the oldest of the group's collectives not waited for
        for (int64_t i = std::max<int64_t>(0, count_ - int64_t(ring_.size())); i < count_; ++i)
          if (const Entry* e = at(i); e->group == g && e->end_ms < 0) {
            stuck = *e;
            break;
          }
    }
    dump("a collective timed out");  // first: this rank may be ended while it asks
    std::vector<Where> where(static_cast<size_t>(size_));
    std::vector<bool> answered(size_t(size_), false);
    answered[size_t(rank_)] = true;
    where[size_t(rank_)] = this->where();
    if (on_asking_thread()) {
      std::vector<MPI_Request> reqs;
      const int64_t me = rank_;
      std::vector<int> from;
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;  // every rank: the chain of waits may lead out of this group
        MPI_Request q, a;
        MPI_Isend(&me, 1, MPI_INT64_T, p, kQuestion, side_, &q);
        MPI_Request_free(&q);
        MPI_Irecv(&where[size_t(p)], kWhereWords, MPI_INT64_T, p, kAnswer, side_, &a);
        reqs.push_back(a), from.push_back(p);
      }
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kAnswerWait_s);
      size_t left = reqs.size();
      while (left > 0 && std::chrono::steady_clock::now() < deadline) {
        for (size_t i = 0; i < reqs.size(); ++i) {
          if (answered[size_t(from[i])]) continue;
          int done = 0;
          MPI_Test(&reqs[i], &done, MPI_STATUS_IGNORE);
          if (done) answered[size_t(from[i])] = true, --left;
        }
        serve();  // the others time out too, and ask this rank
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    const std::string diagnosis = diagnose(g, stuck, where, answered);
    dump("a collective timed out", diagnosis.c_str());
    return diagnosis;
  }

  // Writes out_dir/flight_rank_NNNNN.json (through a temporary file: a reader never sees half).
  // No allocation: the fatal-signal path calls it too.
  void dump(const char* why, const char* diagnosis = "", bool in_signal_handler = false) {
    // A fatal signal may arrive while this thread holds the lock: that path does without it.
    std::unique_lock lock(mu_, std::defer_lock);
    if (in_signal_handler) (void)lock.try_lock();
    else lock.lock();
    char* out = json_.data();
    const size_t cap = json_.size();
    size_t n = 0;
    auto put = [&](const char* f, auto... a) {
      if (n < cap) n += size_t(std::max(0, std::snprintf(out + n, cap - n, f, a...)));
    };
    auto put_str = [&](const char* s) {  // a JSON string: quotes and backslashes escaped
      put("\"");
      for (; *s && n + 2 < cap; ++s) {
        if (*s == '"' || *s == '\\') out[n++] = '\\';
        out[n++] = (unsigned char)*s < 0x20 ? ' ' : *s;
      }
      put("\"");
    };
    put("{\"rank\": %d, \"host\": ", rank_);
    put_str(hosts_[size_t(rank_)].c_str());
    put(", \"world_size\": %d, \"tensor\": %d, \"why\": ", size_, tensor_);
    put_str(why);
    put(", \"diagnosis\": ");
    put_str(diagnosis);
    put(", \"written_unix_ms\": %.3f, \"step\": %lld, \"issued\": {", unix_ms(), (long long)step_ + 1);
    for (int g = 0; g < kGroupCount; ++g) put("%s\"%s\": %lld", g ? ", " : "", CollectiveOrder::kGroups[g], (long long)issued_[g]);
    put("}, \"waiting\": ");
    if (const Entry* w = at(waiting_))
      put("{\"group\": \"%s\", \"seq\": %lld, \"op\": \"%s\"}", CollectiveOrder::kGroups[w->group], (long long)w->seq,
          CollectiveOrder::kOps[w->op]);
    else
      put("null");
    put(", \"entries\": [");
    const int64_t first = std::max<int64_t>(0, count_ - int64_t(ring_.size()));
    for (int64_t i = first; i < count_; ++i) {
      const Entry& e = *at(i);
      put("%s\n  {\"seq\": %lld, \"group\": \"%s\", \"op\": \"%s\", \"bytes\": %llu, \"step\": %lld, "
          "\"start_unix_ms\": %.3f, \"end_unix_ms\": ",
          i > first ? "," : "", (long long)e.seq, CollectiveOrder::kGroups[e.group], CollectiveOrder::kOps[e.op],
          (unsigned long long)e.bytes, (long long)e.step + 1, e.start_ms);
      if (e.end_ms < 0) put("null}");
      else put("%.3f}", e.end_ms);
    }
    put("]}\n");
    const int fd = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    for (size_t off = 0; off < n;) {
      const ssize_t w = ::write(fd, out + off, n - off);
      if (w <= 0) break;
      off += size_t(w);
    }
    ::close(fd);
    ::rename(tmp_path_.c_str(), path_.c_str());
  }

 private:
  Entry* at(int64_t index) {
    if (index < 0 || index >= count_ || index < count_ - int64_t(ring_.size())) return nullptr;
    return &ring_[size_t(index % int64_t(ring_.size()))];
  }
  Where where() {
    std::lock_guard lock(mu_);
    Where w;
    w.step = step_;
    for (int g = 0; g < kGroupCount; ++g) w.issued[g] = issued_[g];
    if (const Entry* e = at(waiting_)) w.wait_group = e->group, w.wait_seq = e->seq, w.wait_op = e->op;
    return w;
  }
  // Whether world ranks a and b share group g (tensor-parallel ranks are consecutive).
  bool same_group(int g, int a, int b) const {
    if (g == 1) return a / tensor_ == b / tensor_;
    if (g == 2) return a % tensor_ == b % tensor_;
    // hybrid sharding: data-parallel ranks a / T in replicas of shard_ consecutive ones
    if (g == 3) return a % tensor_ == b % tensor_ && a / tensor_ / shard_ == b / tensor_ / shard_;
    if (g == 4) return a % tensor_ == b % tensor_ && a / tensor_ % shard_ == b / tensor_ % shard_;
    return true;
  }
  // MPI from this thread: the main thread always; another (a device communicator's watchdog)
  // only when MPI runs with MPI_THREAD_MULTIPLE.
  bool on_asking_thread() const {
    if (any_thread_) return true;
    int main = 0;
    MPI_Is_thread_main(&main);
    return main != 0;
  }
  std::string rank_at(int p) const { return fmt::format("rank {} (host {})", p, hosts_[size_t(p)]); }

  // Follows the chain of waits from this rank: each waiting rank waits for the first rank of its
  // group that has not entered its collective (behind in that group's sequence, or silent: a
  // rank inside a collective answers). The chain ends at the rank the job waits for.
  std::string diagnose(int g, const Entry& stuck, const std::vector<Where>& where,
                       const std::vector<bool>& answered) const {
    std::string s = fmt::format("flight recorder: stuck in {} {} #{} of step {} ({} bytes).",
                                CollectiveOrder::kGroups[g], CollectiveOrder::kOps[stuck.op], stuck.seq,
                                stuck.step + 1, stuck.bytes);
    auto op_of = [](const Where& w) {
      return fmt::format("{} {} #{}", CollectiveOrder::kGroups[w.wait_group], CollectiveOrder::kOps[w.wait_op],
                         w.wait_seq);
    };
    std::vector<std::string> chain;
    std::vector<bool> seen(size_t(size_), false);
    int r = rank_;
    std::vector<Where> w_all = where;  // this rank's wait: the timed-out one (a device watchdog's is no host wait)
    Where& self = w_all[size_t(rank_)];
    self.wait_group = g, self.wait_seq = stuck.seq, self.wait_op = stuck.op;
    const std::vector<Where>& W = w_all;
    auto blocker = [&](int r) {  // the first rank of r's waited group that has not entered it
      const Where& w = W[size_t(r)];
      for (int p = 0; p < size_; ++p)
        if (p != r && same_group(int(w.wait_group), r, p) &&
            (!answered[size_t(p)] || W[size_t(p)].issued[w.wait_group] <= w.wait_seq))
          return p;
      return -1;
    };
    for (;;) {
      seen[size_t(r)] = true;
      const int next = blocker(r);
      if (next < 0) {
        s += fmt::format(" Every rank of {}'s {} group entered {}: a stuck link or device, not a missing rank.",
                         rank_at(r), CollectiveOrder::kGroups[W[size_t(r)].wait_group], op_of(W[size_t(r)]));
        break;
      }
      chain.push_back(fmt::format("rank {} waits in {}, which rank {} has not entered", r, op_of(W[size_t(r)]), next));
      const Where& n = W[size_t(next)];
      if (!answered[size_t(next)]) {
        s += fmt::format(" The job waits for {}: it did not answer within {:.0f} s, so it is in no collective "
                         "(stopped, wedged outside communication, or gone).", rank_at(next), kAnswerWait_s);
        break;
      }
      if (n.wait_group < 0) {
        s += fmt::format(" The job waits for {}: it is in no collective (step {}).", rank_at(next), n.step + 1);
        break;
      }
      if (seen[size_t(next)]) {
        s += " The ranks wait for one another in a cycle: they issued collectives in different orders "
             "(ZTRAIN_CHECK_COLLECTIVE_ORDER=1 names the first difference).";
        break;
      }
      r = next;
    }
    if (!chain.empty()) s += fmt::format(" Chain: {}.", fmt::join(chain, "; "));
    return s + fmt::format(" Every answering rank wrote {}", path_.substr(0, path_.size() - 10) + "NNNNN.json");
  }

  void install_signal_handlers() {
    g_recorder = this;
    set_comm_hooks({flight_poll, flight_on_timeout});
    install_usr2_handler();
    struct sigaction fatal{};
    fatal.sa_sigaction = [](int sig, siginfo_t* info, void*) {
      if (g_recorder)
        g_recorder->dump(sig == SIGSEGV  ? "SIGSEGV"
                         : sig == SIGBUS ? "SIGBUS"
                         : sig == SIGFPE ? "SIGFPE"
                         : sig == SIGILL ? "SIGILL"
                                         : "SIGABRT",
                         "", /*in_signal_handler=*/true);
      if (info->si_code <= 0) {  // sent (kill, abort): end as that signal would have
        ::signal(sig, SIG_DFL);
        ::raise(sig);
        return;
      }
      sigaction(sig, &g_prev[sig], nullptr);  // a fault: it repeats under the previous handler
    };
    sigemptyset(&fatal.sa_mask);
    fatal.sa_flags = SA_SIGINFO | SA_ONSTACK;
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &fatal, &g_prev[sig]);
  }

  std::mutex mu_;
  std::vector<Entry> ring_;
  int64_t count_ = 0;  // collectives recorded; entry i is ring_[i % size] while i >= count_ - size
  int64_t issued_[kGroupCount] = {};
  int64_t waiting_ = -1;  // the entry whose wait is in progress
  int64_t step_ = 0;
  std::shared_ptr<void> side_owner_;  // the topology's duplicate of the world
  MPI_Comm side_;
  int rank_ = 0, size_ = 1, tensor_ = 1, shard_ = 1;
  std::vector<std::string> hosts_;
  bool any_thread_ = false, asked_ = false;
  std::string path_, tmp_path_;
  std::vector<char> json_;
  std::deque<std::pair<Where, MPI_Request>> answers_;
  int usr2_pipe_[2] = {-1, -1};
  std::thread dumper_;
};

namespace {

// Records each collective of `inner` in the recorder: issued, waited for, ended.
class FlightRecordedComm final : public WrappedComm {
 public:
  FlightRecordedComm(std::unique_ptr<Comm> inner, int group, FlightRecorder& rec)
      : WrappedComm(std::move(inner)), group_(group), rec_(rec) {}

  Handle all_reduce(float* buf, size_t n, ReduceOp op) override {
    return issue(0, n * sizeof(float), inner_->all_reduce(buf, n, op));
  }
  Handle reduce_scatter(const float* send, float* recv, size_t n) override {
    return issue(1, n * size_t(size()) * sizeof(float), inner_->reduce_scatter(send, recv, n));
  }
  Handle all_gather(const float* send, float* recv, size_t n) override {
    return issue(2, n * sizeof(float), inner_->all_gather(send, recv, n));
  }
  Handle broadcast(float* buf, size_t n, int root) override {
    return issue(3, n * sizeof(float), inner_->broadcast(buf, n, root));
  }
  void wait(Handle h) override {
    auto it = entries_.find(h);
    const int64_t e = it == entries_.end() ? -1 : it->second;
    if (it != entries_.end()) entries_.erase(it);
    rec_.begin_wait(e);
    inner_->wait(h);
    rec_.end_wait(e);
  }
  void all_reduce_doubles(double* buf, size_t n) override {
    const int64_t e = rec_.issue(group_, 4, n * sizeof(double));
    rec_.begin_wait(e);
    inner_->all_reduce_doubles(buf, n);
    rec_.end_wait(e);
  }
  void barrier() override {
    const int64_t e = rec_.issue(group_, 5, 0);
    rec_.begin_wait(e);
    inner_->barrier();
    rec_.end_wait(e);
  }

 private:
  // Recorded when issued: a collective's launch is where its group's sequence advances.
  Handle issue(int op, size_t bytes, Handle h) {
    entries_[h] = rec_.issue(group_, op, bytes);
    return h;
  }
  int group_;
  FlightRecorder& rec_;
  std::unordered_map<Handle, int64_t> entries_;
};

}  // namespace

FlightRecorder* flight_recorder() { return g_recorder; }

std::shared_ptr<FlightRecorder> make_flight_recorder(const Topology& topo, const std::string& out_dir, size_t entries) {
  return std::make_shared<FlightRecorder>(topo, out_dir, entries);
}

void flight_poll() {
  if (g_recorder) g_recorder->serve();
}

std::string flight_on_timeout(const std::string& group) { return g_recorder ? g_recorder->on_timeout(group) : ""; }

std::unique_ptr<Comm> make_flight_recorded_comm(std::unique_ptr<Comm> inner, const char* group, FlightRecorder& rec) {
  return std::make_unique<FlightRecordedComm>(std::move(inner), group_index(group), rec);
}

void flight_set_step(int64_t step) {
  if (g_recorder) g_recorder->set_step(step);
}

}  // namespace zt
