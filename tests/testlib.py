"""Shared helpers for ztrain's script tests: generated text, shard datasets, specs, runs."""
import argparse
import contextlib
import importlib
import json
import math
import os
import random
import shutil
import socket
import subprocess
import struct
import sys
import tempfile
import threading
import time

SKIP = 77  # ctest SKIP_RETURN_CODE

# Open MPI refuses to run as root (CI, containers) unless told: every test's mpirun may.
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")


def generated_text(n_words, seed):
    """Deterministic English-like text (no download): words from a fixed list, lines, punctuation."""
    words = ("the of and to in is was he that it for on are as with his they at be this from "
             "have or by one had not but what all were when we there can an your which their said "
             "if do will each about how up out them then she many some so these would other into "
             "has more her two like him see time could no make than first been its who now people "
             "my made over did down only way find use may water long little very after words "
             "called just where most know get through back much go good new write our me man too "
             "any day same right look think also around another came come work three word must "
             "because does part even place well such here take why things help put years different "
             "away again off went old number great tell men say small every found still between").split()
    rng = random.Random(seed)
    out, line = [], []
    for i in range(n_words):
        w = rng.choice(words)
        if not line:
            w = w.capitalize()
        line.append(w)
        if len(line) >= rng.randint(6, 14):
            out.append(" ".join(line) + rng.choice([".", ",", ";", "!", "?"]))
            line = []
    return "\n".join(out) + "\n"


def write_spec(path, sections):
    """sections: {"run": {...}, ...} -> TOML file."""
    with open(path, "w") as f:
        for sec, kv in sections.items():
            f.write(f"[{sec}]\n")
            for k, v in kv.items():
                if isinstance(v, bool):
                    f.write(f"{k} = {'true' if v else 'false'}\n")
                elif isinstance(v, str):
                    f.write(f'{k} = "{v}"\n')
                else:
                    f.write(f"{k} = {v!r}\n")
            f.write("\n")


