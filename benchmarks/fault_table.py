#!/usr/bin/env python3
"""The fault table of launch/README.md ("Restarts"): each fault scenario once,
under `trident launch --max-restarts` and under `torchrun --max-restarts`,
gpt-tiny as pp = 2 on 2 ranks (16 steps, a checkpoint every 5, synchronous or asynchronous, the fault on
rank 1 once rank 0 has logged step 7), every output line timestamped on
arrival. Writes benchmarks/results/fault_table.md (date, load, command).

    benchmarks/fault_table.py build          # BUILD_DIR; about 3 minutes on 2 cores

Columns (seconds, from the merged output of launcher and ranks):
  detection  the fault (the rank's "injects" line, or the signal sent) to the
             launcher's first line about a failure (trident launch: "rank R ...
             exited/was killed"; torchrun: "failed (exitcode"), or to
             "preempted" for a signal
  restart    that line to the restarted job's "checkpoint: resumed from"
  recomputed the last step logged before the fault minus the step resumed from
  checkpoints sync, or async (checkpoint.async: interval saves written on a
             background thread; the uninterrupted run saves synchronously)
  identical  the final checkpoint's tensors and AdamW step, byte for byte, against
             an uninterrupted run (what tests/multiproc/restart_util.h compares)
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 16


def train_args(build, ck, log, extra=()):
    return [f"{build}/trident", "train", "--config", f"{REPO}/configs/gpt-tiny.toml",
            "--set", f"training.steps={STEPS}", "--set", "parallel.pp=2", "--set", "parallel.backend=nccl-rules",
            "--set", "checkpoint.interval=5", "--set", "checkpoint.resume=true", "--set", "logging.progress=false",
            "--set", "training.peak_tflops=1", "--set", "parallel.timeout_s=5",
            "--set", f"checkpoint.dir={ck}", "--set", f"logging.dir={log}", *extra]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher(kind, build, max_restarts=2):
    if kind == "trident launch":
        return [f"{build}/trident", "launch", "--nproc-per-node", "2", "--master-port", "0",
                "--max-restarts", str(max_restarts), "--"]
    return [f"{REPO}/.venv/bin/torchrun", "--nproc-per-node", "2", "--master-port", str(free_port()),
            "--max-restarts", str(max_restarts), "--monitor-interval", "0.1", "--no-python"]


def run_timed(cmd, env, on_line=None, bound=240):
    """Runs cmd; returns (status, [(t, line)]) with t seconds since the start."""
    start = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    lines = []
    for line in p.stdout:
        t = time.monotonic() - start
        if t > bound:
            os.killpg(p.pid, signal.SIGKILL)
            raise SystemExit(f"fault_table: {' '.join(cmd[:3])} ran past {bound} s")
        lines.append((t, line.rstrip("\n")))
        if on_line:
            on_line(p, t, line)
    return p.wait(), lines


def first(lines, pattern, after=-1.0):
    rx = re.compile(pattern)
    for t, line in lines:
        if t > after and rx.search(line):
            return t, line
    return None, None


def same_checkpoint(a, b):
    for r in range(2):
        ja = json.load(open(f"{a}/rank-{r:05d}.json"))
        jb = json.load(open(f"{b}/rank-{r:05d}.json"))
        ba = open(f"{a}/rank-{r:05d}.bin", "rb").read()
        bb = open(f"{b}/rank-{r:05d}.bin", "rb").read()
        if ja["entries"] != jb["entries"] or ja["meta"]["extra"] != jb["meta"]["extra"]:
            return False
        for e in ja["entries"]:
            o, n = e["byte_offset"], e["nbytes"]
            if ba[o:o + n] != bb[o:o + n]:
                return False
    return True


def last_step_before(lines, t_end):
    steps = [int(m.group(1)) for t, l in lines if t <= t_end for m in [re.search(r"step (\d+)/\d+ \|", l)] if m]
    return max(steps) if steps else 0


def fault_scenario(build, tmp, name, kind, fault, full_ck, saves="sync"):
    d = tempfile.mkdtemp(dir=tmp)
    env = dict(os.environ, TRIDENT_FAULT=f"rank=1,step=7,kind={fault}", OMP_NUM_THREADS="1")
    extra = ["--set", "checkpoint.async=true"] if saves == "async" else []
    status, lines = run_timed(launcher(kind, build) + train_args(build, f"{d}/ck", f"{d}/run", extra), env)
    t_fault, _ = first(lines, r"injects")
    detect_rx = r"trident launch: rank \d+ on node \d+ \(pid \d+\) (exited|was killed)" if kind == "trident launch" \
        else r"failed \(exitcode"
    t_detect, _ = first(lines, detect_rx, t_fault or 0)
    t_resumed, resumed_line = first(lines, r"checkpoint: resumed from", t_detect or 0)
    resumed = int(re.search(r"\(step (\d+)", resumed_line).group(1)) if resumed_line else None
    last = last_step_before(lines, t_detect or 0)
    final = f"{d}/ck/step-{STEPS:08d}"
    ok = status == 0 and os.path.exists(final) and same_checkpoint(full_ck, final)
    return [name, kind, saves, fmt(t_detect, t_fault), fmt(t_resumed, t_detect),
            str(last - resumed) if resumed is not None else "–", "yes" if ok else f"no (status {status})"]


def preempt_scenario(build, tmp, full_ck):
    """SIGTERM to `trident launch` once step 7 is logged, then the same command again."""
    d = tempfile.mkdtemp(dir=tmp)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    sent = {}

    def on_line(p, t, line):
        if not sent and re.search(r"step 7/\d+ \|", line):
            sent["t"] = t
            os.kill(p.pid, signal.SIGTERM)

    cmd = launcher("trident launch", build, 0) + train_args(build, f"{d}/ck", f"{d}/run")
    status, lines = run_timed(cmd, env, on_line)
    t_pre, line = first(lines, r"trident launch: preempted by SIGTERM, checkpoint at step (\d+)")
    saved = int(re.search(r"step (\d+)", line).group(1)) if line else None
    last = last_step_before(lines, t_pre or 0)
    status2, lines2 = run_timed(cmd, env)
    t_res, _ = first(lines2, r"checkpoint: resumed from")
    final = f"{d}/ck/step-{STEPS:08d}"
    ok = status == 128 + signal.SIGTERM and status2 == 0 and same_checkpoint(full_ck, final)
    return ["job sent SIGTERM (preempted), then the command run again", "trident launch", "sync",
            fmt(t_pre, sent.get("t")), f"{t_res:.1f} (a new command)" if t_res else "–",
            str(last - saved) if saved is not None else "–", "yes" if ok else f"no (status {status}, {status2})"]


def fmt(t, since):
    return f"{t - since:.2f}" if t is not None and since is not None else "–"


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    build = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="trident-fault-table-") as tmp:
        full = f"{tmp}/full"
        status, _ = run_timed(launcher("trident launch", build, 0) + train_args(build, f"{full}/ck", f"{full}/run"),
                              dict(os.environ, OMP_NUM_THREADS="1"))
        if status != 0:
            raise SystemExit("fault_table: the uninterrupted run failed")
        full_ck = f"{full}/ck/step-{STEPS:08d}"
        rows = []
        for kind in ("trident launch", "torchrun"):
            rows.append(fault_scenario(build, tmp, "rank SIGKILLed after step 7", kind, "kill", full_ck))
            rows.append(fault_scenario(build, tmp, "rank stalled (SIGSTOP) after step 7", kind, "stall", full_ck))
            rows.append(fault_scenario(build, tmp, "rank exits 0 early after step 7", kind, "exit0", full_ck))
            rows.append(fault_scenario(build, tmp, "rank SIGKILLed after step 7", kind, "kill", full_ck, "async"))
            rows.append(fault_scenario(build, tmp, "rank stalled (SIGSTOP) after step 7", kind, "stall", full_ck,
                                       "async"))
        rows.append(preempt_scenario(build, tmp, full_ck))
    out = os.path.join(REPO, "benchmarks", "results", "fault_table.md")
    load = os.getloadavg()
    with open(out, "w") as f:
        f.write(f"# Fault table: `benchmarks/fault_table.py build`\n\n"
                f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load[0]:.1f} "
                f"(2 cores); gpt-tiny pp = 2 on 2 ranks, {STEPS} steps, checkpoint.interval 5, "
                f"parallel.timeout_s 5, --max-restarts 2; times in seconds.\n\n"
                "| scenario | launcher | checkpoints | detection | restart | steps recomputed | "
                "final state bit-identical |\n"
                "|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write("| " + " | ".join(r) + " |\n")
    print(open(out).read())


if __name__ == "__main__":
    main()
