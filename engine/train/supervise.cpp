// ztrain supervise: rerun a job after a runtime failure (see supervise.h).
#include "engine/train/supervise.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/hf/spec_loading.h"
#include "engine/core/byte_size.h"
#include "engine/core/status.h"

namespace zt {

namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<pid_t> g_child{0};

// A stop for the supervisor is a stop for the job: forwarded to the child's process group (the
// job checkpoints and exits 0), and no rerun follows.
void on_stop_signal(int sig) {
  g_stop_signal = sig;
  if (const pid_t c = g_child.load(); c > 0) ::kill(-c, sig);
}

// SIGUSR2 asks the job for its flight recorder's files and ends nothing: forwarded only.
void on_usr2_signal(int sig) {
  if (const pid_t c = g_child.load(); c > 0) ::kill(-c, sig);
}

struct Options {
  int64_t max_restarts = 3;
  double backoff_s = 10, max_backoff_s = 600;
  std::vector<std::string> command;
};

double parse_seconds(const std::string& text, const char* option, double lo, double hi) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || *end != '\0' || !std::isfinite(v) || v < lo || v > hi)
    user_error("supervise: {} {}: expected seconds in [{:g}, {:g}]", option, text, lo, hi);
  return v;
}

Options parse_options(const std::vector<std::string>& args) {
  Options o;
  size_t i = 0;
  for (; i < args.size() && args[i] != "--"; ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size() || args[i + 1] == "--") user_error("supervise: {} needs a value", a);
      return args[++i];
    };
    if (a == "--max-restarts") o.max_restarts = parse_count(value(), "supervise: --max-restarts", 0, 1000);
    else if (a == "--backoff") o.backoff_s = parse_seconds(value(), "--backoff", 0.01, 3600);
    else if (a == "--max-backoff") o.max_backoff_s = parse_seconds(value(), "--max-backoff", 0.01, 86400);
    else user_error("supervise: unknown option {} (usage: ztrain supervise [--max-restarts N] [--backoff S] "
                    "[--max-backoff S] -- COMMAND...)", a);
  }
  if (i >= args.size() || i + 1 >= args.size())
    user_error("supervise: no command (usage: ztrain supervise [options] -- mpirun ... ztrain train SPEC.toml)");
  o.command.assign(args.begin() + long(i) + 1, args.end());
  if (o.max_backoff_s < o.backoff_s)
    user_error("supervise: --max-backoff {:g} is below --backoff {:g}", o.max_backoff_s, o.backoff_s);
  return o;
}

// The run spec of `ztrain train SPEC [--set k=v ...]` inside the command, when it parses: for
// out_dir (the restart rows) and [checkpoint] (whether a rerun can resume).
bool find_spec(const std::vector<std::string>& cmd, RunSpec* spec, bool* resume_given) {
  *resume_given = false;
  for (size_t i = 0; i + 1 < cmd.size(); ++i) {
    if (cmd[i] != "train") continue;
    std::vector<std::string> sets;
    for (size_t j = i + 2; j < cmd.size(); ++j) {
      if (cmd[j] == "--set" && j + 1 < cmd.size()) sets.push_back(cmd[++j]);
      else if (cmd[j].rfind("--set=", 0) == 0) sets.push_back(cmd[j].substr(6));
      else if (cmd[j] == "--resume" || cmd[j].rfind("--resume=", 0) == 0) *resume_given = true;
    }
    try {
      *spec = load_run_spec(cmd[i + 1], sets);
      return true;
    } catch (const UserError&) {
      return false;  // the job says what is wrong with it (exit 2)
    }
  }
  return false;
}

std::string sig_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) return fmt::format("was killed by {}", sig_name(WTERMSIG(status)));
  return fmt::format("exited with status {}", WEXITSTATUS(status));
}

