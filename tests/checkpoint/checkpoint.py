#!/usr/bin/python3
"""Checkpoints, end to end on the CPU backend under mpirun:
- exact resume: 4 steps, stop ([checkpoint] exit_after), resume, 4 more gives the uninterrupted
  8-step run's losses and grad norms bit for bit, and the same final parameters and AdamW moments,
  in fp32 (ZeRO 0-3, tensor parallelism, both), bf16 and fp16 (loss scaler mid-window), for GPT-2
  and for Llama (key/value heads split and replicated across tensor-parallel ranks);
  metrics.jsonl then holds every step once;
- resharding: a checkpoint written by 4 ranks (T=2 D=2 ZeRO-3) resumes in 1 process, one written
  by 4 ranks (D=4 ZeRO-2) on 2 ranks with ZeRO-1, one written by 1 process on 4 ranks (T=2 D=2):
  the continued losses equal the uninterrupted run's within 1e-5 relative; another model shape
  exits 2 naming the first mismatched tensor;
- crash safety: kill -9 of a rank while it writes its part of a checkpoint (a test hook pauses it
  there) leaves that checkpoint incomplete and invisible: the job resumes from the previous one
  and still ends with the uninterrupted run's losses;
- checksums: a flipped byte in a rank file makes `ztrain ckpt verify` and an explicit resume exit 2
  naming the file and tensor; resume = "auto" warns and falls back to the previous checkpoint;
- preemption: SIGTERM to one rank of a 2-rank job stops both at the next step boundary with a
  checkpoint and exit 0, and the resumed run continues with the uninterrupted losses; a second
  signal exits at once and the last complete checkpoint still verifies;
- the checkpoint opened with h5py holds every tensor whole, equal to dump-state's parameters;
  every_minutes saves by the clock; keep_last prunes; init_from starts a new run from its weights;
  `ztrain ckpt ls` lists steps and layouts.
"""
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

h5py, np = testlib.require("h5py", "numpy", hint="install python3-h5py")
failures, expect = testlib.checks(echo=True)
ENV = testlib.mpi_env()


def records(out_dir, kind="train"):
    return testlib.metrics(out_dir, kind, must_exist=False)


