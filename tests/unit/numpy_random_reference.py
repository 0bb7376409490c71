#!/usr/bin/env python3
"""numpy's legacy RandomState draws, one case a line, for tests/unit/test_numpy_random.cpp,
which computes the same cases with trident::data::NumpyRandomState and compares the lines.

  raw SEED:       the first 1300 32-bit outputs (two MT19937 state refills) of RandomState(SEED)
  rawkey K1,K2..: the same for RandomState(numpy.array([K1, K2, ...], dtype=uint32)) (init_by_array)
  randint SEED LOW HIGH: 40 draws of RandomState(SEED).randint(LOW, HIGH) (int64)
  shuffle SEED N: RandomState(SEED).shuffle(numpy.arange(N)), then the same state's
                  shuffle of arange(N // 2 + 1) as uint32 (Megatron's order of draws: the
                  document index, then the shuffle index)
"""
import numpy as np

SEEDS = [0, 1, 42, 1234, 2**31, 2**32 - 1]
KEYS = [[0], [1, 2, 3], [0x123, 0x234, 0x345, 0x456], list(range(700))]
RANGES = [(0, 1), (0, 2), (0, 10), (-7, 1000), (0, 2**31), (0, 2**32), (5, 2**32 + 7), (-(2**40), 2**40)]
SIZES = [0, 1, 2, 3, 10, 1000, 70000]


def line(tag, values):
    print(tag + ": " + " ".join(str(int(v)) for v in values))


for s in SEEDS:
    line(f"raw {s}", np.random.RandomState(s).randint(0, 2**32, size=1300, dtype=np.uint32))
for k in KEYS:
    rs = np.random.RandomState(np.array(k, dtype=np.uint32))
    line("rawkey " + ",".join(str(v) for v in k), rs.randint(0, 2**32, size=1300, dtype=np.uint32))
for s in SEEDS[:4]:
    for lo, hi in RANGES:
        rs = np.random.RandomState(s)
        line(f"randint {s} {lo} {hi}", [rs.randint(lo, hi) for _ in range(40)])
for s in SEEDS:
    for n in SIZES:
        rs = np.random.RandomState(s)
        a = np.arange(n, dtype=np.int32)
        rs.shuffle(a)
        b = np.arange(n // 2 + 1, dtype=np.uint32)
        rs.shuffle(b)
        line(f"shuffle {s} {n}", list(a) + list(b))
