// Preemption signal handling (see preemption.h).
#include "engine/train/preemption.h"

#include <unistd.h>

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
  g_signal = sig;
}
}  // namespace

void install_preemption_handlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &sa, nullptr);
}

int preemption_signal() { return g_signal; }

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

}  // namespace zt
