#!/usr/bin/python3
"""`ztrain plan` against measurement: for 20 layouts on the CPU backend (ZeRO 0-3, tensor
parallelism, sequence parallelism, fp32/bf16/fp16, async checkpoints, recompute, Llama, optimizer and parameter offload,
the early host AdamW, FP8's reference with and without its weight copies), the planner's predicted peak device bytes on rank 0 must equal, to the
byte, the backend allocator's measured peak of a real 2-step run ("rank 0 peak memory ... (N
bytes)"): the plan builds the trainer's job and runs its step (engine/plan/planned_job.h), so any
byte apart is a bug; with offload, its pinned host and NVMe bytes within 1% of
the memory line's. Also: --json has the documented fields, --search lists only
layouts that fit, best first, and a layout that cannot work is a clear error (exit 2).
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

failures, expect = testlib.checks()

# (ranks, --set overrides)
LAYOUTS = [
    (1, []),
    (1, ["precision.compute=bf16"]),
    (1, ["precision.compute=fp16", "train.micro_batch=8"]),
    (2, ["parallel.zero_stage=1"]),
    (2, ["parallel.zero_stage=2", "precision.compute=bf16"]),
    (2, ["parallel.zero_stage=3"]),
    (2, ["parallel.tensor=2"]),
    (4, ["parallel.tensor=2", "parallel.zero_stage=3", "precision.compute=bf16"]),
    (4, ["parallel.zero_stage=3", "precision.compute=fp16", "checkpoint.dir=CKPT", "checkpoint.every_steps=1"]),
    (1, ["train.recompute=full"]),
    (2, ["train.recompute=selective", "parallel.zero_stage=2", "precision.compute=bf16"]),
    (2, ["model.arch=llama", "model.n_kv_head=2", "parallel.tensor=2"]),
    # sequence parallelism: the norms' rows split, the gathered and partial (B*T, C) buffers
    (2, ["parallel.tensor=2", "parallel.sequence_parallel=true"]),
    (4, ["parallel.tensor=4", "parallel.sequence_parallel=true", "precision.compute=bf16", "train.recompute=selective"]),
    (2, ["model.arch=llama", "model.n_kv_head=2", "parallel.tensor=2", "parallel.sequence_parallel=true",
         "precision.compute=bf16"]),
    (2, ["parallel.zero_stage=1", "offload.optimizer=cpu"]),
    (2, ["parallel.zero_stage=2", "offload.optimizer=cpu", "optim.grad_clip=0"]),  # the early host AdamW
    (2, ["parallel.zero_stage=3", "precision.compute=bf16", "offload.optimizer=nvme", "offload.params=nvme",
         "offload.nvme_path=WORK"]),
    # FP8's CPU reference: the weights' FP8 copies kept at ZeRO-1 (fp8_weight_copies.h), none at ZeRO-3
    (2, ["parallel.zero_stage=1", "precision.compute=bf16", "precision.fp8=tensorwise", "precision.fp8_layers=all",
         "precision.fp8_reference=true"]),
    (2, ["parallel.zero_stage=3", "precision.compute=bf16", "precision.fp8=tensorwise", "precision.fp8_layers=all",
         "precision.fp8_reference=true"]),
]


def main():
    args = testlib.arg_parser().parse_args()
    if testlib.mpirun_missing():
        return testlib.SKIP
    with testlib.workdir("zt_plan_") as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 6)
        spec = testlib.tiny_spec(os.path.join(work, "spec.toml"), os.path.join(work, "run"), data, seed=1,
                                 model={"n_layer": 2, "n_head": 4, "d_model": 128, "vocab_size": 257, "seq_len": 64},
                                 train={"micro_batch": 4, "global_batch": 16, "max_steps": 2, "log_every": 1},
                                 optim={"lr": 1e-3})
        rows = []
        for i, (np_, sets) in enumerate(LAYOUTS):
            sets = [s.replace("CKPT", os.path.join(work, f"ck{i}")).replace("WORK", work) for s in sets]
            argv = [a for s in sets for a in ("--set", s)]
            p = testlib.run([args.ztrain, "plan", spec, "--world", str(np_), "--json", *argv], check=False)
            if p.returncode != 0:
                failures.append(f"plan {np_} {sets}: exit {p.returncode}: {p.stderr[-400:]}")
                continue
            plan = json.loads(p.stdout)
            for key in ("per_rank_bytes", "peak_device_bytes", "tensor", "zero_stage", "compute", "fits"):
                expect(key in plan, f"plan json lacks {key}")
            run = testlib.run(["mpirun", "--oversubscribe", "-np", str(np_), args.ztrain, "train", spec,
                               "--set", f"run.out_dir={os.path.join(work, f'run{i}')}", *argv], check=False)
            m = re.search(r"rank 0 peak memory: .* \((\d+) bytes\)", run.stderr)
            if run.returncode != 0 or not m:
                failures.append(f"run {np_} {sets}: exit {run.returncode}: {run.stderr[-400:]}")
                continue
            measured, predicted = int(m.group(1)), plan["peak_device_bytes"]
            err = (predicted - measured) / measured
            rows.append((np_, " ".join(sets) or "(defaults: fp32, ZeRO-0)", predicted, measured, err))
            expect(predicted == measured,
                   f"{np_} ranks {sets}: predicted {predicted} bytes, measured {measured} ({predicted - measured:+d})")
            off = re.search(r"rank 0 offloaded: .*nvme: params ([\d.]+) MiB, optimizer ([\d.]+) MiB .*pinned total held "
                            r"([\d.]+) MiB", run.stderr)
            if any(s.startswith("offload.") for s in sets):  # the other tiers, to the memory line's 1 KiB
                host = plan["per_rank_bytes"]["host"]["pinned"] / 2 ** 20
                nvme = plan["per_rank_bytes"]["nvme"] / 2 ** 20
                expect(off and abs(float(off.group(3)) - host) <= 0.01 * max(host, 1)
                       and abs(float(off.group(1)) + float(off.group(2)) - nvme) <= 0.01 * max(nvme, 1),
                       f"{sets}: plan pinned {host:.3f} MiB, nvme {nvme:.3f} MiB; measured {off and off.groups()}")
                print(f"  {' '.join(sets)}: pinned host {host:.3f} MiB planned, {off and off.group(3)} held; "
                      f"NVMe {nvme:.3f} MiB planned, {off and float(off.group(1)) + float(off.group(2)):.3f} written")
        print(f"{'ranks':>5}  {'predicted':>10}  {'measured':>10}  {'error':>7}  layout")
        for np_, name, pred, meas, err in rows:
            print(f"{np_:>5}  {pred:>10}  {meas:>10}  {100 * err:>+6.1f}%  {name}")

        # --search: only layouts that fit, the smallest first (no --gpu: ordered by memory)
        p = testlib.run([args.ztrain, "plan", spec, "--world", "4", "--search", "--json", "--device-memory", "3MiB"],
                        check=False)
        found = json.loads(p.stdout) if p.returncode == 0 else []
        peaks = [x["peak_device_bytes"] for x in found]
        expect(found and all(x <= 3 * 2 ** 20 for x in peaks) and peaks == sorted(peaks),
               f"--search: {p.returncode} {peaks} {p.stderr[-300:]}")
        print(f"--search on 4 ranks within 3 MiB: {len(found)} layouts fit, smallest {peaks[:1]} bytes")
        p = testlib.run([args.ztrain, "plan", spec, "--world", "3", "--set", "parallel.tensor=2"], check=False)
        expect(p.returncode == 2 and "does not divide the world size 3" in p.stderr, f"bad layout: {p.stderr}")
    return testlib.report(failures, "the planner's peak equals the measured peak, to the byte, for every layout")


if __name__ == "__main__":
    sys.exit(main())
