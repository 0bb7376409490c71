#!/usr/bin/env python3
"""Families by their features (NOTE [model features] in core/config.h).

Fails naming the file and line of every `arch ==` or `arch !=` test in the
C++ sources outside the families' rule files (models/<family>/<family>_rules.cpp)
and the registry (models/registry.cpp): everything else reads what a family's
blocks have from its features, so a new family is one rules file, one
Hugging Face table and its tests.

  check_family_names.py SOURCE_DIR   check the tree (exit 1 on a test found)
  check_family_names.py --self-test  check that a planted test is caught
"""
import os
import re
import sys
import tempfile

TEST = re.compile(r"arch (==|!=)")
SOURCE_DIRS = ["core", "datasets", "checkpoint", "metrics", "parallel", "schedules", "models", "runtime", "framework",
               "measure", "planner", "launch", "benchmarks"]


def allowed(path):
    parts = path.split(os.sep)
    if path == os.path.join("models", "registry.cpp"):
        return True
    return len(parts) == 3 and parts[0] == "models" and parts[2] == parts[1] + "_rules.cpp"


def violations(root):
    out = []
    for top in SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for f in sorted(filenames):
                if not f.endswith((".cpp", ".h")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                if allowed(rel):
                    continue
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
                    for lineno, line in enumerate(fh, 1):
                        if TEST.search(line):
                            out.append(f"{rel}:{lineno}: tests model.arch by name ({line.strip()}); read the "
                                       "family's features instead (NOTE [model features] in core/config.h)")
    return out


def self_test():
    with tempfile.TemporaryDirectory() as root:
        files = {
            "planner/step.cpp": 'bool tied = m.arch == "gpt";\n',  # caught
            "models/llama/llama_rules.cpp": 'if (m.arch != "llama") {}\n',  # a rules file: fine
            "models/registry.cpp": 'if (cfg.model.arch == "gpt") {}\n',  # the registry: fine
            "models/llama/hf_llama.cpp": 'if (cfg.arch != m.arch) {}\n',  # caught
            "models/llama/notes_rules.cpp": 'if (m.arch == "x") {}\n',  # not the family's own rules file: caught
        }
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as fh:
                fh.write(text)
        got = [v.split(":")[0] for v in violations(root)]
        want = ["models/llama/hf_llama.cpp", "models/llama/notes_rules.cpp", "planner/step.cpp"]
        if sorted(got) != want:
            print(f"self-test: caught {got}, expected {want}")
            return 1
    print("self-test: each planted test is caught, the rules files and the registry are not")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    found = violations(sys.argv[1])
    for v in found:
        print(v)
    if found:
        print(f"{len(found)} model.arch test(s) outside the families' rules files and the registry")
        return 1
    print("no model.arch test outside the families' rules files and the registry")
    return 0


if __name__ == "__main__":
    sys.exit(main())
