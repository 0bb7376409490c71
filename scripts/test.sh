#!/usr/bin/env bash
# The whole test suite: set up (packages, data, build), then every CTest test:
# unit (pure and libtorch), multiproc (several ranks through the launcher) and
# regression (losses of every layout against the single-process reference).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
scripts/setup.sh
cd build
# One test at a time: multi-rank tests already use both cores.
ctest --output-on-failure --timeout 600 "$@"
