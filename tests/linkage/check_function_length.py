#!/usr/bin/env python3
"""CTest FunctionLength (label unit): no function of the project is longer than 80 lines.

Runs lizard (PyPI, installed into .venv by scripts/setup.sh) with `-L 80` over every
C++ file of the repository outside tests/ (git's tracked and untracked-but-not-ignored
*.cpp and *.h, benchmarks/ included) and fails naming each longer function with its
file:line and length. A function named in the allow-list (function_length_allow.txt
beside this script) is let through while it is over 80 lines; once it is not, the
entry is stale and fails too. A missing lizard is a failure, never a skip.

  check_function_length.py LIZARD SOURCE_DIR [ALLOW_LIST]
  check_function_length.py --self-test LIZARD    plants functions of 80 and 81 lines
"""
import os
import re
import subprocess
import sys
import tempfile

LIMIT = 80
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ALLOW = os.path.join(HERE, "function_length_allow.txt")
# lizard -w: "FILE:LINE: warning: NAME has N NLOC, N CCN, N token, N PARAM, N length, N ND"
WARNING = re.compile(r"^(?P<file>.+?):(?P<line>\d+): warning: (?P<name>.+) has .*?\b(?P<length>\d+) length\b")


def long_functions(lizard, root, files):
    """(file, line, name, length) of each function over LIMIT lines, as lizard counts them."""
    lizard = os.path.abspath(lizard)
    if not os.path.isfile(lizard) or not os.access(lizard, os.X_OK):
        raise RuntimeError(f"lizard not found at {lizard} (scripts/setup.sh installs it into .venv "
                           "from requirements.txt)")
    # Only the length threshold can trip: CCN and parameter limits out of reach.
    cmd = [lizard, "-L", str(LIMIT), "-C", "100000", "-a", "1000", "-w", "-l", "cpp", *files]
    run = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    found, odd = [], []
    for line in run.stdout.splitlines():
        m = WARNING.match(line)
        if m:
            found.append((m["file"], int(m["line"]), m["name"], int(m["length"])))
        elif line.strip():
            odd.append(line)
    # lizard -w exits 1 when it warns; anything else (or output not understood) is an error.
    if run.returncode not in (0, 1) or odd or (run.returncode == 1) != bool(found):
        raise RuntimeError(f"{' '.join(cmd[:8])} ... exited {run.returncode}:\n" + "\n".join(odd) + run.stderr)
    return found


def project_files(root):
    cmd = ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.cpp", "*.h"]
    run = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"git ls-files in {root} failed: {run.stderr.strip()}")
    return sorted(f for f in run.stdout.splitlines()
                  if not f.startswith("tests/") and os.path.isfile(os.path.join(root, f)))


def read_allow(path):
    """Function names (one a line, '#' starts a comment) allowed over the limit for now."""
    names = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            name = line.split("#", 1)[0].strip()
            if name:
                names.append(name)
    return names


def matches(name, allowed):
    return name == allowed or name.endswith("::" + allowed)


def verdict(found, allow, allow_path):
    """Problem lines: each long function not allowed, each allow-list entry that is not long."""
    problems = []
    for file, line, name, length in found:
        if not any(matches(name, a) for a in allow):
            problems.append(f"{file}:{line}: {name} is {length} lines long (at most {LIMIT}: split it by idea)")
    for a in allow:
        if not any(matches(name, a) for _, _, name, _ in found):
            problems.append(f"{allow_path}: {a} is allowed over {LIMIT} lines but no such function is: "
                            "remove it from the allow-list")
    return problems


def check(lizard, root, allow_path):
    files = project_files(root)
    found = long_functions(lizard, root, files)
    problems = verdict(found, read_allow(allow_path), os.path.relpath(allow_path, root))
    for p in problems:
        print(p)
    if problems:
        print(f"FAIL: {len(problems)} problem(s) with function length in {len(files)} C++ files (lizard -L {LIMIT})")
        return 1
    allowed = ", ".join(f"{name} ({length})" for _, _, name, length in found) or "none"
    print(f"{len(files)} C++ files outside tests/: every function is at most {LIMIT} lines "
          f"(allow-listed: {allowed})")
    return 0


def self_test(lizard):
    """A planted 81-line function fails, named with file:line and length; 80 lines pass;
    an allow-listed long function passes and a stale allow-list entry fails."""
    def function(name, lines):  # `lines` lines from the signature to the closing brace
        body = "".join(f"  x += {i};\n" for i in range(lines - 3))
        return f"int {name}(int x) {{\n{body}  return x;\n}}\n"

    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "core"))
        os.makedirs(os.path.join(root, "tests"))
        with open(os.path.join(root, "core", "a.cpp"), "w") as f:
            f.write("namespace n {\n" + function("fits", 80) + "\n" + function("too_long", 81) + "}\n")
        with open(os.path.join(root, "core", "b.h"), "w") as f:
            f.write(function("owned", 90))
        with open(os.path.join(root, "tests", "t.cpp"), "w") as f:
            f.write(function("in_tests", 200))  # tests/ is not checked
        subprocess.run(["git", "init", "-q", root], check=True)
        found = long_functions(lizard, root, project_files(root))
        allow = ["owned", "gone"]
        problems = verdict(found, allow, "allow.txt")
    expected = [
        "core/a.cpp:83: n::too_long is 81 lines long",
        "allow.txt: gone is allowed over 80 lines but no such function is",
    ]
    missing = [e for e in expected if not any(p.startswith(e) for p in problems)]
    extra = [p for p in problems if not any(p.startswith(e) for e in expected)]
    for e in missing:
        print(f"self-test: not reported: {e}")
    for p in extra:
        print(f"self-test: reported wrongly: {p}")
    if missing or extra:
        return 1
    print(f"self-test: the 81-line function and the stale entry reported, the 80-line, allow-listed "
          f"and tests/ functions not")
    return 0


def main(argv):
    try:
        if len(argv) == 3 and argv[1] == "--self-test":
            return self_test(argv[2])
        if len(argv) in (3, 4):
            return check(argv[1], argv[2], argv[3] if len(argv) == 4 else DEFAULT_ALLOW)
    except (RuntimeError, OSError) as e:
        print(f"FAIL: {e}")
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
