#!/usr/bin/env python3
"""Trident's simulator against the zero-bubble paper's published bubble rates.

Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024: Table 9 gives the
profiled T_F, T_B, T_W and T_comm (ms) of its 1.5B and 6.2B models at p = 8 and
m = 24, 32, 64; Table 5 the bubble rate of each schedule under them, "cost" being
the longest stage's time: bubble = (cost - m (T_F + T_B + T_W)) / cost. Trident's
B is the whole backward, so --costs is T_F, T_B + T_W, T_W.

  benchmarks/zero_bubble_paper.py --trident build/trident --out benchmarks/results/zero_bubble_paper.txt
  benchmarks/zero_bubble_paper.py --trident build/trident --check      # the `reference` test

Tolerances, and where the paper's model and the simulator differ:
  1f1b, zb-h1  |sim - published| <= 5e-5 (the published four digits): both
               count the whole step, all ranks starting together, and in both
               schedules rank 0 is busy at the start and the end, so the longest
               stage's time is the step.
  zb-h2        the paper counts ZB-H2 as the parallelogram it draws: each stage
               from its own first pass to its last (with optimizer post-validation
               a stage starts its next step when done), so the simulator's
               span_bubble_fraction (the longest rank's first-to-last compute) is
               the figure, within 5e-5. Its bubble_fraction (the whole step, ranks
               starting together) is higher on the 6.2B rows, where the (p-1)
               forwards the last rank starts late are longer than the paper's
               parallelogram idle (p-1)(T_F + T_B - 2 T_W + 2 T_comm).
  1f1b-i       Trident's interleaved with v = 3 (1.5B) and v = 4 (6.2B) chunks
               per rank: the paper's models have 22 and 30 layers (3p-2 and 4p-2,
               the first and last stage one layer lighter for the embedding and
               head; its Table 3), so 3 and 4 layer slots per stage, one per
               chunk. Relative tolerance 5 %, the simulator at or above the paper
               (2.4-4.1 % above on the six rows): the simulator gives every chunk
               the same cost (T/v), where the paper's first and last stages hold
               a lighter layer, and charges T_comm on every hop between chunks on
               the critical path, v times as many as 1F1B's; which of the two
               the paper accounts differently we cannot tell from its tables.
  zb-1p, zb-2p Trident's zb-auto with --memory-limit p and 2p (NOTE [zb-auto] in
               schedules/generators_auto.cpp: a search over a family between
               ZB-H1 and ZB-H2 with the simulator as cost model, minimising the
               paper's span bubble), counted as ZB-H2 is. ZB-1p within 5e-5 (it
               is ZB-H1, as in the paper). ZB-2p within 0.0015: at or below the
               paper on every row (the paper's greedy heuristic is not ours; our
               search ends where single moves stop helping).
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

P = 8
# model, m, T_F, T_B, T_W, T_comm, then Table 5: 1F1B, 1F1B-I, ZB-H1, ZB-H2, ZB-1p, ZB-2p
TABLE = [
    ("1.5B", 24, 18.522, 18.086, 9.337, 0.601, 0.2431, 0.1055, 0.1585, 0.1083, 0.1585, 0.0433),
    ("1.5B", 32, 18.513, 18.086, 9.331, 0.626, 0.1985, 0.0818, 0.1242, 0.0837, 0.1242, 0.0039),
    ("1.5B", 64, 18.546, 18.097, 9.321, 0.762, 0.1240, 0.0443, 0.0674, 0.0444, 0.0674, 0.0026),
    ("6.2B", 24, 29.718, 29.444, 19.927, 0.527, 0.2347, 0.0808, 0.1323, 0.0698, 0.1323, 0.0029),
    ("6.2B", 32, 29.802, 29.428, 19.530, 0.577, 0.1898, 0.0628, 0.1045, 0.0559, 0.1045, 0.0022),
    ("6.2B", 64, 29.935, 29.621, 19.388, 0.535, 0.1091, 0.0320, 0.0554, 0.0294, 0.0554, 0.0010),
]
CHUNKS = {"1.5B": 3, "6.2B": 4}  # 1F1B-I's chunks per rank (docstring)
# column, trident kind, summary field, tolerance kind, tolerance
CHECKS = [
    ("1F1B", "1f1b", "bubble_fraction", "abs", 5e-5),
    ("1F1B-I", "interleaved", "bubble_fraction", "rel_above", 0.05),
    ("ZB-H1", "zb-h1", "bubble_fraction", "abs", 5e-5),
    ("ZB-H2", "zb-h2", "span_bubble_fraction", "abs", 5e-5),
    ("ZB-1p", "zb-auto:1", "span_bubble_fraction", "abs", 5e-5),
    ("ZB-2p", "zb-auto:2", "span_bubble_fraction", "abs", 0.0015),
]
COLUMNS = ["1F1B", "1F1B-I", "ZB-H1", "ZB-H2", "ZB-1p", "ZB-2p"]


def simulate(trident, kind, row):
    model, m, tf, tb, tw, comm = row[:6]
    limit = None
    if kind.startswith("zb-auto:"):  # ZB-1p, ZB-2p: memory limit p, 2p
        kind, limit = "zb-auto", int(kind.split(":")[1]) * P
    cmd = [trident, "schedule", "--kind", kind, "-p", str(P), "-m", str(m),
           "--costs", f"{tf},{round(tb + tw, 6)},{tw}", "--latency", str(comm), "--format", "summary"]
    if kind == "interleaved":
        cmd += ["-v", str(CHUNKS[model])]
    if limit:
        cmd += ["--memory-limit", str(limit)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return " ".join(cmd[1:]), json.loads(out)


def within(kind, tol, sim, pub):
    if kind == "abs":
        return abs(sim - pub) <= tol
    return pub <= sim <= pub * (1 + tol)  # rel_above


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trident", required=True)
    ap.add_argument("--check", action="store_true", help="exit 1 when a figure is outside its tolerance")
    ap.add_argument("--out", help="write the results file here")
    a = ap.parse_args()
    lines, failures = [], []
    for row in TABLE:
        published = dict(zip(COLUMNS, row[6:]))
        for col, kind, field, tkind, tol in CHECKS:
            cmd, summary = simulate(a.trident, kind, row)
            sim, pub = summary[field], published[col]
            ok = within(tkind, tol, sim, pub)
            tol_text = f"|d| <= {tol:g}" if tkind == "abs" else f"0 <= d/pub <= {tol:g}"
            lines.append(f"{row[0]:5} m={row[1]:<3} {col:7} published {pub:.4f}  simulated {sim:.4f} ({field}; "
                         f"bubble_fraction {summary['bubble_fraction']:.4f})  {tol_text}  {'ok' if ok else 'OUTSIDE'}"
                         f"   trident {cmd}")
            if not ok:
                failures.append(lines[-1])
    if a.out:
        load = os.getloadavg()
        with open(a.out, "w") as f:
            f.write("# Trident's simulator against Qi et al., ICLR 2024, Table 5 (costs from its Table 9), p = 8\n")
            f.write(f"# written {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by "
                    f"benchmarks/zero_bubble_paper.py --trident {a.trident} --out {a.out}\n")
            f.write(f"# load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (the figures are simulated, "
                    "not timed); tolerances and differences: the script's docstring\n")
            f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if failures:
        print(f"\n{len(failures)} figure(s) outside their tolerance:\n" + "\n".join(failures), file=sys.stderr)
        return 1 if a.check else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
