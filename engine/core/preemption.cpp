// Preemption signal handling (see preemption.h).
#include "engine/core/preemption.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <csignal>
#include <ctime>
#include <initializer_list>
#include <cstring>

namespace zt {

namespace {
volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_first_s = 0;  // CLOCK_MONOTONIC seconds of the first signal

long now_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return long(ts.tv_sec);
}

std::atomic<int64_t> g_first_ns{0};  // the same, in ns, for the time to a durable checkpoint (lock-free)

extern "C" void on_signal(int sig) {
  // A repeat within 2 s is the same event delivered twice (Ctrl-C reaches the whole process group
  // and mpirun forwards it; Slurm signals the ranks and mpirun): not a second request.
  if (g_signal != 0 && now_s() - long(g_first_s) < 2) return;
  if (g_signal != 0) {  // the second one: stop now (only async-signal-safe calls here)
    const char msg[] = "ztrain: second signal: exiting at once (the last complete checkpoint is intact)\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(128 + sig);
  }
  g_first_s = std::sig_atomic_t(now_s());
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  g_first_ns.store(int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec);
  g_signal = sig;
}

void install(void (*handler)(int)) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &sa, nullptr);
}

std::atomic<long> g_step{0};  // lock-free: read in the handler
volatile std::sig_atomic_t g_report = 0;

extern "C" void on_interrupt(int sig) {
  if (g_report) {  // only async-signal-safe calls: the line is put together by hand
    char line[160];
    size_t n = 0;
    const auto put = [&](const char* s) {
      while (*s && n < sizeof line) line[n++] = *s++;
    };
    put("\nztrain: interrupted by ");
    put(sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGUSR1");
    put(" during step ");
    char digits[24];
    int k = 0;
    for (long v = g_step.load() + 1; k == 0 || v > 0; v /= 10) digits[k++] = char('0' + v % 10);
    while (k > 0 && n < sizeof line) line[n++] = digits[--k];
    put(" (no [checkpoint] dir: nothing saved; metrics.jsonl holds the logged steps)\n");
    (void)!::write(STDERR_FILENO, line, n);
  }
  ::_exit(128 + sig);
}
}  // namespace

void install_preemption_handlers() { install(on_signal); }

void install_interrupt_report(bool report) {
  g_report = report ? 1 : 0;
  install(on_interrupt);
}

void set_current_step(long step) { g_step.store(step); }

int preemption_signal() { return g_signal; }

double seconds_since_preemption_signal() {
  if (g_signal == 0) return -1;
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec - g_first_ns.load()) / 1e9;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

}  // namespace zt
