#!/usr/bin/python3
"""The docs against the binaries (issue 43, item 19: an example in docs/commands.md showed figures
the binary no longer printed). No example or command in README.md or docs/ can go stale:
1. An example block (a fenced block whose first line is `$ COMMAND`) holds the command's output: the
   command runs from the checkout (build/bin/ -> the binaries under test) and its output is compared
   line by line; a line `...` stands for any lines, and `...` inside a line for any text.
2. A progress line shown in the docs (`step N/M | loss ...`) has the binary's format: a short run's
   line and the doc's are equal with their numbers masked.
3. Every command line of README.md and docs/*.md that calls a ztrain executable names a command the
   executable has and options its --help lists.
4. Every command of docs/commands.md's list runs once on a tiny spec and exits 0. The runs are
   keyed by the command's words: a command added to that list without a run here fails.
"""
import os
import re
import shlex
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import testlib  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures, expect = testlib.checks(echo=True)
EXECUTABLES = ("ztrain", "ztrain-tokenize", "ztrain-bench-comm", "ztrain-bench-data", "ztrain-bench-adamw")


def doc_files():
    docs = os.path.join(REPO, "docs")
    return [os.path.join(REPO, "README.md")] + sorted(
        os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))


def fenced_blocks(path):
    """(first line number, [lines]) of each fenced block of a Markdown file."""
    blocks, inside, start, lines = [], False, 0, []
    for n, line in enumerate(open(path).read().splitlines(), 1):
        if line.startswith("```"):
            if inside:
                blocks.append((start, lines))
            inside, start, lines = not inside, n + 1, []
        elif inside:
            lines.append(line)
    return blocks


