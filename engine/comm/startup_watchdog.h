// The start-up watchdog. MPI_Init waits, with no timeout, for every rank of the job: a rank that
// never gets there (a node whose container did not start, a process stuck before main) holds
// the others inside MPI_Init forever, with nothing printed. The watchdog is armed before MPI_Init
// and disarmed when it returns. At the timeout it names the ranks that did not arrive and ends
// this rank (exit 1), so that mpirun ends the job.
//
// Naming them: with a PMIx launcher (Open MPI's mpirun, Slurm's srun --mpi=pmix), each rank
// posts a key before MPI_Init; a rank whose key the launcher cannot supply within 1 s has not
// arrived, and the launcher's map gives its host. The lowest rank that did arrive prints the
// list and posts a second key; the others end once it is posted (or after a minute without it),
// silently, so the report is never cut off and the job still ends if the reporter cannot.
#pragma once
#include <memory>

#include "engine/comm/deadline.h"

namespace zt {

class StartupWatchdog {
 public:
  explicit StartupWatchdog(double timeout_s);
  ~StartupWatchdog();  // disarms it (MPI_Init returned)

 private:
  void fire();  // the timeout: report and _Exit(1)
  double timeout_s_;
  bool pmix_ = false;  // this rank posted its key
  std::unique_ptr<Deadline> deadline_;  // after pmix_: its thread may read it
};

}  // namespace zt
