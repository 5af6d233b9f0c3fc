// Ranks sharing a machine split its cores when they run host work (optimizer offload's AdamW):
// each takes an equal slice, unless the launcher already bound it (mpirun --bind-to, Slurm's
// --cpu-bind), whose choice stands.
#pragma once

namespace zt {

// Binds the calling thread (and the threads it creates later, OpenMP's included) to slice
// `local_rank` of `local_size` equal slices of this process's allowed cores, when the process may
// use every core of the machine and more than one rank shares it; logs the slice. Returns the
// cores the rank may use.
int bind_rank_to_cores(int local_rank, int local_size);

}  // namespace zt
