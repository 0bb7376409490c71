#!/usr/bin/env python3
"""CTest TorchPrecompiledHeader (label unit): NOTE [torch precompiled header] holds.

Every unit the build compiles against libtorch's headers uses the one precompiled
header (its command has `-include .../trident_torch_pch.dir/cmake_pch.hxx`), except
the units of the shared libraries the configure names as compiled without it
(build/torch_pch_targets.txt, written by cmake/TorchPch.cmake). A configure that
finds no target linking libtorch (as when the recognition of what a target links
broke and every unit parsed libtorch's headers again) fails here, naming the units.

Usage: check_pch.py BUILD_DIR
"""
import json
import re
import sys


def main(build: str) -> int:
    try:
        with open(f"{build}/compile_commands.json") as f:
            units = json.load(f)
        with open(f"{build}/torch_pch_targets.txt") as f:
            lines = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    except OSError as e:
        print(f"FAIL: {e} (configure the build first: scripts/setup.sh)")
        return 1
    with_pch = set(lines.get("with", "").split())
    without = set(lines.get("without", "").split())
    problems = []
    if not with_pch:
        problems.append("the configure precompiled libtorch's headers for no target (torch_pch_targets.txt)")
    torch_units = 0
    for u in units:
        cmd = u.get("command") or " ".join(u.get("arguments", []))
        if "/torch/include" not in cmd:
            continue  # a pure unit: it never sees libtorch's headers
        torch_units += 1
        m = re.search(r"CMakeFiles/([^/ ]+)\.dir/", cmd)
        target = m.group(1) if m else "?"
        if target == "trident_torch_pch" or target in without:
            continue
        if "trident_torch_pch.dir/cmake_pch.hxx" not in cmd:
            problems.append(f"{u['file']} (target {target}) parses libtorch's headers without the precompiled one")
        elif target not in with_pch:
            problems.append(f"{u['file']}: target {target} uses the header but the configure did not list it")
    if torch_units == 0:
        problems.append("compile_commands.json has no unit with libtorch's include path")
    for p in problems[:20]:
        print("FAIL:", p)
    if len(problems) > 20:
        print(f"FAIL: ... and {len(problems) - 20} more")
    if problems:
        return 1
    print(f"ok: {torch_units} units against libtorch, {len(with_pch)} targets use the precompiled header; "
          f"without it (shared): {' '.join(sorted(without)) or 'none'}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
