#!/usr/bin/env python3
"""The bad-input table (CTest label `badinput`, issue 30): each case runs one
`trident` command line that a user could type wrongly and asserts its exit
status (NOTE [exit statuses] in launch/options.h: 2 bad input, 1 a failure or
a difference), the words its one-line error must hold, no stack trace, and that
it errs within seconds (sizes are refused before anything is allocated).

usage: badinput.py BUILD_DIR SOURCE_DIR [--only NAME_SUBSTRING] [--list]
"""
import os
import shlex
import subprocess
import sys
import tempfile
import time

TRACE_MARKS = ("frame #", "Exception raised from", "terminate called", "Traceback", "std::bad_alloc")
MAX_SECONDS = 20  # a size check errs in about a second; an allocation takes minutes


def cases(work, cores):
    tiny = "train --config configs/gpt-tiny.toml --set training.steps=2 --set"
    # name, expected status, command (after `trident`), words the error line holds
    return [
        # Item 2: every float key finite and in range; timeouts bounded.
        ("lr inf", 2, f"{tiny} training.lr=inf", ["training.lr = inf", "finite number > 0"]),
        ("lr nan", 2, f"{tiny} training.lr=nan", ["training.lr = nan", "finite number > 0"]),
        ("init_std inf", 2, f"{tiny} model.init_std=inf", ["model.init_std = inf", "finite"]),
        ("layernorm_eps inf", 2, f"{tiny} model.layernorm_eps=inf", ["model.layernorm_eps = inf", "finite"]),
        ("adam eps inf", 2, f"{tiny} training.eps=inf", ["training.eps = inf", "finite"]),
        ("rope_theta inf", 2, f"{tiny} model.rope_theta=inf", ["model.rope_theta = inf", "finite"]),
        ("timeout inf", 2, f"{tiny} parallel.timeout_s=inf", ["parallel.timeout_s = inf", "[1, 1000000]"]),
        ("timeout 1e300", 2, f"{tiny} parallel.timeout_s=1e300", ["parallel.timeout_s = 1e+300", "[1, 1000000]"]),
        ("timeout 1e-9", 2, f"{tiny} parallel.timeout_s=1e-9", ["parallel.timeout_s = 1e-09", "[1, 1000000]"]),
        ("bucket 1e30", 2, f"{tiny} parallel.dp_bucket_mb=1e30", ["parallel.dp_bucket_mb", "(0, 1048576]"]),
        # Item 1: sizes and threads before anything is allocated.
        ("threads 100000", 2, f"{tiny} training.threads=100000", ["training.threads = 100000", "[1, 1024]"]),
        ("threads over cores", 2, f"{tiny} training.threads={cores + 1}",
         [f"training.threads = {cores + 1}", f"{cores} cores"]),
        ("layers 1e9", 2, f"{tiny} model.layers=1000000000", ["model.layers = 1000000000", "host memory", "MemTotal"]),
        ("layers int64 max", 2, f"{tiny} model.layers=9223372036854775807", ["model.layers (9223372036854775807)", "overflow int64"]),
        ("hidden 1e6 layers 1000", 2, f"{tiny} model.hidden=1000000 --set model.layers=1000",
         ["model.hidden = 1000000", "host memory"]),
        ("hidden 2^31", 2, f"{tiny} model.hidden=2147483648", ["model.hidden (2147483648)", "overflow int64"]),
        ("batch 1e9", 2, f"{tiny} training.global_batch_size=1000000000 --set training.micro_batch_size=1000000000",
         ["host memory", "training.micro_batch_size x model.seq_len x model.vocab_size"]),
        ("synthetic tokens 1e12", 2, f"{tiny} data.synthetic_tokens=1000000000000",
         ["host memory", "data.synthetic_tokens"]),
        ("schedule p=m=100000", 2, "schedule --kind 1f1b -p 100000 -m 100000 --format summary",
         ["p=100000 m=100000", "compute slots, expected at most 33554432"]),
        # parallel.backend: the nccl-rules test backend is for the CPU only.
        ("nccl-rules on cuda", 2, f"{tiny} parallel.backend=nccl-rules --set training.device=cuda",
         ['parallel.backend = "nccl-rules"', 'needs training.device = "cpu"']),
        ("unknown backend", 2, f"{tiny} parallel.backend=mpi", ['parallel.backend = "mpi"', "nccl-rules"]),
        # Already handled: config and command-line mistakes.
        ("unknown key", 2, f"{tiny} training.stepz=3", ["unknown key training.stepz"]),
        ("set without =", 2, f"{tiny} training.steps", ["--set training.steps: expected section.key=value"]),
        ("missing config", 2, "train --config no/such.toml", ["cannot open config file 'no/such.toml'"]),
        ("train without config", 2, "train", ["--config FILE is required"]),
        ("unknown option", 2, "train --bogus", ["bogus"]),
        ("unknown command", 2, "trian", ["unknown command 'trian'"]),
        ("schedule bad format", 2, "schedule --kind 1f1b -p 2 -m 4 --format pdf", ["--format 'pdf'"]),
        ("schedule unknown kind", 2, "schedule --kind 2f2b -p 2 -m 4", ["2f2b"]),
        ("launch without --", 2, "launch --nproc-per-node 1 true", ["missing `--`"]),
        ("data info missing file", 2, f"data info {work}/none.bin", ["none.bin"]),
        ("data batches without --steps", 2, "data batches --config configs/gpt-tiny.toml", ["--steps N is required"]),
        ("data batches missing dataset", 2, "data batches --config configs/gpt-tiny.toml --steps 1 --set "
         f"data.source=file --set data.format=megatron --set data.path={work}/none", [f"{work}/none.idx"]),
        ("compare malformed", 2, f"compare {work}/bad {work}/a", ["bad/metrics.jsonl:2: not a flat JSON object"]),
        ("compare missing run", 2, f"compare {work}/none {work}/a", ["cannot open"]),
        # Item 5: a difference is 1, not 2.
        ("compare differ", 1, f"compare {work}/a {work}/b", []),
    ]


