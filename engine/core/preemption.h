// Preemption signals: SIGTERM (cloud spot notices, `docker stop`), SIGINT (Ctrl-C) and SIGUSR1
// (Slurm's --signal) ask the run to stop at the next step boundary with a checkpoint. A second
// signal (2 s or more after the first: one Ctrl-C or scancel often arrives twice) ends the process
// at once (exit 128 + signal); checkpoints become visible only when complete, so that never
// damages the last one.
#pragma once

namespace zt {

void install_preemption_handlers();
// A run without checkpoints has nothing to save: SIGTERM, SIGINT and SIGUSR1 end it at once, and
// `report` (rank 0) prints one line naming the signal and the step in progress (set_current_step).
void install_interrupt_report(bool report);
void set_current_step(long step);
int preemption_signal();  // 0, or the first signal received
double seconds_since_preemption_signal();  // since the first signal (-1: none)
const char* signal_name(int sig);

}  // namespace zt
