// Preemption signals: SIGTERM (cloud spot notices, `docker stop`), SIGINT (Ctrl-C) and SIGUSR1
// (Slurm's --signal) ask the run to stop at the next step boundary with a checkpoint. A second
// signal (2 s or more after the first: one Ctrl-C or scancel often arrives twice) ends the process
// at once (exit 128 + signal); checkpoints become visible only when complete, so that never
// damages the last one.
#pragma once

namespace zt {

void install_preemption_handlers();
int preemption_signal();  // 0, or the first signal received
const char* signal_name(int sig);

}  // namespace zt