def main():
    args = sys.argv[1:]
    only = None
    if "--only" in args:
        i = args.index("--only")
        only = args[i + 1]
        del args[i:i + 2]
    listing = "--list" in args
    args = [a for a in args if a != "--list"]
    build, source = args[0], args[1]
    trident = os.path.join(build, "trident")
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="badinput-") as work:
        row = '{"step": 1, "loss": %s, "grad_norm": 1.0}'
        for d, rows in (("a", [row % "5.0"]), ("b", [row % "6.0"]), ("bad", [row % "5.0", '{"step": 2, "lo'])):
            os.makedirs(os.path.join(work, d))
            with open(os.path.join(work, d, "metrics.jsonl"), "w") as f:
                f.write("\n".join(rows) + "\n")
        table = [c for c in cases(work, cores) if only is None or only in c[0]]
        if listing:
            for name, status, cmd, words in table:
                print(f"{name}: exit {status}: trident {cmd}")
            return 0
        failures = []
        start = time.monotonic()
        for name, status, cmd, words in table:
            t0 = time.monotonic()
            try:
                r = subprocess.run([trident] + shlex.split(cmd), cwd=source, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, timeout=MAX_SECONDS * 3,
                                   env=dict(os.environ, TRIDENT_RDZV_TIMEOUT_S="10"))
                out, rc = r.stdout.decode(errors="replace"), r.returncode
            except subprocess.TimeoutExpired as e:
                out, rc = (e.stdout or b"").decode(errors="replace"), "timeout"
            secs = time.monotonic() - t0
            problems = []
            if rc != status:
                problems.append(f"exit {rc}, expected {status}")
            lines = [l for l in out.splitlines() if l.strip()]
            if words and not any(all(w in l for w in words) for l in lines):
                problems.append(f"no one line holds all of {words}")
            for mark in TRACE_MARKS:
                if mark in out:
                    problems.append(f"a stack trace ({mark!r})")
            if status == 2 and len(lines) > 2:
                problems.append(f"{len(lines)} lines, expected one error line")
            if secs > MAX_SECONDS:
                problems.append(f"took {secs:.1f} s, expected under {MAX_SECONDS} s")
            verdict = "ok  " if not problems else "FAIL"
            print(f"{verdict} {secs:5.2f}s exit {rc}  {name}: trident {cmd}")
            if problems:
                failures.append(name)
                print("       " + "; ".join(problems))
                print("       output: " + "\n               ".join(out.splitlines()[-6:]))
        total = time.monotonic() - start
        print(f"badinput: {len(table) - len(failures)} of {len(table)} cases passed in {total:.1f} s")
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
