#!/usr/bin/python3
"""The multi-GPU path on the emulated device: ranks under mpirun, each an emulated GPU, their
collectives over the emulated NCCL (libztrain_nccl_emu.so: NCCL's C API over MPI, run on the
communicator's emulated stream). `ztrain debug dump-state` (the first batch's loss and every
gradient, then 3 AdamW steps) in each layout equals the single-process run of the same spec:
the loss and step losses within 1e-4 relative, each gradient within 1e-4 of its tensor's norm, the
final parameters within 1e-3 (float reassociation between cuBLASLt's and OpenBLAS's sums, and
between the ranks' partial sums).

Layouts: T2 D1; T1 D2 at ZeRO-1 and ZeRO-3; T2 D2 ZeRO-3 on 4 ranks; optimizer and parameter
offload at ZeRO-3 on 2 ranks; bf16 T2 D2 ZeRO-3, against one emulated GPU in bf16 within 2e-2. With [run] deterministic two runs of T1 D2 ZeRO-3 are bit-identical.

A bucket of several units goes as one NCCL group (the emulated NCCL counts groups of several ops).
A checkpoint written by 2 emulated GPUs resumes on 4 CPU ranks, and one of 4 CPU ranks on 2
emulated GPUs: 2 + 2 steps equal the saving layout's 4 steps within 1e-4. SIGKILL and SIGSTOP of one
rank mid-training end the whole job within [comm] timeout_s (the stopped one: the other rank's
collective times out, naming it).

A rank held before its communicator init (the test hook ZTRAIN_FAULT_HOLD_COMM_INIT) ends the
whole job within [comm] timeout_s, with a message naming the init: NCCL's non-blocking init under
the job's timeout, then ncclCommAbort (a blocking init waits for the held rank).

usage: multi_gpu.py --ztrain ZTRAIN --tokenize TOKENIZE --plugin LIBZTRAIN_CUDA_EMU --nccl LIBZTRAIN_NCCL_EMU
"""
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

h5py, np = testlib.require("h5py", "numpy")
failures, expect = testlib.checks(echo=True)
LOSS_TOL, GRAD_TOL, PARAM_TOL = 1e-4, 1e-4, 1e-3
GPT2 = {"n_layer": 2, "n_head": 2, "d_model": 32, "d_ff": 128, "vocab_size": 260, "seq_len": 16}
BF16_TOL = 2e-2  # bf16: the layouts' partial sums round differently
# name, ranks, --set overrides, reference: "fp32" the CPU's single process ("fp32_micro1": with
# micro-batches of one sequence), "bf16" the emulated GPU's
# (bf16 on the CPU rounds other sums: zero-initialized biases then move apart by a whole step of Adam)
LAYOUTS = [
    ("T2_D1", 2, ["parallel.tensor=2"], "fp32"),
    ("T1_D2_zero1", 2, ["parallel.zero_stage=1"], "fp32"),
    ("T1_D2_zero3", 2, ["parallel.zero_stage=3"], "fp32"),
    # hybrid sharding: 2 replicas of 2 GPUs (NCCL inside a replica and across replicas)
    # (micro-batches of one sequence: the first one's loss and gradients against the CPU's likewise)
    ("T1_D4_zero3_R2", 4, ["parallel.zero_stage=3", "parallel.replicate=2", "train.micro_batch=1"], "fp32_micro1"),
    ("T2_D2_zero3", 4, ["parallel.tensor=2", "parallel.zero_stage=3"], "fp32"),
    ("T1_D2_zero3_offload_cpu", 2, ["parallel.zero_stage=3", "offload.optimizer=cpu", "offload.params=cpu"], "fp32"),
    ("T2_D2_zero3_bf16", 4, ["parallel.tensor=2", "parallel.zero_stage=3", "precision.compute=bf16"], "bf16"),
    # sequence parallelism: all-gathers and reduce-scatters over the tensor group's NCCL
    ("T2_D2_zero3_R2_sp", 4, ["parallel.tensor=2", "parallel.zero_stage=3", "parallel.replicate=2",
                              "parallel.sequence_parallel=true"], "fp32"),
    ("T2_D1_sp_bf16", 2, ["parallel.tensor=2", "parallel.sequence_parallel=true", "precision.compute=bf16"], "bf16"),
]


rel = testlib.rel


