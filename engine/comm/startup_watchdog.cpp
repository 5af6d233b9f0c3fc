// The start-up watchdog (see startup_watchdog.h).
#include "engine/comm/startup_watchdog.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#ifdef ZTRAIN_HAVE_PMIX
#include <pmix.h>
#endif

namespace zt {

namespace {
constexpr const char* kArrivedKey = "ztrain.arrived";
constexpr int kMaxNamed = 16;  // missing ranks asked about (1 s each) before "and maybe more"

[[maybe_unused]] std::string fmt_rank(uint32_t r, const std::string& host, bool first) {
  return std::string(first ? "" : ", ") + "rank " + std::to_string(r) + " (host " + host + ")";
}

#ifdef ZTRAIN_HAVE_PMIX
pmix_proc_t g_me;
uint32_t g_job_size = 0;

bool pmix_arrive() {
  if (PMIx_Init(&g_me, nullptr, 0) != PMIX_SUCCESS) return false;
  pmix_value_t v;
  PMIX_VALUE_LOAD(&v, &g_me.rank, PMIX_UINT32);
  if (PMIx_Put(PMIX_GLOBAL, kArrivedKey, &v) != PMIX_SUCCESS || PMIx_Commit() != PMIX_SUCCESS) return false;
  pmix_proc_t job;
  PMIX_LOAD_PROCID(&job, g_me.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t* size = nullptr;
  if (PMIx_Get(&job, PMIX_JOB_SIZE, nullptr, 0, &size) == PMIX_SUCCESS && size) {
    g_job_size = size->data.uint32;
    PMIX_VALUE_RELEASE(size);
  }
  return g_job_size > 0;
}

// Whether rank r posted its key (within 1 s), and its host from the launcher's map.
bool pmix_has_arrived(uint32_t r, std::string* host) {
  pmix_proc_t p;
  PMIX_LOAD_PROCID(&p, g_me.nspace, r);
  pmix_value_t* v = nullptr;
  if (PMIx_Get(&p, PMIX_HOSTNAME, nullptr, 0, &v) == PMIX_SUCCESS && v && v->type == PMIX_STRING)
    *host = v->data.string;
  if (v) PMIX_VALUE_RELEASE(v);
  v = nullptr;
  pmix_info_t info;
  int wait_s = 1;
  PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &wait_s, PMIX_INT);
  const bool ok = PMIx_Get(&p, kArrivedKey, &info, 1, &v) == PMIX_SUCCESS;
  PMIX_INFO_DESTRUCT(&info);
  if (v) PMIX_VALUE_RELEASE(v);
  return ok;
}
#endif

}  // namespace

StartupWatchdog::StartupWatchdog(double timeout_s) : timeout_s_(timeout_s) {
#ifdef ZTRAIN_HAVE_PMIX
  pmix_ = pmix_arrive();
#endif
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s_), [this] { return done_; })) fire();
  });
}

StartupWatchdog::~StartupWatchdog() {
  {
    std::lock_guard lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
#ifdef ZTRAIN_HAVE_PMIX
  if (pmix_) PMIx_Finalize(nullptr, 0);  // MPI holds its own reference
#endif
}

void StartupWatchdog::fire() {
  std::string missing;
  int named = 0, me = -1, lowest_arrived = -1;
  bool more = false;
#ifdef ZTRAIN_HAVE_PMIX
  if (pmix_) {
    me = int(g_me.rank);
    for (uint32_t r = 0; r < g_job_size; ++r) {
      std::string host = "?";
      if (int(r) == me || pmix_has_arrived(r, &host)) {
        if (lowest_arrived < 0) lowest_arrived = int(r);
        if (lowest_arrived < me) break;  // a lower rank reports
        continue;
      }
      if (named == kMaxNamed) {
        more = true;
        break;
      }
      missing += fmt_rank(r, host, named++ == 0);
    }
  }
#endif
  if (me >= 0 && lowest_arrived >= 0 && lowest_arrived < me) {
    // the reporter asks about every rank: give it that long before this rank ends the job
    std::this_thread::sleep_for(std::chrono::seconds(kMaxNamed + 5));
    std::_Exit(1);
  }
  if (me < 0)
    std::fprintf(stderr,
                 "ztrain: MPI_Init has not returned after %.0f s ([comm] timeout_s): a rank of the job did not "
                 "start or cannot reach this one (no PMIx launcher here to say which); ending the job\n",
                 timeout_s_);
  else if (missing.empty())
    std::fprintf(stderr,
                 "ztrain: rank %d: MPI_Init has not returned after %.0f s ([comm] timeout_s), though every rank "
                 "arrived: the ranks cannot reach each other (firewall, network interface: see [comm] in "
                 "docs/runbooks.md); ending the job\n", me, timeout_s_);
  else
    std::fprintf(stderr,
                 "ztrain: rank %d: MPI_Init has not returned after %.0f s ([comm] timeout_s): %s never arrived%s "
                 "(not started, or stuck before MPI_Init); ending the job\n",
                 me, timeout_s_, missing.c_str(), more ? ", and maybe more" : "");
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace zt