def run(cmd, check=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        sys.stderr.write(f"command failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stdout}\n{p.stderr}\n")
        raise SystemExit(1)
    return p


def make_byte_dataset(tokenize, out_dir, n_words, seed):
    os.makedirs(out_dir, exist_ok=True)
    txt = os.path.join(out_dir, "input.txt")
    with open(txt, "w") as f:
        f.write(generated_text(n_words, seed))
    run([tokenize, "shards", "--vocab", "byte", "--out", os.path.join(out_dir, "shards"), txt])
    return os.path.join(out_dir, "shards")


CHAT_WORDS = ["the", "king", "été", "naïve", "日本語", "🙂", "sword", "crown", "why?", "answer:", "ok"]


def make_chat_dataset(tokenize, out_dir, seed, n=20, long_answer=30):
    """A fine-tuning dataset (version 2 shards: `ztrain-tokenize chat`, byte vocabulary, ChatML,
    loss on the assistant turns) of n generated conversations of 1-3 exchanges: every fourth with a
    system prompt, one empty user content, non-ASCII words, and conversation 7's answer
    `long_answer` words long (over 64 tokens). Returns the dataset's directory."""
    rng = random.Random(seed)
    os.makedirs(out_dir, exist_ok=True)

    def text(k):
        return " ".join(rng.choice(CHAT_WORDS) for _ in range(k))
    lines = []
    for i in range(n):
        msgs = [{"role": "system", "content": text(3)}] if i % 4 == 0 else []
        for k in range(1 + i % 3):
            msgs.append({"role": "user", "content": "" if i == 5 and k == 0 else text(rng.randint(1, 4))})
            msgs.append({"role": "assistant", "content": text(long_answer if i == 7 else rng.randint(1, 5))})
        lines.append(json.dumps({"messages": msgs}, ensure_ascii=False))
    jsonl = os.path.join(out_dir, "chat.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    run([tokenize, "chat", "--vocab", "byte", "--template", "chatml", "--out", os.path.join(out_dir, "sft"), jsonl])
    return os.path.join(out_dir, "sft")


def read_v2_shard(path):
    """An independent reader of data/FORMAT.md's version 2: (tokens, document starts, loss flags)."""
    data = open(path, "rb").read()
    magic, version, tb, n, docs = struct.unpack_from("<8sIIQQ", data, 0)
    assert magic == b"ZTOKSHRD" and version == 2, (magic, version)
    tokens = list(struct.unpack_from("<%d%s" % (n, "H" if tb == 2 else "I"), data, 64))
    d = (64 + n * tb + 7) // 8 * 8
    starts = list(struct.unpack_from("<%dQ" % docs, data, d))
    mask = data[d + 8 * docs:]
    assert len(mask) == (n + 7) // 8, (len(mask), n)
    loss = [(mask[i // 8] >> (i % 8)) & 1 for i in range(n)]
    return tokens, starts, loss


def free_port():
    """A TCP port on loopback that is free right now (for the test servers)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def with_overrides(spec, over):
    """spec (sections of keys) with keyword overrides named section__key, e.g. train__max_steps=5."""
    for k, v in over.items():
        sec, key = k.split("__")
        spec.setdefault(sec, {})[key] = v
    return spec


def report(failures, pass_message):
    """Prints the outcome; returns the exit code (0 pass, 1 fail)."""
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("PASS: " + pass_message)
    return 0


# ---- what every script test starts with: its checks, arguments, modules, directory and spec
def checks(echo=False):
    """A test's failures list and its expect(cond, msg), which adds msg to the list when cond is
    false; with echo it also prints msg at once (long tests, to see a failure while they run)."""
    failures = []

    def expect(cond, msg):
        if not cond:
            failures.append(msg)
            if echo:
                print(f"  failed: {msg}", flush=True)
    return failures, expect


@contextlib.contextmanager
def mpi_test(prefix, n_words, seed):
    """What an mpirun test starts with: its arguments, its checks (echoed as they fail), a work
    directory and a byte-level dataset of n_words generated words (from `seed`) there; yields
    (args, failures, expect, work, data). Exits with SKIP at once when mpirun is missing."""
    args = arg_parser().parse_args()
    if mpirun_missing():
        sys.exit(SKIP)
    failures, expect = checks(echo=True)
    with workdir(prefix) as work:
        yield args, failures, expect, work, make_byte_dataset(args.tokenize, os.path.join(work, "data"),
                                                              n_words, seed)


def arg_parser():
    """The arguments of a test that runs the binaries: --ztrain and --tokenize (add more, then parse)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--ztrain", required=True)
    ap.add_argument("--tokenize", required=True)
    return ap


def emulated_gpus(ap):
    """Adds --plugin (libztrain_cuda_emu.so) and --nccl (libztrain_nccl_emu.so) to `ap` and parses
    it: (args, env) for mpirun jobs whose ranks are emulated GPUs over the emulated NCCL, or None
    after the SKIP line where mpirun is missing."""
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--nccl", required=True)
    args = ap.parse_args()
    if mpirun_missing():
        return None
    return args, mpi_env(ZTRAIN_CUDA_PLUGIN=args.plugin, ZTRAIN_NCCL_PLUGIN=args.nccl)


@contextlib.contextmanager
def emulated_test(prefix, n_words, seed, ap=None):
    """What a test of ranks on emulated GPUs starts with (emulated_gpus, then as mpi_test): yields
    (args, env, failures, expect, work, data), data a byte-level dataset of n_words generated words.
    Exits with SKIP at once when mpirun is missing."""
    setup = emulated_gpus(ap or arg_parser())
    if setup is None:
        sys.exit(SKIP)
    args, env = setup
    failures, expect = checks(echo=True)
    with workdir(prefix) as work:
        yield args, env, failures, expect, work, make_byte_dataset(args.tokenize, os.path.join(work, "data"),
                                                                   n_words, seed)


def require(*modules, what=None, hint=None):
    """The named modules, imported; where one is missing, prints a SKIP line naming `what` (default:
    the modules) and the ImportError, then `hint` (how to install them), and exits SKIP."""
    try:
        return [importlib.import_module(m) for m in modules]
    except ImportError as e:
        print(f"SKIP: {what or '/'.join(modules)} not available ({e})" + (f"; {hint}" if hint else ""))
        sys.exit(SKIP)


@contextlib.contextmanager
def workdir(prefix, procs=()):
    """A new temporary directory; afterwards the processes in `procs` (servers the test starts and
    appends while it runs) are stopped and the directory is removed with all in it."""
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        yield work
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def mounted(work, fstype, options, what):
    """A fresh filesystem of `fstype` (mount -o options) under work, unmounted after; None, after a
    line saying the `what` case was not provoked, where this user may not mount (root in CI may)."""
    path = tempfile.mkdtemp(dir=work, prefix=fstype + "_")
    cmd = ["mount", "-t", fstype] + (["-o", options] if options else []) + [fstype, path]
    p = run(cmd, check=False) if shutil.which("mount") else None
    if p is None or p.returncode != 0:
        print(f"{fstype} {what}: not provoked (mount not allowed here: {p.stderr.strip()[:120] if p else 'no mount'})")
        yield None
        return
    try:
        yield path
    finally:
        run(["umount", path], check=False)


# The small GPT-2 of the checkpoint, offload and layout tests (--set model.arch=llama etc. for Llama).
TINY_MODEL = {"n_layer": 2, "n_head": 4, "d_model": 24, "vocab_size": 260, "seq_len": 16}


def tiny_spec(path, out_dir, data, model, train, optim=None, seed=None, threads=1, device="cpu", **over):
    """Writes the spec of a short test run to `path` and returns path: [run] out_dir, seed (when
    given), device and threads; [model], [train] and [optim] (when given) as given; [data] train =
    data, or the whole section where data is a dict; then section__key overrides (with_overrides)."""
    run_ = {"out_dir": out_dir, **({} if seed is None else {"seed": seed}), "device": device, "threads": threads}
    spec = {"run": run_, "model": dict(model), "train": dict(train), **({"optim": dict(optim)} if optim else {}),
            "data": dict(data) if isinstance(data, dict) else {"train": data}}
    write_spec(path, with_overrides(spec, over))
    return path


def metrics(out_dir, kind="train", must_exist=True):
    """The records of out_dir/metrics.jsonl whose kind is `kind` (all of them for None); [] where the
    file does not exist and must_exist is false."""
    path = os.path.join(out_dir, "metrics.jsonl")
    if not must_exist and not os.path.exists(path):
        return []
    with open(path) as f:
        return [r for r in map(json.loads, f) if kind is None or r.get("kind") == kind]


def rel(a, b):
    """|a - b| / |b| (2-norms, in float64): how far a result is from its reference."""
    import numpy as np
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))


def dump_state(ztrain, spec, h5, steps, sets=(), np_=1, env=None, timeout=900):
    """`ztrain debug dump-state SPEC --out H5 --steps N --set S...`, under mpirun for np_ > 1; the
    CompletedProcess (not checked)."""
    return run([*mpirun(np_), ztrain, "debug", "dump-state", spec, "--out", h5, "--steps", str(steps),
                *[a for s in sets for a in ("--set", s)]], check=False, env=env, timeout=timeout)


def dump_differences(got, ref):
    """Two `ztrain debug dump-state` files (h5py.File) compared: the first batch's loss, the step
    losses, and each gradient and final parameter, as rel(got, ref); returns (loss, steps, grads,
    finals) with grads and finals dicts by tensor name."""
    loss = rel(got["out"]["loss"][()], ref["out"]["loss"][()])
    steps = rel(got["train"]["loss"][()], ref["train"]["loss"][()])
    grads = {n: rel(got["grads"][n][()], ref["grads"][n][()]) for n in ref["grads"]}
    finals = {n: rel(got["final"][n][()], ref["final"][n][()]) for n in ref["final"]}
    return loss, steps, grads, finals


# ---- runs under mpirun
def mpirun_missing():
    """True, after printing the SKIP line, where mpirun is not installed."""
    if shutil.which("mpirun"):
        return False
    print("SKIP: mpirun not found (Debian: openmpi-bin)")
    return True


def children(pid):
    """The pids of the processes whose parent is pid (mpirun's ranks), sorted."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return sorted(out)


class LineWatcher:
    """Reads a process's text stream to its end on a thread (so the process never blocks on a full
    pipe); wait_for(text, timeout) returns whether a line holding text arrived in time."""

    def __init__(self, stream):
        self.lines, self._seen = [], threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream):
        for line in stream:
            with self._seen:
                self.lines.append(line)
                self._seen.notify_all()

    def wait_for(self, text, timeout):
        with self._seen:
            return self._seen.wait_for(lambda: any(text in ln for ln in self.lines), timeout)

    def text(self):
        self._thread.join(timeout=5)
        return "".join(self.lines)


def mpirun(np_):
    """The launcher for np_ ranks on this machine: nothing for 1, else mpirun --oversubscribe -np N."""
    return [] if np_ == 1 else ["mpirun", "--oversubscribe", "-np", str(np_)]


def mpi_env(**extra):
    """os.environ for an mpirun job (run as root allowed, more ranks than cores allowed, the
    collective order checked at each step's end: docs/parallelism.md), with extra."""
    return {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1", "ZTRAIN_CHECK_COLLECTIVE_ORDER": "1", **extra}


def train_cmd(ztrain, spec, sets=(), np_=1, resume=None):
    """The command line of `ztrain train SPEC --set S...` [--resume R], under mpirun for np_ > 1."""
    return [*mpirun(np_), ztrain, "train", spec, *[a for s in sets for a in ("--set", s)],
            *(["--resume", resume] if resume else [])]


# 16-bit compute: the bounds the parity and precision tests derive from the arithmetic.
# Storing a value rounds it to nearest even, a relative change of at most half an ulp: 2^-p for p
# significand bits (bf16 p = 8, fp16 p = 11).
UNIT_ROUNDOFF = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}


def gpt2_roundings(n_layer):
    """16-bit roundings on the longest path from the loss to a GPT-2 gradient: per block the forward
    stores 10 tensors that the backward reads (ln_1, qkv, attention output, its projection,
    residual, ln_2, fc, gelu, fc projection, block output) and the backward rounds 7 (the residual
    gradient twice, d ln, d qkv, d attention, d fc, d gelu); the head 4 (embedding sum, ln_f,
    logits, their gradient)."""
    return 17 * n_layer + 4


def llama_roundings(n_layer, qk_norm=False):
    """The same for Llama: per block the forward stores 11 (norm, qkv, qkv rotated, attention output,
    its projection, residual, norm, gate|up, SwiGLU, MLP output, block output) and the backward
    rounds 8 (the residual gradient twice, d norm, d qkv, its rotation back, d attention,
    d gate|up, d SwiGLU); the head 4. Qwen3's q/k norms (qk_norm) add 3 per block: the projection
    kept before them, their output, and the gradient through them."""
    return (22 if qk_norm else 19) * n_layer + 4


def rounding_bound(compute, n_layer, arch="gpt2"):
    """Relative error bound of a gradient computed in `compute` against the exact (fp32) one:
    independent roundings add in quadrature, sqrt(k) u, each counted at its worst."""
    k = gpt2_roundings(n_layer) if arch == "gpt2" else llama_roundings(n_layer, qk_norm=arch == "qwen3")
    return math.sqrt(k) * UNIT_ROUNDOFF[compute]


# ---- servers for the object-storage tests: s3rver (npm, in tests/data) and the fault proxy ----
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
S3_KEY = "S3RVER"  # s3rver's built-in credentials (key id and secret)


def s3rver_path():
    """The s3rver executable, or None when it is not installed (`npm ci` in tests/data)."""
    p = os.path.join(DATA_DIR, "node_modules", ".bin", "s3rver")
    return p if os.path.exists(p) and shutil.which("node") else None


def wait_port(port, timeout=20, host="127.0.0.1"):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"server on port {port} did not start")


def start_s3rver(root, bucket, host="127.0.0.1"):
    """An S3-compatible server storing under `root`, with `bucket`, listening on `host`; returns
    (process, port)."""
    port = free_port()
    proc = subprocess.Popen([s3rver_path(), "-d", root, "-a", host, "-p", str(port),
                             "--configure-bucket", bucket, "--silent"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, host=host)
    return proc, port


def start_fault_proxy(upstream_port, rate, seed=7, kinds="503,429,reset,truncated", methods="GET",
                      host="127.0.0.1"):
    """tests/data/fault_proxy.py in front of a local server, listening on `host`; returns
    (process, port)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, os.path.join(DATA_DIR, "fault_proxy.py"), "--port", str(port),
                             "--bind", host, "--upstream", f"http://127.0.0.1:{upstream_port}", "--fault-rate",
                             str(rate), "--seed", str(seed), "--fault-kinds", kinds, "--fault-methods", methods])
    wait_port(port, host=host)
    return proc, port


def proxy_stats(port, host="127.0.0.1"):
    import json
    import urllib.request
    return json.loads(urllib.request.urlopen(f"http://{host}:{port}/__stats__").read())


def stop(procs):
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def st_read(path):
    """A safetensors file as {name: float32 array} and its metadata (numpy; independent of ztrain's reader)."""
    import numpy as np
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        raw = data[t["data_offsets"][0]:t["data_offsets"][1]]
        if t["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif t["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        out[name] = a.reshape(t["shape"])
    return out, header.get("__metadata__", {})
