#!/usr/bin/python3
"""Multi-rank training on the CPU backend under mpirun (Open MPI, --oversubscribe):
- layout equivalence: one spec and seed trained for 10 steps under (T, D, zero_stage) =
  (2,1,0), (4,1,0), (1,2,0), (1,2,1), (1,2,2), (1,2,3), (2,2,3), (1,4,3) gives the single
  process's losses (relative difference <= 1e-5) and the same final parameters (per-tensor
  normalized difference <= 5e-5, see PARAM_TOL);
- ZeRO-3 memory: per-rank parameters + gradients + optimizer states, read from the allocator,
  within 10% of the single-process figure divided by T*D, plus the tensors that tensor parallelism
  replicates (position embedding, norms, row-parallel biases), which only D divides; measured
  independently too: an allocator preloaded into every rank (tests/dist/count_alloc.c) counts the
  bytes the backend allocates; ztrain's reported peak equals that count, and ZeRO-3's is lower
  than the single process's;
- with --guard-memory (a ctest of its own), every rank runs with ZTRAIN_CPU_GUARD_MEMORY=1: the
  backend's memory is inaccessible outside its ops, so engine code touching device memory from
  the host segfaults here as it would on a GPU (the single process's ZeRO-1 did, before the self
  communicator copied with the backend);
- failures: a rank that exits mid-step ends the whole job non-zero (no step completes after it);
  a rank that stops
  responding makes the others abort after [comm] timeout_s with a message naming the collective
  and the rank;
- bad layouts exit with status 2 and a message that names the numbers;
- sequence parallelism with rows the tensor group does not divide (sampling's 1..13-row
  forwards at T4): the same sample as without it;
- packed fine-tuning documents (loss on some tokens only, the documents' attention mask) under
  (T, D, zero_stage) = (2,2,3), (2,1,0) with sequence parallelism, (1,4,3): the single process's
  losses (relative difference <= 1e-5).
With --arch llama only the layout equivalence and the sample run, for a Llama with 4 query and 2 key/value heads:
T = 2 splits the key/value heads, T = 4 replicates each on 2 ranks (their gradients summed across
them), under ZeRO stages 0-3.
With --lora (Llama, or GPT-2 with --arch gpt2) the layout equivalence and the packed documents, of low-rank adapters on
every linear layer over the frozen weights: each adapter's replicated factor (A of q, k, v, gate,
up; B of o, down) is a part per tensor-parallel rank, summed over the group; the key/value layers'
B, replicated at T4, summed over its replicas; the frozen store sharded by ZeRO-3; dropout 0.1 on
the adapters' input, its mask drawn by global position (a row-parallel layer's columns offset by
the rank), so every layout draws the same. The frozen weights' final values equal their initial
ones in every layout.
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import testlib  # noqa: E402

TOL = 1e-5  # losses
# Final parameters: gradients agree to ~5e-7 across layouts (tensor parallelism sums partial
# products in another order), and Adam divides each update by sqrt(v), which turns such
# differences in near-zero gradient elements into larger parameter differences after 10 steps
# (measured 1e-5 to 2e-5 for T > 1, below 2e-6 for ZeRO alone). A real layout bug (a wrong shard,
# a missing reduction, a bias added twice) moves parameters by 1e-2 or more.
PARAM_TOL = 5e-5
# With the adapters' dropout more of their gradient elements sit near zero early on (the mask zeroes
# a tenth of each input, and B starts at zero), and Adam turns their float noise into steps: GPT-2's
# c_attn B ends 2.4e-4 apart at tensor 2 although the masks are the same (its gradients with B
# trained agree to 5e-7 across the layouts). A mask drawn at the wrong columns (planted once: the
# row-parallel layers' column offset dropped) puts the losses 2.7e-4 and the parameters 0.27 apart.
LORA_PARAM_TOL = 1e-3
failures, expect = testlib.checks()


def mpirun(np_, argv, env=None, timeout=300):
    return testlib.run([*testlib.mpirun(np_), *argv], check=False, env=testlib.mpi_env(**(env or {})), timeout=timeout)


def main():
    ap = testlib.arg_parser()
    ap.add_argument("--guard-memory", action="store_true",
                    help="run every rank with ZTRAIN_CPU_GUARD_MEMORY=1: engine code that touches the backend's "
                         "memory outside its ops segfaults, as it would on a GPU (the memory measurement, which "
                         "depends on the allocator, is skipped)")
    ap.add_argument("--arch", choices=("gpt2", "llama", "qwen2", "qwen3"), default="gpt2")
    ap.add_argument("--lora", action="store_true", help="low-rank adapters over the frozen model ([lora])")
    args = ap.parse_args()
    if args.guard_memory:
        os.environ["ZTRAIN_CPU_GUARD_MEMORY"] = "1"
    if testlib.mpirun_missing():
        return testlib.SKIP
    h5py, np = testlib.require("h5py", "numpy")

    with tempfile.TemporaryDirectory() as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 9)
        # 4 query, 2 key/value heads; Llama 3.1's RoPE scaling (head size 6: wavelengths 6.3, 135 and
        # 2920 positions, one in each band of an original context of 256)
        llama = dict(testlib.TINY_MODEL, arch="llama", n_kv_head=2, d_ff=40, rope_scaling="llama3",
                     rope_scaling_original_max_positions=256)
        # the families' options under tensor parallelism: Qwen2's q/k/v biases (the key/value ones
        # replicated at T4, their gradients summed over the replicas), Qwen3's per-head norms (their
        # gradients summed over the tensor group) with heads 8 wide (4 x 8 != d_model 24)
        families = {"qwen2": dict(testlib.TINY_MODEL, arch="qwen2", n_kv_head=2, d_ff=40, tie_embeddings=True),
                    "qwen3": dict(testlib.TINY_MODEL, arch="qwen3", n_kv_head=2, head_dim=8, d_ff=40)}
        model = testlib.TINY_MODEL if args.arch == "gpt2" else families.get(args.arch, llama)
        spec = testlib.tiny_spec(os.path.join(work, "spec.toml"), os.path.join(work, "run"), data, model, seed=11,
                                 train={"micro_batch": 2, "global_batch": 8, "max_steps": 10, "log_every": 1},
                                 optim={"lr": 4e-3, "warmup_steps": 2, "grad_clip": 0.5},
                                 # small buckets: every group is cut into several units, exercising the padding
                                 parallel__bucket_mb=0.004, parallel__prefetch=2,
                                 **({"lora__rank": 2, "lora__alpha": 4.0, "lora__targets": "all", "lora__dropout": 0.1}
                                    if args.lora else {}))

        def dump(name, np_, stage, tensor=1, replicate=1, sp=False, recompute="none", extra=()):
            out = os.path.join(work, name + ".h5")
            argv = [args.ztrain, "debug", "dump-state", spec, "--out", out, "--steps", "10", *extra,
                    "--set", f"parallel.zero_stage={stage}", "--set", f"parallel.tensor={tensor}",
                    "--set", f"parallel.replicate={replicate}",
                    "--set", f"parallel.sequence_parallel={'true' if sp else 'false'}",
                    "--set", f"train.recompute={recompute}"]
            if replicate > 1 and np_ // tensor >= 4:  # 2 micro-batches a rank: accumulation within a replica
                argv += ["--set", "train.micro_batch=1"]
            p = testlib.run(argv, check=False) if np_ == 1 else mpirun(np_, argv)
            if p.returncode != 0:
                failures.append(f"{name}: exit {p.returncode}: {p.stderr[-2000:]}")
                return None
            return h5py.File(out, "r")

        ref = dump("single", 1, 0)
        if ref is None:
            print("FAIL:\n  " + "\n  ".join(failures))
            return 1
        ref_loss = ref["train"]["loss"][()]
        # (tensor, data, ZeRO stage[, replicas[, "sp"[, recompute]]]): hybrid sharding shards within each replica
        # of the data-parallel ranks and all-reduces across them (R2 of D2: replicas of one rank; D4
        # in 2 replicas of 2 with micro-batches of 1, so that each rank accumulates 2); "sp":
        # Megatron sequence parallelism (the norms' and residuals' rows split across the tensor
        # group, their gradients summed over it; Llama's T4 with replicated key/value heads), with
        # recompute too (its collectives run again in backward)
        layouts = ([(2, 1, 0), (4, 1, 0), (1, 2, 0), (1, 2, 1), (1, 2, 2), (1, 2, 3), (2, 2, 3), (1, 4, 3),
                    (1, 4, 1, 2), (1, 4, 2, 2), (1, 4, 3, 2), (2, 2, 1, 2), (2, 2, 2, 2), (2, 2, 3, 2),
                    (2, 1, 0, 1, "sp"), (4, 1, 0, 1, "sp"), (2, 2, 1, 2, "sp"), (2, 2, 2, 2, "sp"),
                    (2, 2, 3, 2, "sp", "selective")]
                   if args.arch == "gpt2" else [(2, 1, 0), (4, 1, 0), (4, 1, 2), (2, 2, 3), (1, 2, 1), (1, 4, 3, 2),
                                                (2, 2, 2, 2), (2, 1, 0, 1, "sp", "full"), (4, 1, 2, 1, "sp"),
                                                (2, 2, 1, 2, "sp"), (2, 2, 3, 2, "sp")]
                   if args.arch == "llama" else [(2, 2, 3), (4, 1, 0), (4, 1, 3, 1, "sp", "full")])
        if args.lora:  # T4: Llama's key/value heads replicated (so their adapters' B); SP; ZeRO-3's frozen shards
            layouts = [(1, 2, 0), (1, 2, 2), (1, 2, 3), (2, 1, 0), (4, 1, 0), (2, 2, 3), (1, 4, 3, 2),
                       (4, 1, 1, 1, "sp", "full")]
            base = [n for n in ref["final"] if ".lora_" not in n]
            moved = [n for n in base if not np.array_equal(ref["final"][n][()], ref["params"][n][()])]
            expect(not moved and len(base) < len(ref["final"]), f"single process: frozen weights moved: {moved[:3]}")
        for (t, d, z, *rest) in layouts:
            r = rest[0] if rest else 1
            sp = "sp" in rest
            rc = rest[2] if len(rest) > 2 else "none"
            name = (f"T{t}_D{d}_zero{z}" + (f"_R{r}" if r > 1 else "") + ("_SP" if sp else "") +
                    (f"_{rc}" if rc != "none" else ""))
            f = dump(name, t * d, z, t, r, sp, rc)
            if f is None:
                continue
            loss = f["train"]["loss"][()]
            # shapes first: numpy broadcasting would hide a missing step or tensor element
            expect(loss.shape == ref_loss.shape, f"{name}: {loss.shape} losses vs {ref_loss.shape}")
            if loss.shape != ref_loss.shape:
                continue
            worst_loss = float(np.max(np.abs(loss - ref_loss) / np.abs(ref_loss)))
            worst_param, worst_name = 0.0, ""
            for n in ref["final"]:
                a, b = f["final"][n][()], ref["final"][n][()]
                expect(a.shape == b.shape, f"{name}: {n} has shape {a.shape}, single process {b.shape}")
                if a.shape != b.shape:
                    continue
                if n.endswith("attn.c_attn.bias"):
                    # The key bias's gradient is exactly zero (softmax ignores a constant added to
                    # a row of scores): it holds only float noise, which Adam normalizes into
                    # full-size steps. Its values are arbitrary; compare q and v only.
                    c = a.shape[0] // 3
                    a, b = np.concatenate([a[:c], a[2 * c:]]), np.concatenate([b[:c], b[2 * c:]])
                e = float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
                if e > worst_param:
                    worst_param, worst_name = e, n
            print(f"{name}: losses {loss[0]:.6f} -> {loss[-1]:.6f}, worst loss rel diff {worst_loss:.1e}, "
                  f"worst final-param diff {worst_param:.1e} ({worst_name})")
            if args.lora:
                moved = [n for n in f["final"] if ".lora_" not in n
                         and not np.array_equal(f["final"][n][()], f["params"][n][()])]
                expect(not moved, f"{name}: frozen weights moved: {moved[:3]}")
            expect(worst_loss <= TOL, f"{name}: loss differs from single process by {worst_loss:.2e}")
            tol = LORA_PARAM_TOL if args.lora else PARAM_TOL
            expect(worst_param <= tol, f"{name}: final {worst_name} differs by {worst_param:.2e}")

        if args.lora and args.arch == "llama":
            # multi-query: the one key/value head on every rank of tensor 2, so k's and v's B are
            # summed over the whole group (a single piece: the case the review found unallocated)
            mqa = ["--set", "model.n_kv_head=1"]
            want, got = dump("mqa_single", 1, 0, extra=mqa), dump("mqa_T2_D1_zero0", 2, 0, 2, extra=mqa)
            if want is not None and got is not None:
                wl, gl = want["train"]["loss"][()], got["train"]["loss"][()]
                worst = max(float(np.linalg.norm(got["final"][n][()] - want["final"][n][()]) /
                                  max(np.linalg.norm(want["final"][n][()]), 1e-30)) for n in want["final"])
                loss_diff = float(np.max(np.abs(gl - wl) / np.abs(wl)))
                print(f"mqa_T2_D1_zero0: worst loss rel diff {loss_diff:.1e}, worst final-param diff {worst:.1e}")
                expect(loss_diff <= TOL and worst <= LORA_PARAM_TOL,
                       f"multi-query at tensor 2: losses {loss_diff:.2e}, parameters {worst:.2e} from the single process")
        if args.arch in families:  # the shared machinery (packing, sampling) is Llama's test's
            return testlib.report(failures, f"{args.arch}: tensor/data-parallel layouts with ZeRO match the "
                                            "single process")

        # Packed fine-tuning documents ([data] packing = "documents"): prompt tokens and padding carry
        # no loss, so the loss is the mean over the global batch's tokens with loss, counted across
        # the data-parallel ranks before the step's gradients are scaled; each document attends
        # within itself under tensor and sequence parallelism and ZeRO-3.
        sft = testlib.make_chat_dataset(args.tokenize, os.path.join(work, "chat"), 5, n=40)
        packed = ["--set", f"data.train={sft}", "--set", "data.packing=documents"]
        packed_ref = dump("packed_single", 1, 0, extra=packed)
        for (t, d, z, *rest) in [(2, 2, 3), (2, 1, 0, "sp"), (1, 4, 3)] if packed_ref else []:
            name = f"packed_T{t}_D{d}_zero{z}" + ("_SP" if rest else "")
            f = dump(name, t * d, z, t, 1, bool(rest), extra=packed)
            if f is None:
                continue
            loss, want = f["train"]["loss"][()], packed_ref["train"]["loss"][()]
            worst = float(np.max(np.abs(loss - want) / np.abs(want))) if loss.shape == want.shape else float("inf")
            print(f"{name}: losses {loss[0]:.6f} -> {loss[-1]:.6f}, worst loss rel diff {worst:.1e}")
            expect(worst <= TOL, f"{name}: packed documents' loss differs from the single process by {worst:.2e}")
        if args.lora:
            return testlib.report(failures, f"{args.arch} with low-rank adapters: tensor/data-parallel layouts with "
                                            "ZeRO match the single process, packed documents too; the frozen weights "
                                            "never move")

        # Sequence parallelism pads a row count the tensor group does not divide: sampling forwards
        # 1, 2, ... 13 rows (the prompt is one token), so at T4 some ranks hold 1 row, some none.
        # The sample must be the one without sequence parallelism.
        samples = {}
        for sp in ("false", "true"):
            p = testlib.run([*testlib.mpirun(4), args.ztrain, "train", spec, "--set", "parallel.tensor=4",
                             "--set", "train.max_steps=2", "--set", "train.sample_tokens=12",
                             "--set", f"parallel.sequence_parallel={sp}"],
                            check=False, env=testlib.mpi_env(), timeout=300, errors="replace")  # the sample: any bytes
            m = re.search(r"---- sample .*", p.stdout, re.S)
            samples[sp] = m.group(0) if p.returncode == 0 and m else f"exit {p.returncode}: {p.stderr[-600:]}"
        print(f"T4 sample, sequence parallelism off / on: {samples['false'][:80]!r} / {samples['true'][:80]!r}")
        expect(samples["false"].startswith("---- sample") and samples["true"] == samples["false"],
               f"T4 samples differ with sequence parallelism: {samples}")

        if args.arch != "gpt2":
            return testlib.report(failures, f"{args.arch}: tensor/data-parallel layouts with ZeRO 0-3 match the "
                                            "single process")
        # ZeRO-3 memory per rank (not in guard mode: its page-sized mappings are another allocator)
        if not args.guard_memory:
            mem_re = re.compile(r"rank (\d+) memory: params ([\d.]+) MiB, grads ([\d.]+) MiB, optimizer ([\d.]+) MiB")

            def states(p):
                return {int(m[0]): float(m[1]) + float(m[2]) + float(m[3]) for m in mem_re.findall(p.stderr)}

            # An independent measurement: tests/dist/count_alloc.c, preloaded, counts the bytes the
            # CPU backend obtains from aligned_alloc (its only allocator) and reports their peak;
            # ztrain's own peak must equal it, and sharding must lower it.
            counter = os.path.join(work, "count_alloc.so")
            testlib.run(["cc", "-O2", "-shared", "-fPIC", os.path.join(os.path.dirname(__file__), "count_alloc.c"),
                         "-o", counter, "-ldl"])
            peak_re = re.compile(r"rank (\d+) peak memory: [\d.]+ MiB allocated by the .* backend \((\d+) bytes\)")
            counted_re = re.compile(r"count_alloc: rank (\d+) peak (\d+) bytes")

            def peaks(p, what):
                reported = {int(r): int(b) for r, b in peak_re.findall(p.stderr)}
                counted = {int(r): int(b) for r, b in counted_re.findall(p.stderr)}
                expect(reported and reported == counted,
                       f"{what}: peak memory reported {reported} but counted by the interposed allocator {counted}")
                return counted

            C, S, L = 64, 16, 2  # the memory model: d_model, seq_len, layers
            big = ["--set", f"model.d_model={C}", "--set", "train.max_steps=1"]
            p = testlib.run([args.ztrain, "train", spec, *big], check=False, env=dict(os.environ, LD_PRELOAD=counter))
            single = states(p)[0]
            single_peak = max(peaks(p, "single process").values() or [0])
            # replicated under tensor parallelism: wpe, 4 norm vectors + 2 row-parallel biases per
            # block, ln_f; params + grads + 2 AdamW moments, 4 bytes each
            replicated_mib = (S * C + L * 6 * C + 2 * C) * 16 / 1048576
            for t, d in ((1, 2), (1, 4), (2, 2)):
                p = mpirun(t * d, ["-x", f"LD_PRELOAD={counter}", args.ztrain, "train", spec, *big,
                                   "--set", "parallel.zero_stage=3", "--set", f"parallel.tensor={t}"])
                per_rank = states(p)
                counted = peaks(p, f"ZeRO-3 T={t} D={d}")
                print(f"ZeRO-3 T={t} D={d}: peak allocated per rank (counted) {max(counted.values() or [0])} bytes, "
                      f"single process {single_peak} bytes")
                expect(counted and max(counted.values()) < single_peak,
                       f"ZeRO-3 T={t} D={d}: counted peak {counted} not below the single process's {single_peak}")
                expect(len(per_rank) == t * d, f"ZeRO-3 T={t} D={d}: memory lines for {sorted(per_rank)}: {p.stderr[-1500:]}")
                worst = max(per_rank.values()) if per_rank else float("inf")
                budget = 1.10 * single / (t * d) + (replicated_mib / d if t > 1 else 0)
                print(f"ZeRO-3 T={t} D={d}: model states per rank {worst:.3f} MiB vs single process {single:.3f} MiB "
                      f"/ {t * d} = {single / (t * d):.3f} MiB (ratio {worst / (single / (t * d)):.3f}; budget {budget:.3f})")
                expect(worst <= budget, f"ZeRO-3 T={t} D={d}: {worst:.3f} MiB > budget {budget:.3f} MiB")

        # A rank that dies mid-step ends the job: no step completes after it, and the job ends (a
        # hang would hit the subprocess timeout and fail the test; no wall-clock bound is asserted).
        p = mpirun(2, [args.ztrain, "train", spec], env={"ZTRAIN_FAULT_EXIT": "1:3"}, timeout=300)
        print(f"rank 1 exits in step 4: job exit {p.returncode}")
        expect(p.returncode != 0 and "rank 1 exits during step 4" in p.stderr and "step 4/" not in p.stdout,
               f"dead rank: exit {p.returncode}: {p.stdout[-600:]} {p.stderr[-600:]}")
        # a rank that stops responding: the others time out and abort, naming the collective
        p = mpirun(2, [args.ztrain, "train", spec, "--set", "comm.timeout_s=10", "--set", "parallel.zero_stage=3"],
                   env={"ZTRAIN_FAULT_HANG": "1:2"}, timeout=300)
        print(f"rank 1 hangs in step 3: job exit {p.returncode}")
        expect(p.returncode != 0 and "step 3/" not in p.stdout, f"hung rank: exit {p.returncode}: {p.stdout[-600:]}")
        expect(re.search(r"rank 0: collective \w+ of \d+ elements on group dp\(mpi\) did not complete within 10 s",
                         p.stderr), f"hung rank: no timeout message naming the collective: {p.stderr[-1500:]}")

        # bad layouts
        for np_, sets, needle in [
            (4, ["parallel.tensor=3", "model.n_head=3", "model.d_model=24", "model.vocab_size=258"],
             "[parallel] tensor = 3 does not divide the world size 4"),
            (2, ["parallel.tensor=2", "model.n_head=3", "model.d_model=24"], "n_head = 3 is not divisible by tensor = 2"),
            (2, ["train.global_batch=6"], "global_batch = 6 is not a multiple of micro_batch * data-parallel degree = 2 * 2"),
        ]:
            argv = [args.ztrain, "train", spec]
            for s in sets:
                argv += ["--set", s]
            p = mpirun(np_, argv)
            expect(p.returncode == 2 and needle in p.stderr,
                   f"bad layout {sets} on {np_} ranks: expected exit 2 with {needle!r}, got {p.returncode}: {p.stderr[-800:]}")
    return testlib.report(failures, "tensor/data-parallel layouts with ZeRO 0-3 match the single process; ZeRO-3 memory scales as 1/(T*D); failures end the job")


if __name__ == "__main__":
    sys.exit(main())
