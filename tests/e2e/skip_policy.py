#!/usr/bin/python3
"""Skipped steps: non-finite values in any precision, loss spikes, and the agreement of every rank.
- mpirun -np 2: a NaN in rank 1's gradients at step 10 (ZTRAIN_FAULT_NAN_GRAD, after the gradient
  reduction, so only that replica sees it) is skipped by both ranks: the losses equal those of a
  run whose step 10 every rank skipped for a loss spike (ZTRAIN_FAULT_LOSS_SPIKE with spike_policy
  = "skip"). Without the per-step agreement rank 0 would apply the step and the losses would
  differ. In fp32 and bf16, and with ZeRO-1.
- the skipped step is a {"kind":"skip"} row with its global samples by source, and a warning;
- spike_policy = "rollback": three spikes in a row go back to the checkpoint before them, and the
  losses after it equal a run's that skipped every step since that checkpoint; with no checkpoint
  before the skips the run ends (exit 1);
- spike_policy = "off": the spike is trained on; max_skipped_steps = 1: the first skip ends the
  run (exit 1, "diverged"); bad keys exit 2 naming them.
Skips (exit 77) without mpirun.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testlib  # noqa: E402


def main():
    with testlib.mpi_test("zt_skip_", 8000, 5) as (args, failures, expect, work, data):

        def run(name, np_=2, fault=None, sets=()):
            spec = testlib.tiny_spec(os.path.join(work, name + ".toml"), os.path.join(work, "run_" + name), data,
                                     model=testlib.TINY_MODEL, train={"micro_batch": 2, "global_batch": 8,
                                                                      "max_steps": 16, "log_every": 1},
                                     optim={"lr": 3e-3}, seed=3)
            env = testlib.mpi_env(**(fault or {}))
            extra = [a for k in (fault or {}) for a in ("-x", k)] if np_ > 1 else []
            cmd = [*testlib.mpirun(np_), *extra, args.ztrain, "train", spec, *[a for s in sets for a in ("--set", s)]]
            p = testlib.run(cmd, check=False, env=env, timeout=600)
            return p, {r["step"]: r["loss"] for r in testlib.metrics(os.path.join(work, "run_" + name),
                                                                     must_exist=False)}

        for tag, sets in [("fp32", []), ("bf16", ["precision.compute=bf16"]), ("zero1", ["parallel.zero_stage=1"])]:
            pol = ["train.spike_policy=skip", *sets]
            p1, spiked = run(f"spike_{tag}", fault={"ZTRAIN_FAULT_LOSS_SPIKE": "9:1000"}, sets=pol)
            p2, nan = run(f"nan_{tag}", fault={"ZTRAIN_FAULT_NAN_GRAD": "1:9"}, sets=pol)
            expect(p1.returncode == 0 and p2.returncode == 0,
                   f"{tag}: exit {p1.returncode} / {p2.returncode}: {p1.stderr[-400:]} {p2.stderr[-400:]}")
            rows = testlib.metrics(os.path.join(work, f"run_nan_{tag}"), "skip", must_exist=False)
            expect(len(rows) == 1 and rows[0]["step"] == 10 and rows[0]["samples"] == {"first": 72, "count": 8}
                   and rows[0]["by_source"] == {"train": list(range(72, 80))} and "gradient norm is nan" in rows[0]["why"],
                   f"{tag}: skip rows {rows}")
            same = {k: v for k, v in nan.items() if k != 10} == {k: v for k, v in spiked.items() if k != 10}
            expect(same and len(nan) == 16, f"{tag}: a NaN in one replica's gradients was not skipped by every rank "
                                            f"alike: {sorted(nan.items())[9:12]} vs {sorted(spiked.items())[9:12]}")
            expect("step 10 skipped: the gradient norm is nan" in p2.stderr, f"{tag}: no warning: {p2.stderr[-400:]}")
            print(f"{tag}: NaN in rank 1's gradients at step 10: skipped by both ranks, losses equal a run that skipped "
                  f"step 10 everywhere: {same}")

        # spike_policy = "rollback" (T1 D2 ZeRO-3, checkpoints every 2 steps): loss spikes at steps
        # 10-12 (1-based) roll back, at the third, to the checkpoint of step 8 (the one of step 10,
        # saved during the skips, holds the same weights and is set aside); training goes on at
        # step 13. The weights, AdamW's count and the schedule are then those of a run that skipped
        # steps 9-12: from step 13 its losses must equal that run's bit for bit.
        ck = ["parallel.zero_stage=3", "checkpoint.every_steps=2"]
        p1, rolled = run("rollback", fault={"ZTRAIN_FAULT_LOSS_SPIKE": "9:1000:3"},
                         sets=["train.spike_policy=rollback", "train.rollback_after=3", *ck,
                               f"checkpoint.dir={work}/ck_rollback"])
        p2, skipped = run("skip4", fault={"ZTRAIN_FAULT_LOSS_SPIKE": "8:1000:4"},
                          sets=["train.spike_policy=skip", "train.max_skipped_steps=6", *ck,
                                f"checkpoint.dir={work}/ck_skip4"])
        expect(p1.returncode == 0 and p2.returncode == 0,
               f"rollback: exit {p1.returncode} / {p2.returncode}: {p1.stderr[-600:]} {p2.stderr[-400:]}")
        rows = testlib.metrics(os.path.join(work, "run_rollback"), "rollback", must_exist=False)
        expect(rows == [{"kind": "rollback", "step": 12, "to_step": 8, "samples": {"first": 64, "count": 32}}],
               f"rollback rows: {rows}")
        expect("rolled back to" in p1.stderr and "training goes on at step 13" in p1.stderr,
               f"rollback: no warning: {p1.stderr[-600:]}")
        # the save of step 10 (during the skips) holds the history rolled back: set aside
        aside = [d for d in os.listdir(os.path.join(work, "ck_rollback")) if d.startswith("step_00000010.superseded")]
        expect(len(aside) == 1, f"rollback: the save of step 10 was not set aside: "
                                f"{sorted(os.listdir(os.path.join(work, 'ck_rollback')))}")
        after = {k: rolled.get(k) for k in range(13, 17)}
        expect(len(rolled) == 16 and after == {k: skipped.get(k) for k in range(13, 17)},
               f"rollback: losses after it {after} differ from the run that skipped steps 9-12 "
               f"{[skipped.get(k) for k in range(13, 17)]}")
        print(f"rollback at step 12 to step 8: the losses of steps 13-16 equal those of a run that skipped steps "
              f"9-12: {after == {k: skipped.get(k) for k in range(13, 17)}}")
        # no checkpoint before the skips (the first is at step 4, the skips start at step 3): exit 1
        p, _ = run("rollback_none", fault={"ZTRAIN_FAULT_LOSS_SPIKE": "12:1000:3"},
                   sets=["train.spike_policy=rollback", "train.spike_window=4", *ck,
                         "checkpoint.every_steps=16", f"checkpoint.dir={work}/ck_none"])
        expect(p.returncode == 1 and "no checkpoint written before step 13" in p.stderr,
               f"rollback without a checkpoint: exit {p.returncode}: {p.stderr[-500:]}")
        # spike_policy off: trained on (the spiked loss is logged as it was)
        p, off = run("spike_off", fault={"ZTRAIN_FAULT_LOSS_SPIKE": "9:1000"})
        expect(p.returncode == 0 and off.get(10, 0) > 1000 and not testlib.metrics(
            os.path.join(work, "run_spike_off"), "skip", must_exist=False), f"spike_policy off: {p.stderr[-400:]}")
        # max_skipped_steps = 1: the first skip ends the run
        p, _ = run("diverge", fault={"ZTRAIN_FAULT_NAN_GRAD": "1:3"}, sets=["train.max_skipped_steps=1"])
        expect(p.returncode == 1 and "training has diverged" in p.stderr and "max_skipped_steps = 1" in p.stderr,
               f"max_skipped_steps = 1: exit {p.returncode}: {p.stderr[-500:]}")
        for bad, key in [("train.spike_factor=1", "spike_factor"), ("train.max_skipped_steps=0", "max_skipped_steps"),
                         ("train.spike_policy=sometimes", "spike_policy"), ("train.spike_window=0", "spike_window"),
                         ("train.spike_policy=rollback", "spike_policy"),  # without checkpoints
                         ("train.rollback_after=0", "rollback_after"), ("train.max_rollbacks=0", "max_rollbacks")]:
            p, _ = run("bad", np_=1, sets=[bad])
            expect(p.returncode == 2 and f"[train] {key}" in p.stderr, f"{bad}: exit {p.returncode}: {p.stderr[-300:]}")
        print("spike_policy off: trained on; max_skipped_steps = 1: exit 1 at the first skip; bad keys: exit 2")
    return testlib.report(failures, "skipped steps: agreed by every rank, logged with their samples")


if __name__ == "__main__":
    sys.exit(main())
