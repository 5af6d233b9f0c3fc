// The resume check: every checkpoint holds a few sequences and their loss under the saved
// weights; a resumed run recomputes that loss on its own layout before training and refuses to
// go on when it differs. Checksums catch damaged bytes; this catches weights restored wrongly
// with every byte intact (a tensor transposed or blocks swapped by a resharding bug), which
// otherwise shows only as a jump in the loss (docs/checkpoints.md).
#pragma once
#include <string>

#include "engine/backend/backend.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/comm/comm.h"
#include "engine/model/model.h"

namespace zt {

// The probe of a save: the first rows (at most 4) of the last micro-batch world rank 0 ran (a
// training batch, or an evaluation batch when one ran just before the save), shared with every
// rank, and their loss under the current weights. Every rank calls it (the forward passes are
// collective under tensor parallelism and ZeRO-3).
ResumeProbe capture_probe(Model& model, Comm& world, bool root, const int32_t* inputs, const int32_t* targets, int B,
                          int T, DType compute, const std::string& computed_on);

// The probe's loss under the current weights: each row's mean loss, averaged (one row per
// forward, so any micro_batch can run it). Every rank calls it.
double probe_loss(Model& model, const ResumeProbe& probe);

// How far a recomputed probe loss may be, relatively, from the saved one: 0 (bit-equal) in fp32
// on the same backend and layout when that backend is deterministic (the CPU's, or [run]
// deterministic); else a bound from the precisions of both runs.
double probe_tolerance(const ResumeProbe& probe, const std::string& computed_on, DType compute, bool deterministic);

// Recomputes the probe after a resume. UserError naming the checkpoint and the probe when the
// loss is out of tolerance, unless `unchecked` (--resume-unchecked: a warning). Logs on root.
void check_resume_probe(Model& model, int seq_len, const ResumeProbe& probe, const std::string& computed_on,
                        DType compute, bool deterministic, const std::string& checkpoint, bool unchecked, bool root);

}  // namespace zt
