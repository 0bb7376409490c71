#!/usr/bin/env python3
"""Layers only point down (ARCHITECTURE.md).

Derives the include graph from the sources (every `#include "..."` that names
a file of this repository) and fails on an arrow that runs back up, naming the
file, the line and the rule. Also fails on a folder's CMake target compiling a
file of another folder, and on a source file that no layer claims.

  check_layers.py SOURCE_DIR     check the tree (exit 1 on a violation)
  check_layers.py --self-test    check that each kind of violation is caught
"""
import os
import re
import sys
import tempfile

# Layers from the bottom up: (name, folders). A file belongs to the layer that
# lists its folder or, failing that, the nearest listed folder above it; but a
# folder split into layers (models/) claims only its own files, so a new
# subfolder there (a new model family) must be listed before it builds.
LAYERS = [
    ("foundation", ["core"]),  # what every layer uses: config, JSON, parameters, small utilities
    # Beside parallel/ on the foundation: the data pipeline, checkpoint files, metrics.
    ("datasets", ["datasets"]),  # tokenizers, token files, Megatron's datasets, a run's samples
    ("checkpoint files", ["checkpoint"]),  # checkpoint store, reader, index, tensors; safetensors
    ("metrics", ["metrics"]),  # metrics.jsonl, TensorBoard event files, plot axes
    ("parallel", ["parallel"]),
    ("schedules", ["schedules"]),  # the pure schedule code
    # The model interface and what every family shares (the chunk split, the TP
    # plan builder, attention).
    ("model common", ["models/common"]),
    # One folder per family: only the registry and inference above them, and the
    # tools, may name one.
    ("model families", ["models/gpt", "models/llama"]),
    ("models", ["models"]),  # the registry and inference of any family
    ("runtime", ["runtime"]),  # the executor and the pipeline measurements
    ("trainer", ["framework"]),
    ("measure", ["measure"]),  # the bench harness, calibration, model profiles
    ("planner", ["planner"]),
    ("launch", ["launch"]),
    ("tools", ["benchmarks", "tests"]),
]
# What each layer may include besides itself. parallel/ and the pure
# schedules/ are side by side on the foundation and do not see each other.
ALLOWED = {
    "foundation": [],
    "datasets": ["foundation"],
    "checkpoint files": ["foundation"],
    "metrics": ["foundation"],
    "parallel": ["foundation"],
    "schedules": [],
    "model common": ["foundation", "parallel"],
    "model families": ["foundation", "parallel", "model common", "checkpoint files"],
    "models": ["foundation", "parallel", "model common", "model families", "datasets", "checkpoint files"],
    "runtime": ["foundation", "parallel", "schedules", "model common", "metrics"],
    "trainer": ["foundation", "datasets", "checkpoint files", "metrics", "parallel", "schedules", "model common",
                "models", "runtime"],
    "measure": ["foundation", "datasets", "checkpoint files", "metrics", "parallel", "schedules", "model common",
                "models", "runtime", "trainer"],
    # The pure layout planner: the foundation's config structs and the pure schedules.
    "planner": ["foundation", "schedules"],
    "launch": ["foundation", "datasets", "checkpoint files", "metrics", "parallel", "schedules", "model common",
               "models", "runtime", "trainer", "measure", "planner"],
    "tools": ["foundation", "datasets", "checkpoint files", "metrics", "parallel", "schedules", "model common",
              "model families", "models", "runtime", "trainer", "measure", "planner", "launch"],
}
FOLDER_LAYER = {folder: name for name, folders in LAYERS for folder in folders}
SOURCE_DIRS = sorted({folder.split("/")[0] for folder in FOLDER_LAYER})
CODE = (".h", ".cpp", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    folder = os.path.dirname(path)
    here = folder
    while here:
        if here in FOLDER_LAYER:
            split = any(f.startswith(here + "/") for f in FOLDER_LAYER)
            if here != folder and split:
                return None  # a subfolder of a folder split into layers, not listed itself
            return FOLDER_LAYER[here]
        here = os.path.dirname(here)
    return None


def sources(root):
    for top in SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for f in sorted(filenames):
                if f.endswith(CODE):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def resolve(root, src, name):
    """The repository path an include names, or None (a system or generated header)."""
    for base in ("", os.path.dirname(src)):
        cand = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def include_violations(root):
    out = []
    for src in sources(root):
        mine = layer_of(src)
        if mine is None:
            out.append(f"{src}: no layer claims this file (add its folder to LAYERS in tests/layering/check_layers.py)")
            continue
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = resolve(root, src, m.group(1))
                if target is None:
                    continue
                theirs = layer_of(target)
                if theirs is None or theirs == mine or theirs in ALLOWED[mine]:
                    continue
                allowed = ", ".join(ALLOWED[mine]) or "nothing else of Trident"
                out.append(f"{src}:{lineno}: includes {target} ({theirs}): the {mine} layer may include only "
                           f"itself and {allowed} (layers only point down: ARCHITECTURE.md)")
    return out


TARGET = re.compile(r"\badd_(?:library|executable)\s*\(([^)]*)\)", re.S)


def cmake_violations(root):
    """A folder's targets compile only that folder's files."""
    out = []
    for top in SOURCE_DIRS:
        if top == "tests":
            continue
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            for f in sorted(filenames):
                if f != "CMakeLists.txt" and not f.endswith(".cmake"):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                text = open(path, encoding="utf-8").read()
                for m in TARGET.finditer(text):
                    lineno = text.count("\n", 0, m.start()) + 1
                    for token in m.group(1).split():
                        if "PROJECT_SOURCE_DIR" in token or ".." in token or (token.endswith(".cpp") and "/" in token):
                            out.append(f"{rel}:{lineno}: target compiles {token}, a file outside {os.path.dirname(rel)}/"
                                       " (each folder builds its own library from its own files)")
    return out


def check(root):
    return include_violations(root) + cmake_violations(root)


def self_test():
    """Each kind of violation in a small tree is reported with its file and line."""
    cases = {
        "core/optimizer.h": '#pragma once\n#include "parallel/param.h"\n',  # foundation -> parallel
        "parallel/param.h": "#pragma once\n",
        "schedules/action.h": '#include <vector>\n\n#include "core/config.h"\n',  # pure schedules -> foundation
        "core/config.h": "#pragma once\n",
        "datasets/tokenizer.h": '#include "core/config.h"\n',  # fine: datasets -> foundation
        "core/config_data.cpp": '#include "datasets/megatron_dataset.h"\n',  # foundation -> datasets
        "datasets/megatron_dataset.h": "",
        "checkpoint/safetensors.h": '#include "metrics/metrics.h"\n',  # checkpoint files -> metrics (beside it)
        "metrics/metrics.h": "",
        "runtime/timeline.h": '#include "metrics/metrics.h"\n#include "datasets/megatron_dataset.h"\n',  # 2nd bad
        "models/gpt/gpt.cpp": '#include "runtime/executor.h"\n',  # a model family -> runtime
        "framework/trainer.cpp": '#include "models/registry.h"\n#include "models/gpt/gpt.h"\n',  # trainer -> a family
        "framework/trainer.h": '#include "measure/calibrate.h"\n',  # trainer -> measure (above it)
        "measure/calibrate.h": '#include "framework/trainer.h"\n',  # fine: measure -> trainer
        "models/registry.h": '#include "models/gpt/gpt.h"\n',  # fine: the registry names the families
        "models/gpt/gpt.h": '#include "models/common/plan.h"\n',  # fine: a family uses the shared parts
        "models/common/plan.h": "",
        "models/mistral/mistral.h": "",  # a family folder no layer lists
        "runtime/executor.h": '#include "models/common/model.h"\n',  # fine: runtime -> model interface
        "runtime/pipeline_measure.h": '#include "framework/trainer.h"\n',  # runtime -> trainer
        "models/common/model.h": '#include "core/param.h"\n',  # fine
        "core/param.h": "",
        "launch/cmd.cpp": '#include "benchmarks/bench.h"\n',  # launch -> tools
        "benchmarks/bench.h": "",
        "tests/unit/test_x.cpp": '#include "launch/cmd.cpp"\n#include "models/gpt/gpt.h"\n',  # fine: tools
        "stray/x.cpp": "",  # not scanned: stray/ is no source folder
        "core/CMakeLists.txt": "add_library(x STATIC a.cpp\n  ${PROJECT_SOURCE_DIR}/parallel/y.cpp)\n",
        "models/CMakeLists.txt": "add_library(m STATIC registry.cpp gpt/gpt.cpp)\n",  # a subfolder's file
    }
    expected = [
        "core/optimizer.h:2: includes parallel/param.h (parallel)",
        "core/config_data.cpp:1: includes datasets/megatron_dataset.h (datasets)",
        "checkpoint/safetensors.h:1: includes metrics/metrics.h (metrics)",
        "runtime/timeline.h:2: includes datasets/megatron_dataset.h (datasets)",
        "schedules/action.h:3: includes core/config.h (foundation)",
        "models/gpt/gpt.cpp:1: includes runtime/executor.h (runtime)",
        "framework/trainer.cpp:2: includes models/gpt/gpt.h (model families)",
        "framework/trainer.h:1: includes measure/calibrate.h (measure)",
        "models/mistral/mistral.h: no layer claims this file",
        "runtime/pipeline_measure.h:1: includes framework/trainer.h (trainer)",
        "launch/cmd.cpp:1: includes benchmarks/bench.h (tools)",
        "core/CMakeLists.txt:1: target compiles ${PROJECT_SOURCE_DIR}/parallel/y.cpp",
        "models/CMakeLists.txt:1: target compiles gpt/gpt.cpp",
    ]
    with tempfile.TemporaryDirectory() as root:
        for path, text in cases.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        found = check(root)
        failures = [e for e in expected if not any(v.startswith(e) for v in found)]
        extra = [v for v in found if not any(v.startswith(e) for e in expected)]
    for e in failures:
        print(f"self-test: not reported: {e}")
    for v in extra:
        print(f"self-test: reported wrongly: {v}")
    if failures or extra:
        return 1
    print(f"self-test: all {len(expected)} violations reported with file and line, nothing else")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[1]
    found = check(root)
    for v in found:
        print(v)
    n = sum(1 for _ in sources(root))
    if found:
        print(f"{len(found)} violation(s) of the layering in {n} source files")
        return 1
    print(f"{n} source files: every include points down or sideways within its layer; "
          "every folder compiles only its own files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