def main():
    args = testlib.arg_parser().parse_args()
    if testlib.mpirun_missing():
        return testlib.SKIP
    with testlib.workdir("zt_ckpt_") as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 9)
        spec = testlib.tiny_spec(os.path.join(work, "spec.toml"), os.path.join(work, "run"), data, seed=11,
                                 model=testlib.TINY_MODEL,
                                 train={"micro_batch": 2, "global_batch": 8, "max_steps": 8, "log_every": 1},
                                 optim={"lr": 4e-3, "warmup_steps": 2})

        def train(name, np_=1, sets=(), resume=None, env=None, check=True):
            out = os.path.join(work, name)
            argv = testlib.train_cmd(args.ztrain, spec, [f"run.out_dir={out}", f"checkpoint.dir={out}/ckpt", *sets],
                                     np_, resume)
            p = testlib.run(argv, check=False, env=dict(ENV, **(env or {})), timeout=300)
            if check and p.returncode != 0:
                expect(False, f"{name}: exit {p.returncode}: {p.stderr[-1500:]}")
            return p, out

        def final_states(out, step=8):
            path = os.path.join(out, "ckpt", f"step_{step:08d}", "checkpoint.h5")
            if not os.path.exists(path):
                return None
            with h5py.File(path, "r") as f:
                return {f"{g}/{k}": f[g][k][()] for g in ("params", "adam_m", "adam_v") for k in f[g]}

        # ---- exact resume per precision, ZeRO stage and tensor parallelism
        cases = [("fp32", 1, 1, 0), ("fp32", 1, 2, 1), ("fp32", 1, 2, 2), ("fp32", 1, 2, 3), ("fp32", 2, 1, 0),
                 ("fp32", 2, 2, 3), ("bf16", 1, 1, 0), ("bf16", 1, 2, 3), ("bf16", 2, 1, 0),
                 ("fp16", 1, 1, 0), ("fp16", 1, 2, 2),
                 # Llama, 2 key/value heads: split over tensor 2, replicated over tensor 4
                 ("fp32", 4, 1, 0, "llama"), ("bf16", 2, 2, 3, "llama")]
        llama = ["model.arch=llama", "model.n_kv_head=2", "model.d_ff=40"]
        reference = None
        for prec, t, d, z, *arch in cases:
            sets = [f"precision.compute={prec}", f"parallel.tensor={t}", f"parallel.zero_stage={z}",
                    "precision.scale_window=3"]  # fp16: the scale doubles at steps 3 and 6, so step 4 is mid-window
            sets += llama if arch else []
            tag = f"{prec}_T{t}_D{d}_Z{z}" + (f"_{arch[0]}" if arch else "")
            _, full = train(f"full_{tag}", t * d, sets)
            _, part = train(f"part_{tag}", t * d, sets + ["checkpoint.exit_after=4"])
            p, _ = train(f"part_{tag}", t * d, sets, resume="auto")
            a, b = records(full), records(part)
            same = [(x["step"], x["loss"], x["grad_norm"], x.get("loss_scale")) for x in a] == \
                   [(x["step"], x["loss"], x["grad_norm"], x.get("loss_scale")) for x in b]
            sa, sb = final_states(full), final_states(part)
            states_same = sa is not None and sb is not None and sa.keys() == sb.keys() and \
                all(np.array_equal(sa[k], sb[k]) for k in sa)
            print(f"{tag}: 4 + resume + 4 steps vs 8: losses, grad norms{', loss scale' if prec == 'fp16' else ''} "
                  f"identical {same}; parameters and moments identical {states_same}")
            expect(len(a) == 8 and same, f"{tag}: resumed run differs: {[(x['step'], x['loss']) for x in b]} vs "
                                         f"{[(x['step'], x['loss']) for x in a]}")
            expect(states_same, f"{tag}: final parameters / moments differ after resuming")
            expect("resumed from" in p.stderr and "at step 4" in p.stderr, f"{tag}: no resume line: {p.stderr[-600:]}")
            if prec == "fp32" and (t, d, z) == (1, 1, 0):
                reference = a

        # ---- resharding: write with one layout, continue with another
        ref_losses = [x["loss"] for x in reference] if reference else []
        for name, (np_w, sets_w), (np_r, sets_r) in [
                ("T2D2Z3_to_1", (4, ["parallel.tensor=2", "parallel.zero_stage=3"]), (1, [])),
                ("D4Z2_to_D2Z1", (4, ["parallel.zero_stage=2"]), (2, ["parallel.zero_stage=1"])),
                ("1_to_T2D2", (1, []), (4, ["parallel.tensor=2"])),
                # hybrid sharding: the first replica writes the shards; any layout reads them
                ("D4Z3R2_to_D2Z3", (4, ["parallel.zero_stage=3", "parallel.replicate=2"]), (2, ["parallel.zero_stage=3"])),
                ("T2D2Z2R2_to_1", (4, ["parallel.tensor=2", "parallel.zero_stage=2", "parallel.replicate=2"]), (1, [])),
                ("D2Z1_to_D4Z2R2", (2, ["parallel.zero_stage=1"]), (4, ["parallel.zero_stage=2", "parallel.replicate=2"]))]:
            _, written = train(f"reshard_{name}", np_w, sets_w + ["checkpoint.exit_after=4"])
            if "R2" in name.split("_to_")[0]:  # each element written once: by the first replica's ranks
                held = []
                for r in range(np_w):
                    with h5py.File(os.path.join(written, "ckpt", "step_00000004", f"rank_{r:05d}.h5"), "r") as f:
                        n = [0]
                        f.visititems(lambda _, o: n.__setitem__(0, n[0] + o.size) if isinstance(o, h5py.Dataset) else None)
                        held.append(n[0])
                expect(held[0] > 0 and held[1] > 0 and held[2:] == [0, 0],
                       f"{name}: elements in each rank's file {held}: the second replica wrote too")
                print(f"{name}: elements written by each rank {held} (the second replica's ranks write none)")
            t0 = time.time()
            p, out = train(f"reshard_{name}", np_r, sets_r, resume="auto")
            losses = [x["loss"] for x in records(out)]
            worst = max((abs(x - y) / y for x, y in zip(losses, ref_losses)), default=float("inf"))
            print(f"resharding {name}: continued losses vs uninterrupted worst rel diff {worst:.1e} "
                  f"(resume run {time.time() - t0:.1f} s)")
            expect(len(losses) == 8 and worst <= 1e-5, f"reshard {name}: losses {losses} vs {ref_losses}")
        p, _ = train("reshard_T2D2Z3_to_1", 1, ["model.d_model=32"], resume="auto", check=False)
        expect(p.returncode == 2 and re.search(r"tensor \S+ has shape \(\d+, 24\), this model's is \(\d+, 32\)", p.stderr),
               f"another model shape: exit {p.returncode}: {p.stderr[-500:]}")
        print(f"another model shape: exit {p.returncode}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}")

        # ---- kill -9 of a rank in the middle of a save
        crash = os.path.join(work, "crash")
        crash_sets = [f"run.out_dir={crash}", f"checkpoint.dir={crash}/ckpt", "checkpoint.every_steps=2",
                      "parallel.zero_stage=3"]
        proc = subprocess.Popen(testlib.train_cmd(args.ztrain, spec, crash_sets, 2),
                                env=dict(ENV, ZTRAIN_TEST_PAUSE_SAVE="1:4"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        killed = None
        err_lines = []
        for line in proc.stderr:
            err_lines.append(line)
            m = re.search(r"rank 1 \(pid (\d+)\) pauses in the middle of saving step 4", line)
            if m:
                killed = int(m.group(1))
                os.kill(killed, signal.SIGKILL)
                break
        out_rest, err_rest = proc.communicate(timeout=120)
        expect(killed is not None and proc.returncode != 0,
               f"kill -9 during a save: pid {killed}, job exit {proc.returncode}: {''.join(err_lines)[-800:]}{err_rest[-800:]}")
        ls = testlib.run([args.ztrain, "ckpt", "ls", f"{crash}/ckpt"], check=False)
        print("after kill -9 of rank 1 while it saved step 4:\n" + ls.stdout)
        expect(re.search(r"^2\s+complete, latest", ls.stdout, re.M) and re.search(r"^4\s+incomplete", ls.stdout, re.M),
               f"ckpt ls after the crash: {ls.stdout}")
        p = testlib.run(testlib.train_cmd(args.ztrain, spec, crash_sets, 2, "auto"), check=False, env=ENV, timeout=300)
        losses = [x["loss"] for x in records(crash)]
        expect(p.returncode == 0 and "at step 2" in p.stderr, f"resume after the crash: exit {p.returncode}: {p.stderr[-800:]}")
        expect(losses == ref_losses, f"after the crash: losses {losses} vs {ref_losses}")
        print(f"resumed from step 2 after the crash: losses identical to the uninterrupted run: {losses == ref_losses}")

        # ---- corrupted checkpoint: detection, explicit resume exits 2, auto falls back
        src = os.path.join(work, "full_fp32_T1_D1_Z0")
        corrupt = os.path.join(work, "corrupt")
        train("corrupt", 1, ["checkpoint.every_steps=4", "checkpoint.keep_last=0"])  # steps 4 and 8
        victim = os.path.join(corrupt, "ckpt", "step_00000008", "rank_00000.h5")
        with h5py.File(victim, "r") as f:
            off = f["params/transformer.h.1.mlp.c_fc.weight/0"].id.get_offset()
        with open(victim, "r+b") as f:
            f.seek(off + 40)
            b = f.read(1)
            f.seek(off + 40)
            f.write(bytes([b[0] ^ 0x10]))
        p = testlib.run([args.ztrain, "ckpt", "verify", os.path.join(corrupt, "ckpt", "step_00000008")], check=False)
        expect(p.returncode == 2 and "rank_00000.h5" in p.stderr and "transformer.h.1.mlp.c_fc.weight" in p.stderr,
               f"ckpt verify of a flipped byte: exit {p.returncode}: {p.stderr}")
        print(f"ckpt verify, one flipped bit: exit {p.returncode}: {p.stderr.strip()}")
        p, _ = train("corrupt", 1, ["train.max_steps=10"], resume=os.path.join(corrupt, "ckpt", "step_00000008"), check=False)
        expect(p.returncode == 2 and "transformer.h.1.mlp.c_fc.weight" in p.stderr,
               f"explicit resume of a damaged checkpoint: exit {p.returncode}: {p.stderr[-500:]}")
        p, _ = train("corrupt", 1, ["train.max_steps=10"], resume="auto", check=False)
        expect(p.returncode == 0 and "is damaged" in p.stderr and "at step 4" in p.stderr,
               f"auto resume past a damaged checkpoint: exit {p.returncode}: {p.stderr[-800:]}")
        print(f"resume = auto with step 8 damaged: exit {p.returncode}, "
              f"{'warned and resumed from step 4' if 'at step 4' in p.stderr else 'did not fall back'}")
        # a new history from step 4: the damaged step 8 is set aside, not mistaken for this run's
        entries = sorted(os.listdir(os.path.join(corrupt, "ckpt")))
        latest = open(os.path.join(corrupt, "ckpt", "latest")).read().strip()
        print(f"  after it: {entries}")
        expect(latest == "step_00000010" and "step_00000008" not in entries
               and any(e.startswith("step_00000008.superseded-") for e in entries),
               f"after resuming from step 4: latest {latest}, {entries}")

        # ---- SIGTERM to one rank: checkpoint at the next step boundary, exit 0, exact resume
        long_sets = ["train.max_steps=600"]
        sig = os.path.join(work, "sigterm")
        sig_sets = [f"run.out_dir={sig}", f"checkpoint.dir={sig}/ckpt", "parallel.zero_stage=1", *long_sets]
        proc = subprocess.Popen(testlib.train_cmd(args.ztrain, spec, sig_sets, 2), env=ENV, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        out_lines = []
        t_sig = None
        for line in proc.stdout:
            out_lines.append(line)
            if line.startswith("step 20/"):
                ranks = testlib.children(proc.pid)
                if ranks:
                    t_sig = time.time()
                    os.kill(ranks[-1], signal.SIGTERM)
                break
        rest, err = proc.communicate(timeout=120)
        t_exit = time.time()
        out_text = "".join(out_lines) + rest
        m = re.search(r"stopped by SIGTERM after step (\d+): checkpoint (\S+) written", out_text) or \
            re.search(r"stopped by a signal to another rank after step (\d+): checkpoint (\S+) written", out_text)
        expect(t_sig is not None and proc.returncode == 0 and m, f"SIGTERM: exit {proc.returncode}: {out_text[-600:]} {err[-800:]}")
        if m and t_sig:
            stopped = int(m.group(1))
            print(f"SIGTERM to rank 1 of 2 (tiny model): exit {proc.returncode} {t_exit - t_sig:.2f} s later, "
                  f"checkpoint of step {stopped}")
            p = testlib.run(testlib.train_cmd(args.ztrain, spec, sig_sets, 2, "auto"), check=False, env=ENV,
                            timeout=300)
            resumed = records(sig)
            ref_sets = [f"run.out_dir={work}/sig_ref", "parallel.zero_stage=1", *long_sets]
            ref_p = testlib.run(testlib.train_cmd(args.ztrain, spec, ref_sets, 2), check=False, env=ENV, timeout=300)
            ref = records(f"{work}/sig_ref")
            same = [(r["step"], r["loss"], r["grad_norm"]) for r in resumed] == \
                   [(r["step"], r["loss"], r["grad_norm"]) for r in ref]
            print(f"resumed after SIGTERM: {len(resumed)} metrics rows (each step once: "
                  f"{[r['step'] for r in resumed] == list(range(1, 601))}), identical to the uninterrupted run: {same}")
            expect(p.returncode == 0 and ref_p.returncode == 0 and len(resumed) == 600 and same,
                   f"resume after SIGTERM: exit {p.returncode}, {len(resumed)} rows, identical {same}")

        # ---- a second signal exits at once; the last complete checkpoint is intact. The save of
        # step 150 is held (test hook) so that the first SIGTERM's checkpoint waits for it; the
        # second SIGTERM must end the process there.
        two = os.path.join(work, "twice")
        argv = testlib.train_cmd(args.ztrain, spec, [f"run.out_dir={two}", f"checkpoint.dir={two}/ckpt",
                                                     "checkpoint.every_steps=50", "train.max_steps=100000"])
        proc = subprocess.Popen(argv, env=dict(ENV, ZTRAIN_TEST_PAUSE_SAVE="0:150"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        for line in proc.stdout:
            if line.startswith("step 160/"):
                proc.send_signal(signal.SIGTERM)
                time.sleep(2.5)  # a repeat within 2 s counts as the same signal delivered twice
                proc.send_signal(signal.SIGTERM)
                break
        rest, err = proc.communicate(timeout=120)
        latest = open(os.path.join(two, "ckpt", "latest")).read().strip() if os.path.exists(os.path.join(two, "ckpt", "latest")) else ""
        v = testlib.run([args.ztrain, "ckpt", "verify", os.path.join(two, "ckpt", latest)], check=False)
        print(f"two SIGTERMs during a held save: exit {proc.returncode}; latest {latest} verifies: {v.returncode == 0}")
        expect(proc.returncode == 128 + signal.SIGTERM and "second signal" in err and latest == "step_00000100"
               and v.returncode == 0,
               f"second signal: exit {proc.returncode}, latest '{latest}', verify {v.returncode}: {err[-400:]}")

        # ---- h5py: every tensor whole, equal to dump-state's parameters after the same 8 steps
        dump = os.path.join(work, "dump.h5")
        testlib.run([args.ztrain, "debug", "dump-state", spec, "--out", dump, "--steps", "8"], env=ENV)
        with h5py.File(dump, "r") as d, h5py.File(os.path.join(src, "ckpt", "step_00000008", "checkpoint.h5"), "r") as c:
            names = sorted(d["final"].keys())
            equal = sorted(c["params"].keys()) == names and all(
                np.array_equal(d["final"][n][()], c["params"][n][()]) for n in names)
            t2 = os.path.join(work, "full_fp32_T2_D2_Z3", "ckpt", "step_00000008", "checkpoint.h5")
            with h5py.File(t2, "r") as c2:
                shapes = all(c2["params"][n].shape == d["final"][n].shape for n in names)
        print(f"h5py: checkpoint /params equal to dump-state's /final for all {len(names)} tensors: {equal}; "
              f"the T=2 D=2 ZeRO-3 checkpoint shows full shapes: {shapes}")
        expect(equal and shapes, "checkpoint tensors differ from dump-state's or are not full-shaped")

        # ---- every_minutes: saves by the clock (rank 0's, agreed by every rank)
        p, out = train("minutes", 2, ["checkpoint.every_minutes=0.0005", "train.max_steps=300",
                                      "parallel.zero_stage=2", "checkpoint.keep_last=2"])
        saves = records(out, "checkpoint")
        left = [e for e in os.listdir(os.path.join(out, "ckpt")) if e.startswith("step_")]
        print(f"every_minutes = 0.0005 over 300 steps: {len(saves)} checkpoints, {len(left)} kept (keep_last = 2)")
        expect(p.returncode == 0 and len(saves) >= 3 and len(left) == 2, f"every_minutes: {saves} {left}")

        # ---- init_from: a new run starts from the weights
        p, out = train("init", 1, [f"checkpoint.init_from={src}/ckpt/step_00000008", "train.max_steps=2"])
        first = records(out)
        expect("weights from" in p.stderr and first and first[0]["loss"] < reference[0]["loss"] - 0.1,
               f"init_from: {p.stderr[-400:]} {first}")
        ls = testlib.run([args.ztrain, "ckpt", "ls", os.path.join(work, "full_fp32_T2_D2_Z3", "ckpt")], check=False)
        expect(re.search(r"^8\s+complete, latest\s+4 ranks, T=2 D=2 ZeRO-3", ls.stdout, re.M), f"ckpt ls: {ls.stdout}")
    return testlib.report(failures, "checkpoints resume exactly and across layouts, survive kill -9, corruption and SIGTERM")


if __name__ == "__main__":
    sys.exit(main())