def matches(expected, actual):
    """Whether `actual` lines fit `expected` lines, where a line `...` is any lines (none included)
    and `...` inside a line any text."""
    if not expected:
        return not actual
    if expected[0].strip() == "...":
        return any(matches(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    if not actual:
        return False
    pattern = ".*".join(re.escape(part) for part in expected[0].split("..."))
    return re.fullmatch(pattern, actual[0]) is not None and matches(expected[1:], actual[1:])


def examples(bindir):
    """1: every `$ COMMAND` block against the command's output."""
    count = 0
    for path in doc_files():
        for line_no, lines in fenced_blocks(path):
            if not lines or not lines[0].startswith("$ "):
                continue
            count += 1
            cmd = lines[0][2:].replace("build/bin/", bindir + "/")
            p = testlib.run(shlex.split(cmd), check=False, cwd=REPO, timeout=600)
            where = f"{os.path.relpath(path, REPO)}:{line_no}"
            ok = p.returncode == 0 and matches(lines[1:], p.stdout.splitlines())
            print(f"1: {where}: `{lines[0][2:]}`: {'the binary prints it' if ok else 'STALE'}")
            expect(ok, f"{where}: the example of `{lines[0][2:]}` is not what the binary prints (exit "
                       f"{p.returncode}); it prints:\n{p.stdout}{p.stderr[-400:]}")
    expect(count > 0, "1: no example block found (a `$ COMMAND` fenced block)")


NUMBER = re.compile(r"(\d+h)?(\d+m)?\d+s\b|\d+(\.\d+)?(e[+-]?\d+)?")  # durations (1m03s) first


def masked(line):
    return NUMBER.sub("#", line)


def progress_lines(z, work, data):
    """2: a progress line in the docs has the format of a short run's."""
    spec = testlib.tiny_spec(os.path.join(work, "progress.toml"), os.path.join(work, "progress"), data,
                             testlib.TINY_MODEL, {"micro_batch": 2, "global_batch": 4, "max_steps": 2})
    p = testlib.run([z, "train", spec], check=False)
    ran = [ln for ln in p.stdout.splitlines() if ln.startswith("step ")]
    expect(p.returncode == 0 and ran, f"2: the short run: {p.returncode} {p.stderr[-300:]}")
    shown = 0
    for path in doc_files():
        for n, line in enumerate(open(path).read().splitlines(), 1):
            if re.match(r"step \d+/\d+ \| loss ", line):
                shown += 1
                ok = bool(ran) and masked(line) == masked(ran[-1])
                print(f"2: {os.path.relpath(path, REPO)}:{n}: a progress line: {'the format of the binary' if ok else 'STALE'}")
                expect(ok, f"2: {os.path.relpath(path, REPO)}:{n}: {line!r} is not the binary's format {ran[-1:]!r}")
    print(f"2: {shown} progress line(s) in the docs")


def command_lines():
    """(where, executable, words after it) of each line in the docs' code blocks that calls a ztrain
    executable (a line's continuation `\\` joined; comments dropped)."""
    found = []
    for path in doc_files():
        for line_no, lines in fenced_blocks(path):
            text = "\n".join(lines).replace("\\\n", " ")
            for k, line in enumerate(text.splitlines()):
                line = line.split(" #")[0].strip()
                if line.startswith("$ "):
                    line = line[2:]
                try:
                    words = shlex.split(line)
                except ValueError:
                    continue
                if words and words[0] in ("docker", "sbatch"):  # their own syntax (tools/docker_check.sh)
                    continue
                while words:  # `ztrain supervise ... -- mpirun ... ztrain train ...`: both calls
                    i = next((i for i, w in enumerate(words) if os.path.basename(w) in EXECUTABLES), None)
                    if i is None:
                        break
                    rest = words[i + 1:]
                    inner = rest.index("--") if "--" in rest else len(rest)
                    found.append((f"{os.path.relpath(path, REPO)}:{line_no + k}", os.path.basename(words[i]),
                                  rest[:inner]))
                    words = rest[inner + 1:]
    return found


def options_exist(bindir):
    """3: each such line names a command its executable has, with options its --help lists."""
    helps = {}
    for exe in EXECUTABLES:
        p = testlib.run([os.path.join(bindir, exe), "--help"], check=False, env=testlib.mpi_env())
        helps[exe] = p.stdout + p.stderr
    checked = 0
    for where, exe, words in command_lines():
        if exe == "ztrain":
            commands = re.findall(r"^  ([a-z]+(?: [a-z-]+)?)(?= |$)", helps[exe], re.M)
            sub = next((c for c in commands if words[:len(c.split())] == c.split()), None)
            if words and words[0] not in ("--help",) and not words[0].startswith("-"):
                expect(sub is not None, f"3: {where}: `ztrain {' '.join(words[:2])}` is not a command of ztrain --help")
        elif exe == "ztrain-tokenize" and words:
            expect(f"ztrain-tokenize {words[0]}" in helps[exe],
                   f"3: {where}: `ztrain-tokenize {words[0]}` is not in its --help")
        for w in words:
            option = w.split("=")[0].strip("[]")
            if option.startswith("--") and len(option) > 2:
                checked += 1
                expect(re.search(re.escape(option) + r"(?![a-z-])", helps[exe]) is not None,
                       f"3: {where}: {exe} {option} is not an option its --help lists")
    print(f"3: {len(command_lines())} command lines in README.md and docs/*.md; {checked} options, each in its --help")


def command_key(words):
    """docs/commands.md's `ztrain plan SPEC.toml [--world N] ...` -> "ztrain plan": the executable
    (its path dropped) and the lower-case command words before the first argument or option."""
    key = []
    for w in words:
        if key and not re.fullmatch(r"[a-z][a-z-]*", w):
            break
        key.append(os.path.basename(w))
    return " ".join(key)


def runs_each_command(z, tokenize, bindir, work, data):
    """4: every command of docs/commands.md's list, run once."""
    ck = os.path.join(work, "ck")
    spec = testlib.tiny_spec(os.path.join(work, "cmd.toml"), os.path.join(work, "cmd"), data, testlib.TINY_MODEL,
                             {"micro_batch": 2, "global_batch": 4, "max_steps": 2},
                             checkpoint__dir=ck, checkpoint__every_steps=2, checkpoint__async=False)
    text = os.path.join(work, "text.txt")
    open(text, "w").write(testlib.generated_text(300, 3))
    ids = os.path.join(work, "ids.txt")
    chats = os.path.join(work, "chats.jsonl")
    open(chats, "w").write('{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}\n'
                           '{"prompt": "2+2?", "completion": "4"}\n')
    runs = {
        "ztrain train": [[z, "train", spec], [z, "train", spec, "--resume", "auto", "--set", "train.max_steps=3"],
                         [z, "train", spec, "--resume-unchecked", "--set", "train.max_steps=4"]],
        "ztrain supervise": [[z, "supervise", "--max-restarts", "1", "--", z, "train", spec,
                              "--set", "train.max_steps=5"]],
        "ztrain check": [[z, "check", spec]],
        "ztrain plan": [[z, "plan", spec, "--world", "2", "--gpu", "h100", "--search", "--json"]],
        "ztrain doctor": [[z, "doctor", spec]],
        "ztrain report": [[z, "report", os.path.join(work, "cmd"), "--out", os.path.join(work, "cmd.png")]],
        "ztrain export": [[z, "export", ck, "--format", "hf", "--out", os.path.join(work, "hf"), "--dtype", "fp32"]],
        "ztrain ckpt ls": [[z, "ckpt", "ls", ck]],
        "ztrain ckpt verify": [[z, "ckpt", "verify", ck]],
        "ztrain debug dump-state": [[z, "debug", "dump-state", spec, "--out", os.path.join(work, "s.h5")]],
        "ztrain help spec": [[z, "help", "spec"]],
        "ztrain-tokenize encode": [[tokenize, "encode", "--vocab", "byte", text]],
        "ztrain-tokenize decode": [[tokenize, "decode", "--vocab", "byte", ids]],
        "ztrain-tokenize shards": [[tokenize, "shards", "--vocab", "byte", "--out", os.path.join(work, "sh"), text]],
        "ztrain-tokenize bench": [[tokenize, "bench", "--vocab", "byte", "--repeats", "1", text]],
        "ztrain-tokenize chat": [[tokenize, "chat", "--vocab", "byte", "--template", "chatml", "--out",
                                  os.path.join(work, "sft"), chats]],
        "ztrain-tokenize render": [[tokenize, "render", "--template", "llama3", chats]],
        "mpirun": [["mpirun", "--oversubscribe", "-np", "2", os.path.join(bindir, "ztrain-bench-comm"),
                    "--max", "4K", "--iters", "2"]],
        "ztrain-bench-data": [[os.path.join(bindir, "ztrain-bench-data"), spec, "--batches", "5"]],
        "ztrain-bench-adamw": [[os.path.join(bindir, "ztrain-bench-adamw"), "--params", "100000", "--reps", "1"]],
        "gpu_check.sh": [[os.path.join(REPO, "tools", "gpu_check.sh"), "--dry-run"]],
    }
    listed = []
    for _, lines in fenced_blocks(os.path.join(REPO, "docs", "commands.md"))[:1]:
        for line in lines:
            if line and not line.startswith(" "):
                listed.append(command_key(shlex.split(line.split("  ")[0].replace("|", " "))))
    for key in dict.fromkeys(listed):
        expect(key in runs, f"4: docs/commands.md lists `{key}`, which this test does not run")
        for cmd in runs.get(key, []):
            if cmd[0] == "mpirun" and testlib.mpirun_missing():
                continue
            if key == "ztrain report" and not shutil.which("gnuplot"):
                print("4: ztrain report: not run (gnuplot missing)")
                continue
            p = testlib.run(cmd, check=False, timeout=600, env=testlib.mpi_env())
            if key == "ztrain-tokenize encode":
                open(ids, "w").write(p.stdout)
            print(f"4: {key}: {' '.join(os.path.basename(c) if os.path.isabs(c) else c for c in cmd[1:6])}: "
                  f"exit {p.returncode}")
            expect(p.returncode == 0, f"4: {' '.join(cmd)}: exit {p.returncode}: {p.stderr[-500:]}")
    print(f"4: {len(dict.fromkeys(listed))} commands listed in docs/commands.md, each run")


def main():
    args = testlib.arg_parser().parse_args()
    z = os.path.abspath(args.ztrain)
    bindir = os.path.dirname(z)
    with testlib.workdir("zt_docs_") as work:
        data = testlib.make_byte_dataset(args.tokenize, os.path.join(work, "data"), 20000, 5)
        examples(bindir)
        progress_lines(z, work, data)
        options_exist(bindir)
        runs_each_command(z, os.path.abspath(args.tokenize), bindir, work, data)
    return testlib.report(failures, "every example, progress line and command in the docs is the binary's")


if __name__ == "__main__":
    sys.exit(main())
