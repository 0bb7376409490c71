#!/usr/bin/env python3
"""CTest NoteLength (label unit): every NOTE block is at most 15 lines.

A NOTE block starts at a comment line `// NOTE [name]` or `# NOTE [name]` (the comment
marker, then `NOTE [`) in a *.cpp, *.h, *.cmake, *.py or *.sh file tracked by git outside
tests/reference/text/; it runs over the following lines that start (after whitespace) with
the same marker and are not the start of another NOTE. A block states what holds and why;
measurements live in benchmarks/results/ and history in commit messages. Fails naming
file:line, the NOTE's name and its length for each block over 15 lines.

  check_note_length.py ROOT
  check_note_length.py --self-test    plants blocks of 15 and 16 lines
"""
import os
import re
import subprocess
import sys
import tempfile

LIMIT = 15
SUFFIXES = (".cpp", ".h", ".cmake", ".py", ".sh")
EXCLUDED = "tests/reference/text/"
START = re.compile(r"^\s*(?P<marker>//|#)\s*NOTE \[(?P<name>[^\]]+)\]")


def tracked_files(root):
    run = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True)
    return [f for f in run.stdout.splitlines()
            if f.endswith(SUFFIXES) and not f.startswith(EXCLUDED)]


def note_blocks(path):
    """(line, name, length) of each NOTE block in the file at path."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = START.match(lines[i])
        if not m:
            i += 1
            continue
        marker, j = m["marker"], i + 1
        while j < len(lines) and lines[j].lstrip().startswith(marker) and not START.match(lines[j]):
            j += 1
        blocks.append((i + 1, m["name"], j - i))
        i = j
    return blocks


def long_notes(root):
    found = []
    for rel in tracked_files(root):
        path = os.path.join(root, rel)
        if os.path.isfile(path):
            found += [(rel, line, name, n) for line, name, n in note_blocks(path) if n > LIMIT]
    return found


def check(root):
    failures = [f"{rel}:{line}: NOTE [{name}] is {n} lines (limit {LIMIT})"
                for rel, line, name, n in long_notes(root)]
    for f in failures:
        print(f)
    if not failures:
        print(f"every NOTE block is at most {LIMIT} lines")
    return 1 if failures else 0


def self_test():
    def block(name, n):
        return [f"// NOTE [{name}] first line"] + [f"// line {k}" for k in range(2, n + 1)]

    with tempfile.TemporaryDirectory() as root:
        subprocess.run(["git", "init", "-q", root], check=True)
        src = os.path.join(root, "a.h")
        with open(src, "w") as f:
            f.write("\n".join(["#pragma once"] + block("fifteen", 15) + ["int x;"]) + "\n")
        subprocess.run(["git", "add", "a.h"], cwd=root, check=True)
        if check(root) != 0:
            print("self-test: a 15-line NOTE failed")
            return 1
        with open(src, "a") as f:
            f.write("\n".join(block("sixteen", 16) + ["# NOTE [py] 1"] + ["# x"] * 3) + "\n")
        found = {(name, n) for _, _, name, n in long_notes(root)}
        if found != {("sixteen", 16)} or check(root) == 0:
            print(f"self-test: a 16-line NOTE was not the one failure: {sorted(found)}")
            return 1
    print("self-test passed")
    return 0


def main(argv):
    if argv[1:2] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print(__doc__)
        return 2
    return check(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
