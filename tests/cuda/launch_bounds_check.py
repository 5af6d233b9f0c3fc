#!/usr/bin/python3
"""Every CUDA kernel of the backend (engine/backend/cuda/*.cu) declares __launch_bounds__, and every
launch of it passes exactly that block size: the launch's block argument is the same expression as
the kernel's bound (`launch(add_kernel<4>, blocks, kThreads, ...)` for `__launch_bounds__(kThreads)`).

Why: ptxas sizes a kernel's registers for its bound, so a bound lets it use up to 65536 / bound
registers a thread and no more, and a launch with more threads than the bound fails on a GPU. The
emulated device ignores __launch_bounds__ (it cannot see registers), so a wrong bound would show
only on a GPU: this check finds it without one. Kernels launched through a variable (`auto kernel =
attention_forward_tc_kernel<T>; launch(kernel, ...)`) are followed to the kernels assigned to it.

usage: launch_bounds_check.py [SOURCE_DIR]   (default: this checkout's engine/backend/cuda)
Exit status 1 when a kernel has no bound or a launch passes another block size.
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, ".."))
import testlib  # noqa: E402

KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\((?P<bound>[^()]*(?:\([^()]*\)[^()]*)*)\)\s+)?(?P<name>\w+)\s*\(")


def norm(expr):
    return re.sub(r"\s+", "", expr)


def split_args(text, start):
    """the comma-separated arguments of the call whose '(' is at text[start], to its ')'"""
    depth, args, cur, i = 0, [], [], start
    angle = 0
    while i < len(text):
        c = text[i]
        if c in "([{":
            depth += 1
            if depth > 1:
                cur.append(c)
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append("".join(cur))
                return args
            cur.append(c)
        elif c == "<" and depth == 1 and re.match(r"[\w:]", text[i - 1] if i else " "):
            angle += 1  # template arguments (a kernel's name), not a comparison
            cur.append(c)
        elif c == ">" and angle and depth == 1:
            angle -= 1
            cur.append(c)
        elif c == "," and depth == 1 and not angle:
            args.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    return args


def check(src_dir):
    problems, launches = [], 0
    for fn in sorted(os.listdir(src_dir)):
        if not fn.endswith(".cu"):
            continue
        path = os.path.join(src_dir, fn)
        text = re.sub(r"/\*.*?\*/", "", re.sub(r"//[^\n]*", "", open(path).read()), flags=re.S)  # comments name kernels
        for m in re.finditer(r"<<<", text):  # every launch goes through launch(): it is what this check reads
            problems.append(f"{fn}:{text[:m.start()].count(chr(10)) + 1}: a <<< >>> launch (use launch())")
        kernels = {}
        for m in KERNEL.finditer(text):
            if m.group("bound") is None:
                problems.append(f"{fn}: kernel {m.group('name')} has no __launch_bounds__")
            # the bound's first argument: the block size (a second, the minimum blocks per SM,
            # keeps ptxas from trading registers for occupancy)
            kernels[m.group("name")] = norm((m.group("bound") or "").split(",")[0])
        for m in re.finditer(r"\blaunch\(", text):
            args = split_args(text, m.end() - 1)
            if len(args) < 3:
                line = text[:m.start()].count("\n") + 1
                problems.append(f"{fn}:{line}: a launch( this check cannot read (fewer than 3 arguments found)")
                continue
            name = re.match(r"\s*&?(\w+)", args[0]).group(1)
            block = norm(args[2])
            if name in kernels:
                targets = [name]
            else:  # a variable: the kernels assigned to it before this launch
                defs = list(re.finditer(rf"\b{name}\s*=\s*([^;]*);", text[:m.start()]))
                targets = [k for k in re.findall(r"\w+", defs[-1].group(1)) if k in kernels] if defs else []
                if not targets:
                    problems.append(f"{fn}: launch({name}, ...) at offset {m.start()}: no kernel of this file found for it")
                    continue
            launches += 1
            for k in targets:
                if kernels[k] and kernels[k] != block:
                    line = text[:m.start()].count("\n") + 1
                    problems.append(f"{fn}:{line}: {k} is launched with {block} threads, its __launch_bounds__ is {kernels[k]}")
        if not kernels and "launch(" in text:
            problems.append(f"{fn}: launches found but no kernel")
    return problems, launches


def main():
    src_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "engine", "backend", "cuda")
    problems, launches = check(src_dir)
    return testlib.report(problems, f"every kernel in {os.path.relpath(src_dir, ROOT)} has __launch_bounds__; "
                                    f"{launches} launches pass exactly their kernel's bound")


if __name__ == "__main__":
    sys.exit(main())