def main():
    setup = testlib.emulated_gpus(testlib.arg_parser())
    if setup is None:
        return 77
    args, env = setup
    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 5)

        def dump(name, ranks, sets, device):
            out = os.path.join(work, f"{name}_{device}")
            spec = testlib.tiny_spec(out + ".toml", out, data, GPT2,
                                     {"micro_batch": 2, "global_batch": 4, "max_steps": 4, "log_every": 1},
                                     optim={"lr": 3e-3, "warmup_steps": 1}, seed=3, threads=1, device=device,
                                     precision__compute="fp32", comm__backend="nccl" if device == "cuda" else "auto")
            p = testlib.dump_state(args.ztrain, spec, out + ".h5", 3, sets, ranks, env)
            if p.returncode != 0:
                expect(False, f"{name} on {device}: dump-state exit {p.returncode}: {p.stderr[-1500:]}")
                return None
            return h5py.File(out + ".h5", "r")

        refs = {"fp32": dump("single", 1, [], "cpu"), "fp32_micro1": dump("single_micro1", 1, ["train.micro_batch=1"], "cpu"),
                "bf16": dump("single_bf16", 1, ["precision.compute=bf16"], "cuda")}
        for name, ranks, sets, kind in LAYOUTS:
            g, ref = dump(name, ranks, sets, "cuda"), refs[kind]
            if ref is None or g is None:
                continue
            tol = (LOSS_TOL, GRAD_TOL, PARAM_TOL) if kind.startswith("fp32") else (BF16_TOL,) * 3
            loss, steps, grads, finals = testlib.dump_differences(g, ref)
            if kind == "bf16":  # zero-initialized biases with bf16-rounded gradients near zero: Adam moves
                # each element a whole step either way, so the parameters are compared as one vector
                names = sorted(ref["final"])
                finals = {"all parameters": rel(np.concatenate([g["final"][n][()].ravel() for n in names]),
                                                np.concatenate([ref["final"][n][()].ravel() for n in names]))}
            worst_g, worst_p = max(grads, key=grads.get), max(finals, key=finals.get)
            print(f"{name} ({ranks} emulated GPUs, emulated NCCL): loss rel {loss:.1e}, step losses rel {steps:.1e}, "
                  f"worst gradient {grads[worst_g]:.1e} ({worst_g}), worst final parameter {finals[worst_p]:.1e} "
                  f"({worst_p})", flush=True)
            expect(loss <= tol[0] and steps <= tol[0], f"{name}: losses differ ({loss:.2e}, {steps:.2e})")
            expect(grads[worst_g] <= tol[1], f"{name}: gradient {worst_g} differs by {grads[worst_g]:.2e}")
            expect(finals[worst_p] <= tol[2], f"{name}: parameter {worst_p} differs by {finals[worst_p]:.2e}")

        # a bucket of several units goes as one NCCL group (ncclGroupStart/End): the emulated NCCL
        # counts the groups (ZTRAIN_EMU_NCCL_STATS); small buckets give every group several units
        out = os.path.join(work, "grouped")
        spec = testlib.tiny_spec(out + ".toml", out, data, GPT2, {"micro_batch": 2, "global_batch": 4, "max_steps": 1},
                                 device="cuda", precision__compute="fp32", comm__backend="nccl",
                                 parallel__zero_stage=3, parallel__bucket_mb=0.004)
        p = testlib.run(testlib.mpirun(2) + [args.ztrain, "train", spec], check=False, timeout=600,
                        env=dict(env, ZTRAIN_EMU_NCCL_STATS="1"))
        stats = [line for line in p.stderr.splitlines() if line.startswith("ztrain emulated NCCL:")]
        groups = [int(line.split()[5]) for line in stats]
        print(f"ZeRO-3 with 4 KB buckets: {stats[:1]}", flush=True)
        expect(p.returncode == 0 and len(groups) == 2 and min(groups) > 0,
               f"grouped collectives: exit {p.returncode}, {stats}: {p.stderr[-600:]}")

        # [run] deterministic: two runs of one layout hold the same bits
        runs = [dump(f"deterministic{k}", 2, ["parallel.zero_stage=3", "run.deterministic=true"], "cuda") for k in (0, 1)]
        if all(r is not None for r in runs):
            differ = [n for grp in ("grads", "final") for n in runs[0][grp]
                      if not np.array_equal(runs[0][grp][n][()], runs[1][grp][n][()])]
            same_loss = np.array_equal(runs[0]["train"]["loss"][()], runs[1]["train"]["loss"][()])
            print(f"deterministic T1 D2 ZeRO-3, two runs: {len(differ)} tensors differ, losses identical: {same_loss}",
                  flush=True)
            expect(not differ and same_loss, f"deterministic reruns differ: {differ[:5]}")
        # a checkpoint written by 2 emulated GPUs resumes on 4 CPU ranks, and one written by 4 CPU
        # ranks on 2 emulated GPUs: 2 + 2 steps equal 4 steps of the saving layout's run
        def train(name, device, ranks, sets=(), resume=None, ckpt=None):
            out = os.path.join(work, name)
            spec = testlib.tiny_spec(out + ".toml", out, data, GPT2,
                                     {"micro_batch": 1, "global_batch": 4, "max_steps": 4, "log_every": 1},
                                     optim={"lr": 3e-3, "warmup_steps": 1}, seed=3, device=device,
                                     precision__compute="fp32", checkpoint__dir=ckpt or os.path.join(work, "ck_" + name),
                                     comm__backend="nccl" if device == "cuda" else "auto")
            p = testlib.run(testlib.train_cmd(args.ztrain, spec, sets, ranks, resume), check=False, env=env, timeout=900)
            expect(p.returncode == 0, f"{name} ({ranks} x {device}): exit {p.returncode}: {p.stderr[-1000:]}")
            return [r["loss"] for r in testlib.metrics(out, must_exist=False)], p

        for (saver, s_ranks), (resumer, r_ranks) in ((("cuda", 2), ("cpu", 4)), (("cpu", 4), ("cuda", 2))):
            full, _ = train(f"{saver}_full", saver, s_ranks)
            ck = os.path.join(work, f"ck_{saver}_part")
            part, _ = train(f"{saver}_part", saver, s_ranks, ["checkpoint.exit_after=2"], ckpt=ck)
            rest, p = train(f"{resumer}_rest_of_{saver}", resumer, r_ranks, resume="auto", ckpt=ck)
            resumed = "resumed from" in p.stderr
            d = rel(part[:2] + rest[-2:], full) if len(full) == 4 and len(part) >= 2 and len(rest) >= 2 else float("inf")
            print(f"checkpoint of {s_ranks} x {saver} at step 2 resumed on {r_ranks} x {resumer}: 4 losses rel {d:.1e} "
                  f"to the uninterrupted run (resumed: {resumed})", flush=True)
            expect(resumed and d <= LOSS_TOL, f"{saver} -> {resumer}: {full} vs {part} + {rest}")

        # a rank held before its communicator init: the job ends within the timeout, naming the init
        timeout_s, held_s = 5, 120
        out = os.path.join(work, "held")
        spec = testlib.tiny_spec(out + ".toml", out, data, GPT2, {"micro_batch": 2, "global_batch": 4, "max_steps": 2},
                                 device="cuda", precision__compute="fp32", comm__backend="nccl",
                                 comm__timeout_s=timeout_s)
        t0 = time.time()
        p = testlib.run(testlib.mpirun(2) + [args.ztrain, "train", spec], check=False, timeout=held_s + 60,
                        env=dict(env, ZTRAIN_FAULT_HOLD_COMM_INIT=f"1:{held_s}"))
        took = time.time() - t0
        named = "NCCL communicator init on group" in p.stderr and "[comm] timeout_s" in p.stderr
        print(f"rank 1 held {held_s} s before its communicator init: exit {p.returncode} after {took:.1f} s "
              f"(timeout_s {timeout_s}), init named: {named}", flush=True)
        expect(p.returncode != 0 and named and took < timeout_s + 40,
               f"held init: exit {p.returncode} after {took:.1f} s: {p.stderr[-800:]}")
        # SIGKILL and SIGSTOP of one rank in the middle of training: the whole job ends within the
        # timeout (a stopped rank: the other's collective times out, naming it, and aborts the job)
        for sig in (signal.SIGKILL, signal.SIGSTOP):
            out = os.path.join(work, f"sig{int(sig)}")
            spec = testlib.tiny_spec(out + ".toml", out, data, GPT2,
                                     {"micro_batch": 2, "global_batch": 4, "max_steps": 500, "log_every": 1},
                                     device="cuda", precision__compute="fp32", comm__backend="nccl",
                                     comm__timeout_s=timeout_s)
            job = subprocess.Popen(testlib.mpirun(2) + [args.ztrain, "train", spec], env=env, text=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            deadline = time.time() + 300
            while time.time() < deadline and len(testlib.metrics(out, must_exist=False)) < 2 and job.poll() is None:
                time.sleep(0.5)
            ranks = testlib.children(job.pid)
            if len(ranks) != 2 or job.poll() is not None:
                expect(False, f"{sig.name}: no two ranks training (children {ranks}, exit {job.poll()})")
                job.kill()
                job.communicate()
                continue
            os.kill(ranks[-1], sig)
            t0 = time.time()
            try:
                _, err = job.communicate(timeout=timeout_s + 60)
            except subprocess.TimeoutExpired:
                for r in ranks:
                    os.kill(r, signal.SIGKILL)
                job.kill()
                _, err = job.communicate()
                err = "(hung: killed by the test) " + err
            took = time.time() - t0
            named = sig != signal.SIGSTOP or "did not complete within" in err
            print(f"{sig.name} of one rank during training: the job exited {job.returncode} after {took:.1f} s "
                  f"(timeout_s {timeout_s}){', naming the collective' if sig == signal.SIGSTOP and named else ''}",
                  flush=True)
            expect(job.returncode != 0 and named and took < timeout_s + 40,
                   f"{sig.name}: exit {job.returncode} after {took:.1f} s: {err[-800:]}")
    return testlib.report(failures, "multi-GPU layouts on the emulated device over the emulated NCCL equal one "
                                    "process; deterministic reruns identical; a held init ends the job in time")


if __name__ == "__main__":
    sys.exit(main())
