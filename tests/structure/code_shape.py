#!/usr/bin/env python3
"""The code's shape, held where the redesign (one job, one step) put it:
- the trainer keeps the loop: engine/train/trainer.cpp <= 450 lines, trainer.{h,cpp} include
  <= 25 project headers; the step protocol stays one short function (train_step <= 90 lines);
- a source file over 600 lines says why at its top (the words "over 600 lines");
- no include runs up DESIGN.md's layer order (LAYERS below), and no file outside the CUDA
  backend includes its private headers (engine/backend/cuda/), except the includes listed in
  KNOWN_UPWARD, each still to be removed: the list may shrink, never grow, and an entry that no
  longer exists fails the test until it is taken off.
Each check is first planted with the fault it guards against (in memory) and must fire."""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from testlib import report  # noqa: E402

# Bottom to top; a folder may include its own layer and the layers below it. engine/<folder>,
# or the top-level folder (models/, data/); "main" is engine/main.cpp.
LAYERS = [
    ["core"],
    ["backend", "data"],
    ["comm", "config"],
    ["model", "offload"],
    ["parallel"],
    ["optim", "observe"],
    ["checkpoint", "models"],
    ["hf"],
    ["job"],
    ["plan"],
    ["train"],
    ["main"],
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}

KNOWN_UPWARD: set = set()  # empty: the spec's loader is given the model families' rules (config/model_keys.h)

MAX_TRAINER_LINES, MAX_TRAINER_INCLUDES, MAX_STEP_LINES, LONG_FILE = 450, 25, 90, 600
SOURCES = (".h", ".cpp", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"((?:engine|models|data)/[^"]+)"', re.M)


def read_tree():
    files = {}
    for top in ("engine", "models", "data", "tools"):
        for root, _, names in os.walk(os.path.join(ROOT, top)):
            for n in names:
                if n.endswith(SOURCES):
                    path = os.path.join(root, n)
                    with open(path, encoding="utf-8", errors="replace") as f:
                        files[os.path.relpath(path, ROOT)] = f.read()
    return files


def layer_of(path):
    parts = path.split("/")
    if parts[0] == "engine":
        return "main" if len(parts) == 2 else parts[1]
    return parts[0]


def function_lines(text, signature):
    """Lines of the function whose definition starts with `signature` (to its closing brace at
    column 0), or None when it is not there."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(signature):
            for j in range(i, len(lines)):
                if lines[j] == "}":
                    return j - i + 1
    return None


def problems(files, known_upward=KNOWN_UPWARD):
    out = []
    trainer = files.get("engine/train/trainer.cpp", "")
    n = len(trainer.splitlines())
    if n > MAX_TRAINER_LINES:
        out.append(f"engine/train/trainer.cpp has {n} lines (at most {MAX_TRAINER_LINES}): run features belong "
                   "in hooks on the step (engine/observe/step_hooks.h) or files of their own in engine/train/")
    incs = set(INCLUDE.findall(trainer + files.get("engine/train/trainer.h", ""))) - {"engine/train/trainer.h"}
    if len(incs) > MAX_TRAINER_INCLUDES:
        out.append(f"trainer.{{h,cpp}} include {len(incs)} project headers (at most {MAX_TRAINER_INCLUDES})")
    step = function_lines(files.get("engine/job/step.cpp", ""), "StepResult train_step(")
    if step is None:
        out.append("engine/job/step.cpp: no train_step definition found")
    elif step > MAX_STEP_LINES:
        out.append(f"train_step has {step} lines (at most {MAX_STEP_LINES}): what watches the step attaches "
                   "through StepHook")
    for path, text in sorted(files.items()):
        if not path.startswith("tools/") and len(text.splitlines()) > LONG_FILE and \
                "over 600 lines" not in "\n".join(text.splitlines()[:20]):
            out.append(f"{path}: {len(text.splitlines())} lines and no reason at its top (say why it is "
                       "'over 600 lines', or split it)")
    seen = set()
    for path, text in sorted(files.items()):
        if path.startswith("tools/"):
            continue
        a = layer_of(path)
        for inc in INCLUDE.findall(text):
            b = layer_of(inc)
            private = inc.startswith("engine/backend/cuda/") and not path.startswith("engine/backend/")
            upward = a in RANK and b in RANK and RANK[b] > RANK[a]
            if not (private or upward):
                continue
            seen.add((path, inc))
            if (path, inc) not in known_upward:
                why = "a private CUDA backend header" if private else f"layer '{b}' is above '{a}'"
                out.append(f"{path} includes {inc}: {why} (DESIGN.md's order, tests/structure/code_shape.py)")
    for path, inc in sorted(known_upward - seen):
        out.append(f"KNOWN_UPWARD lists {path} -> {inc}, which is gone: take it off the list")
    return out


def planted(files):
    """The tree with one fault per check; each must be reported."""
    def with_(path, text):
        f = dict(files)
        f[path] = text
        return f
    trainer = files["engine/train/trainer.cpp"]
    step = files["engine/job/step.cpp"]
    return [
        ("a long trainer", with_("engine/train/trainer.cpp", trainer + "\n" * MAX_TRAINER_LINES), "trainer.cpp has"),
        ("many trainer includes", with_("engine/train/trainer.cpp", "".join(
            f'#include "engine/core/x{i}.h"\n' for i in range(MAX_TRAINER_INCLUDES)) + trainer), "project headers"),
        ("a long step", with_("engine/job/step.cpp", step.replace(
            "StepResult train_step(", "StepResult train_step(" + "\n" * MAX_STEP_LINES, 1)), "train_step has"),
        ("a long file", with_("engine/core/long.cpp", "// short\n" + "x\n" * LONG_FILE), "engine/core/long.cpp"),
        ("an upward include", with_("engine/model/model.cpp", files["engine/model/model.cpp"] +
                                    '#include "engine/train/trainer.h"\n'), "layer 'train' is above 'model'"),
        ("a private CUDA header", with_("engine/train/x.cpp", '#include "engine/backend/cuda/ops.cuh"\n'),
         "a private CUDA backend header"),
    ]


def main():
    files = read_tree()
    failures = []
    for name, tree, expected in planted(files):
        found = [p for p in problems(tree) if expected in p]
        print(f"planted {name}: {'caught' if found else 'MISSED'}")
        if not found:
            failures.append(f"the planted {name} was not reported (expected '{expected}')")
    # an exception whose include is gone must be taken off the list
    stale = KNOWN_UPWARD | {("engine/config/spec.cpp", "engine/hf/hf_config.h")}
    found = [p for p in problems(files, stale) if "which is gone" in p]
    print(f"planted a stale exception: {'caught' if found else 'MISSED'}")
    if not found:
        failures.append("the planted stale exception was not reported (expected 'which is gone')")
    real = problems(files)
    failures += real
    trainer = files["engine/train/trainer.cpp"]
    print(f"trainer.cpp {len(trainer.splitlines())} lines; train_step "
          f"{function_lines(files['engine/job/step.cpp'], 'StepResult train_step(')} lines; "
          f"{len(KNOWN_UPWARD)} known upward includes")
    return report(failures, "the trainer, the step, long files and the layer order keep their shape")


if __name__ == "__main__":
    sys.exit(main())
