// The start-up watchdog (see startup_watchdog.h).
#include "engine/comm/startup_watchdog.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#ifdef ZTRAIN_HAVE_PMIX
#include <pmix.h>
#endif

namespace zt {

namespace {
constexpr const char* kArrivedKey = "ztrain.arrived";
constexpr const char* kReportedKey = "ztrain.startup_reported";  // the reporter printed its line
constexpr int kMaxNamed = 16;  // missing ranks asked about (1 s each) before "and maybe more"

[[maybe_unused]] std::string fmt_rank(uint32_t r, const std::string& host, bool first) {
  return std::string(first ? "" : ", ") + "rank " + std::to_string(r) + " (host " + host + ")";
}

#ifdef ZTRAIN_HAVE_PMIX
pmix_proc_t g_me;
uint32_t g_job_size = 0;

bool pmix_post(const char* key) {
  pmix_value_t v;
  PMIX_VALUE_LOAD(&v, &g_me.rank, PMIX_UINT32);
  return PMIx_Put(PMIX_GLOBAL, key, &v) == PMIX_SUCCESS && PMIx_Commit() == PMIX_SUCCESS;
}

// Waits (at most wait_s) for rank r to post `key`; whether it did.
bool pmix_wait_for(uint32_t r, const char* key, int wait_s) {
  pmix_proc_t p;
  PMIX_LOAD_PROCID(&p, g_me.nspace, r);
  pmix_info_t info;
  PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &wait_s, PMIX_INT);
  pmix_value_t* v = nullptr;
  const bool ok = PMIx_Get(&p, key, &info, 1, &v) == PMIX_SUCCESS;
  PMIX_INFO_DESTRUCT(&info);
  if (v) PMIX_VALUE_RELEASE(v);
  return ok;
}

bool pmix_arrive() {
  if (PMIx_Init(&g_me, nullptr, 0) != PMIX_SUCCESS) return false;
  if (!pmix_post(kArrivedKey)) return false;
  pmix_proc_t job;
  PMIX_LOAD_PROCID(&job, g_me.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t* size = nullptr;
  if (PMIx_Get(&job, PMIX_JOB_SIZE, nullptr, 0, &size) == PMIX_SUCCESS && size) {
    g_job_size = size->data.uint32;
    PMIX_VALUE_RELEASE(size);
  }
  return g_job_size > 0;
}

// Rank r's host, from the launcher's map ("?" when it does not say).
std::string pmix_host_of(uint32_t r) {
  pmix_proc_t p;
  PMIX_LOAD_PROCID(&p, g_me.nspace, r);
  pmix_value_t* v = nullptr;
  std::string host = "?";
  if (PMIx_Get(&p, PMIX_HOSTNAME, nullptr, 0, &v) == PMIX_SUCCESS && v && v->type == PMIX_STRING) host = v->data.string;
  if (v) PMIX_VALUE_RELEASE(v);
  return host;
}
#endif

}  // namespace

StartupWatchdog::StartupWatchdog(double timeout_s) : timeout_s_(timeout_s) {
#ifdef ZTRAIN_HAVE_PMIX
  pmix_ = pmix_arrive();
#endif
  deadline_ = std::make_unique<Deadline>(timeout_s_, [this] { fire(); });
}

StartupWatchdog::~StartupWatchdog() {
  deadline_.reset();  // disarmed
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
      if (int(r) == me || pmix_wait_for(r, kArrivedKey, 1)) {
        if (lowest_arrived < 0) lowest_arrived = int(r);
        if (lowest_arrived < me) break;  // a lower rank reports
        continue;
      }
      if (named == kMaxNamed) {
        more = true;
        break;
      }
      missing += fmt_rank(r, pmix_host_of(r), named++ == 0);
    }
  }
#endif
  if (me >= 0 && lowest_arrived >= 0 && lowest_arrived < me) {
    // A lower rank reports: this one ends the job only once that report is out (its timer may
    // have started later, and its questions take a while), or after a minute without it.
#ifdef ZTRAIN_HAVE_PMIX
    (void)pmix_wait_for(uint32_t(lowest_arrived), kReportedKey, 60);
#endif
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
#ifdef ZTRAIN_HAVE_PMIX
  if (pmix_) pmix_post(kReportedKey);  // the others may end the job now
#endif
  std::_Exit(1);
}

}  // namespace zt