int exit_code(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

// Starts the command in its own process group (signals reach it only through the supervisor)
// with ZTRAIN_ATTEMPT set; returns its wait status.
int run_attempt(const std::vector<std::string>& cmd, int attempt) {
  std::vector<char*> argv;
  for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);
  // exec's failure comes back through a close-on-exec pipe: a command that cannot be executed
  // (not found, not executable) is bad input, not a failure to rerun
  int exec_errno[2];
  if (::pipe2(exec_errno, O_CLOEXEC) != 0)
    throw RuntimeFailure(fmt::format("supervise: pipe failed: {}", std::strerror(errno)));
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(exec_errno[0]), ::close(exec_errno[1]);
    throw RuntimeFailure(fmt::format("supervise: fork failed: {}", std::strerror(err)));
  }
  if (pid == 0) {
    // a stop forwarded before exec must reach the job, not the supervisor's handler copied here
    for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGUSR2}) ::signal(sig, SIG_DFL);
    ::close(exec_errno[0]);
    ::setpgid(0, 0);
    // not the terminal's foreground group: reading it would stop the job (mpirun forwards stdin)
    if (const int null = ::open("/dev/null", O_RDONLY); null >= 0) ::dup2(null, 0), ::close(null);
    ::setenv("ZTRAIN_ATTEMPT", std::to_string(attempt).c_str(), 1);
    ::execvp(argv[0], argv.data());
    const int err = errno;
    (void)!::write(exec_errno[1], &err, sizeof err);
    std::_Exit(127);
  }
  ::close(exec_errno[1]);
  ::setpgid(pid, pid);  // also here: no race with a signal arriving before the child runs
  g_child = pid;
  if (const int sig = g_stop_signal.load()) ::kill(-pid, sig);  // arrived while it started
  int err = 0;
  ssize_t got = 0;
  while ((got = ::read(exec_errno[0], &err, sizeof err)) < 0 && errno == EINTR) {
  }
  ::close(exec_errno[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw RuntimeFailure(fmt::format("supervise: waitpid failed: {}", std::strerror(errno)));
  g_child = 0;
  if (got == ssize_t(sizeof err))
    user_error("supervise: cannot run '{}': {}{}", cmd[0], std::strerror(err),
               err == ENOENT && cmd[0].find('/') == std::string::npos ? " (not found on PATH)" : "");
  return status;
}

void append_row(const std::string& out_dir, const nlohmann::json& row) {
  if (out_dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  std::ofstream f(std::filesystem::path(out_dir) / "metrics.jsonl", std::ios::app);
  f << row.dump() << "\n";
}

}  // namespace

int supervise_main(const std::vector<std::string>& args) {
  const Options o = parse_options(args);
  RunSpec spec;
  bool resume_given = false;
  const bool have_spec = find_spec(o.command, &spec, &resume_given);
  const std::string out_dir = have_spec ? spec.run.out_dir : "";
  // A rerun continues from the latest complete checkpoint: `--resume auto` unless the command or
  // the spec already says how to resume.
  const bool resumes = have_spec && !spec.checkpoint.dir.empty();
  const bool add_resume = resumes && !resume_given && spec.checkpoint.resume != "auto";
  if (have_spec && spec.checkpoint.dir.empty())
    std::fprintf(stderr, "ztrain supervise: warning: [checkpoint] dir is not set: a rerun starts again from step 0\n");
  for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGUSR2}) {
    struct sigaction sa {};
    sa.sa_handler = sig == SIGUSR2 ? on_usr2_signal : on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = sig == SIGUSR2 ? SA_RESTART : 0;
    ::sigaction(sig, &sa, nullptr);
  }
  double backoff = o.backoff_s;
  int status = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int attempt = 1;; ++attempt) {
    std::vector<std::string> cmd = o.command;
    if (attempt > 1 && add_resume) cmd.insert(cmd.end(), {"--resume", "auto"});
    status = run_attempt(cmd, attempt);
    const int code = exit_code(status);
    const double at_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string how = describe_status(status);
    if (code == 0 || code == 2 || g_stop_signal.load() || attempt > o.max_restarts) {
      const char* why = code == 0              ? "done"
                        : code == 2            ? "bad input: not rerun"
                        : g_stop_signal.load() ? "stopped by a signal to the supervisor: not rerun"
                                               : "no restarts left";
      std::fprintf(stderr, "ztrain supervise: attempt %d %s (%s); %d attempt%s in %.1f s\n", attempt,
                   how.c_str(), why, attempt, attempt == 1 ? "" : "s", at_s);
      return code;
    }
    std::fprintf(stderr, "ztrain supervise: attempt %d %s (a runtime failure); rerunning in %.3g s%s "
                 "(restart %d of at most %lld)\n", attempt, how.c_str(), backoff,
                 resumes ? " from the latest complete checkpoint" : have_spec ? " from step 0 (no [checkpoint] dir)" : "",
                 attempt, (long long)o.max_restarts);
    nlohmann::json row = {{"kind", "restart"}, {"attempt", attempt}, {"exit_status", code},
                          {"ended", how}, {"backoff_s", backoff}, {"time", double(std::time(nullptr))}};
    if (WIFSIGNALED(status)) row["signal"] = sig_name(WTERMSIG(status));
    append_row(out_dir, row);
    // the wait, cut short by a stop signal
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(backoff);
    while (std::chrono::steady_clock::now() < until && !g_stop_signal.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (g_stop_signal.load()) {
      std::fprintf(stderr, "ztrain supervise: stopped by %s while waiting to rerun; %d attempt%s\n",
                   sig_name(g_stop_signal.load()).c_str(), attempt, attempt == 1 ? "" : "s");
      return code;
    }
    backoff = std::min(o.max_backoff_s, backoff * 2);
  }
}

}  // namespace zt
