#!/usr/bin/env bash
# `trident plan` against measured runs: gpt-tiny and llama-tiny layouts over world sizes 1-8 (tp, pp, dp,
# ZeRO-1, every schedule kind, recomputation), each trained for real, and predicted with the calibrated
# description of this machine (configs/clusters/local.toml, written by `trident plan calibrate`).
#  - step time: measured = the median step_time_s of metrics.jsonl over the steps after the first $SKIP
#    (a burst of other work on the 2 cores lands on single steps; the mean is shown beside it);
#    predicted = `trident plan --layout ... --profile ... --format json`'s step_s, from this machine's
#    cluster file (`trident plan calibrate`, run first unless CLUSTER names one) and each model's profile
#    (`trident plan profile`, one device, run first): one cluster and one profile per model for every row,
#    nothing fitted to the rows (cluster.devices_per_node is set to 8 so that every world size is one node).
#  - memory per pipeline rank: the predicted bytes of parameters + gradients + optimizer state +
#    activations + boundary buffers against what the run's rank-R.json reports (NOTE [rank summary]:
#    local parameters, optimizer state, peak activation and boundary bytes).
# Usage: benchmarks/plan_vs_measured.sh [BUILD_DIR]   (a directory holding `trident`; default build;
#   PLAN_BUILD from the environment: where the planning `trident` is, default BUILD_DIR; CLUSTER: the
#   cluster file, default: calibrated now; ROUNDS (default 3), STEPS (default 20; the profiles train
#   STEPS within 4-16 steps, min(ROUNDS, 3) times) and SKIP (default 2, fewer when STEPS <= 2); ONLY, an extended
#   regular expression: run only the layouts whose names match it);
#   writes benchmarks/results/plan_vs_measured.txt (or $OUT) and, beside it, plan_vs_measured.svg.
set -euo pipefail
build="${1:-build}" out="${OUT:-benchmarks/results/plan_vs_measured.txt}"
plan_build="${PLAN_BUILD:-$build}" cluster="${CLUSTER:-}"
steps="${STEPS:-20}" rounds="${ROUNDS:-3}"
skip="${SKIP:-$(( steps > 2 ? 2 : steps - 1 ))}"  # warm-up steps left out of the mean
svg="${out%.txt}.svg"
py=python3
[[ -x .venv/bin/python3 ]] && py=.venv/bin/python3
[[ -x $build/trident ]] || { echo "plan_vs_measured: $build/trident not found" >&2; exit 1; }
[[ -z $cluster || -f $cluster ]] || { echo "plan_vs_measured: $cluster not found (write it with trident plan calibrate)" >&2; exit 1; }
(( rounds >= 1 )) || { echo "plan_vs_measured: ROUNDS ($rounds) must be >= 1" >&2; exit 1; }
(( steps > skip )) || { echo "plan_vs_measured: STEPS ($steps) must exceed SKIP ($skip)" >&2; exit 1; }
tmp="$(mktemp -d)"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
trap 'rm -rf "$tmp"' EXIT
# This machine and each model, measured now: the link and host figures swing with the machine's load, so
# the runs below are predicted from figures of the same hour. Nothing here is fitted to the runs.
if [[ -z $cluster ]]; then
  cluster="$tmp/local.toml"
  "$build/trident" plan calibrate --out "$cluster" > "$tmp/calibrate.log" 2>&1 ||
    { echo "plan_vs_measured: calibrate failed:" >&2; cat "$tmp/calibrate.log" >&2; exit 1; }
fi
for model in gpt llama; do
  "$build/trident" plan profile --config "configs/$model-tiny.toml" --mbs 2,4 --out "$tmp/$model.profile.toml" \
    --steps "$(( steps < 4 ? 4 : steps > 16 ? 16 : steps ))" --repeats "$(( rounds > 3 ? 3 : rounds ))" \
    > "$tmp/$model.profile.log" 2>&1 || { echo "plan_vs_measured: profile of $model failed:" >&2; cat "$tmp/$model.profile.log" >&2; exit 1; }
done
# name | model | world | plan --layout | trident train --set ...
layouts="gpt-single-mbs2|gpt|1|mbs=2|training.micro_batch_size=2
gpt-single-mbs4|gpt|1|mbs=4|training.micro_batch_size=4
gpt-single-full|gpt|1|mbs=2,recompute=full|training.micro_batch_size=2 training.recompute=full
gpt-single-selective|gpt|1|mbs=2,recompute=selective|training.micro_batch_size=2 training.recompute=selective
gpt-pp2-1f1b|gpt|2|pp=2,mbs=2|parallel.pp=2 training.micro_batch_size=2
gpt-pp2-gpipe|gpt|2|pp=2,schedule=gpipe,mbs=2|parallel.pp=2 schedule.kind=gpipe training.micro_batch_size=2
gpt-pp2-interleaved|gpt|2|pp=2,schedule=interleaved,chunks=2,mbs=2|parallel.pp=2 schedule.kind=interleaved schedule.chunks=2 training.micro_batch_size=2
gpt-pp2-zbh1|gpt|2|pp=2,schedule=zb-h1,mbs=2|parallel.pp=2 schedule.kind=zb-h1 training.micro_batch_size=2
gpt-pp2-zbv|gpt|2|pp=2,schedule=zb-v,mbs=2|parallel.pp=2 schedule.kind=zb-v training.micro_batch_size=2
gpt-pp2-dualpipev|gpt|2|pp=2,schedule=dualpipev,mbs=2|parallel.pp=2 schedule.kind=dualpipev training.micro_batch_size=2
gpt-tp2|gpt|2|tp=2,mbs=2|parallel.tp=2 training.micro_batch_size=2
gpt-tp2-sp|gpt|2|tp=2,sp=1,mbs=2|parallel.tp=2 parallel.sequence_parallel=true training.micro_batch_size=2
gpt-dp2-zero1|gpt|2|dp=2,zero=1,mbs=2|parallel.zero=1 training.micro_batch_size=2
gpt-tp2-pp2-full|gpt|4|tp=2,pp=2,mbs=2,recompute=full|parallel.tp=2 parallel.pp=2 training.micro_batch_size=2 training.recompute=full
gpt-pp4-1f1b|gpt|4|pp=4,mbs=2|parallel.pp=4 training.micro_batch_size=2
gpt-pp2-dp4|gpt|8|pp=2,mbs=2|parallel.pp=2 training.micro_batch_size=2
llama-single-mbs2|llama|1|mbs=2|training.micro_batch_size=2
llama-pp2-1f1b|llama|2|pp=2,mbs=2|parallel.pp=2 training.micro_batch_size=2
llama-pp2-zbh1|llama|2|pp=2,schedule=zb-h1,mbs=2|parallel.pp=2 schedule.kind=zb-h1 training.micro_batch_size=2
llama-tp2|llama|2|tp=2,mbs=2|parallel.tp=2 training.micro_batch_size=2
llama-dp2-zero1|llama|2|dp=2,zero=1,mbs=2|parallel.zero=1 training.micro_batch_size=2
llama-tp2-dp2|llama|4|tp=2,mbs=2|parallel.tp=2 training.micro_batch_size=2"
# Every layout trains ROUNDS times, the rounds one after another over all layouts (a slow spell of the
# machine lands on one round of many layouts, not on every round of one); the steps of all rounds count.
for round in $(seq 1 "$rounds"); do
  while IFS='|' read -r name model world layout sets; do
    [[ -n "${ONLY:-}" && ! $name =~ ${ONLY} ]] && continue
    cfg="configs/$model-tiny.toml"
    args=()
    for s in $sets; do args+=(--set "$s"); done
    "$build/trident" launch --nproc-per-node "$world" --master-port 0 -- "$build/trident" train --config "$cfg" "${args[@]}" \
      --set training.steps="$steps" --set logging.progress=false --set logging.dir="$tmp/$name.r$round" > "$tmp/$name.log" 2>&1 ||
      { echo "plan_vs_measured: $name failed:" >&2; tail -20 "$tmp/$name.log" >&2; exit 1; }
    if (( round == 1 )); then
      "$plan_build/trident" plan --config "$cfg" --cluster "$cluster" --cluster-set cluster.devices_per_node=8 \
        --profile "$tmp/$model.profile.toml" --gpus "$world" --layout "$layout" --format json > "$tmp/$name.plan.json"
      echo "$name|$model|$world|$layout" >> "$tmp/index"
    fi
    echo "plan_vs_measured: $name done (round $round of $rounds)" >&2
  done <<< "$layouts"
done
[[ -s $tmp/index ]] || { echo "plan_vs_measured: no layout matches ONLY='${ONLY:-}'" >&2; exit 1; }
{
  echo "# trident plan vs measured runs: configs/{gpt,llama}-tiny.toml, $rounds rounds of $steps steps per layout (step time: median of steps $((skip + 1))-$steps of every round)"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  machine: $(nproc) cores  commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# load (1, 5, 15 min) before: $load_before  after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# cluster: $cluster, $(grep -m1 '^# This machine, measured by' "$cluster" | sed 's/^# This machine, //')"
  echo "# command: PLAN_BUILD=$plan_build benchmarks/plan_vs_measured.sh $build"
  echo "# the cluster's compute and links, as calibrated:"
  grep -E '^(peak_tflops_fp32|action_overhead_us|gpt_layer|llama_layer|compute_slots_per_node|bandwidth_gbs|latency_us|collective_us|pipeline_latency_us) ' "$cluster" |
    awk '!seen[$1]++ { print "#   " $1 " = " $3 }'
  for model in gpt llama; do
    echo "# $model-tiny's profile (trident plan profile --config configs/$model-tiny.toml --mbs 2,4), whole model per micro-batch:"
    grep '^#   mbs' "$tmp/$model.profile.toml"
  done
  echo "# where the step-time model is wrong on this machine (nothing is fitted per row; the figures above are all it reads):"
  echo "#  - the machine's speed drifts: the same layout's median step differs from one round to the next (the"
  echo "#    'rounds' column: (slowest - fastest round) / median, and its summary line below the table). The profiles"
  echo "#    and the calibration are measured first and the runs over the next quarter hour; each layout's median is"
  echo "#    over all its rounds, but a slow or fast spell still moves rows together (a group of rows all low)."
  echo "#  - collectives between computing ranks: the per-step and per-call times come from an all-reduce and an"
  echo "#    all-gather after a matmul on each rank, in one calibration; inside training the ranks' other threads (the"
  echo "#    executor's, the trainer's) and smaller operators between calls change what a call costs, and so does the"
  echo "#    load between the calibration and the run: the tp rows move with it (see the signed errors per group below)."
  echo "#  - sharing the cores: the profile's pp = 2 runs give how much slower ranks compute side by side; one"
  echo "#    figure serves every layout, and it is as noisy as any one run (the profiles above show it per size)."
  echo "#  - world > 2: ranks beyond the compute slots stretch compute by ranks per slot; the latencies of transfers and"
  echo "#    collectives, measured with 2 ranks, are not stretched, though 4 or 8 processes on 2 cores wait longer too."
  "$py" - "$tmp" "$svg" "$skip" "$rounds" <<'PY'
import json, os, statistics, sys
tmp, svg_path, skip, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def rank(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i]); r = [0.0] * len(xs); i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]: j += 1
        for k in range(i, j + 1): r[order[k]] = (i + j) / 2
        i = j + 1
    return r

def spearman(pairs):
    rp, rm = rank([p for p, _ in pairs]), rank([m for _, m in pairs])
    mp, mm = statistics.mean(rp), statistics.mean(rm)
    return sum((a - mp) * (b - mm) for a, b in zip(rp, rm)) / (sum((a - mp) ** 2 for a in rp) * sum((b - mm) ** 2 for b in rm)) ** 0.5

spreads, time_rows, time_pts, mean_pts, mem_rows, mem_pairs, mem_errs = [], [], [], [], [], [], []
for line in open(os.path.join(tmp, "index")):
    name, model, world, layout = line.strip().split("|")
    plan = json.load(open(os.path.join(tmp, name + ".plan.json")))[0]
    times, per_round = [], []
    for rd in range(1, rounds + 1):
        rows = [json.loads(l) for l in open(os.path.join(tmp, f"{name}.r{rd}", "metrics.jsonl"))]
        per_round.append(statistics.median(r["step_time_s"] for r in rows[skip:]))
        times += [r["step_time_s"] for r in rows[skip:]]
    meas_t, med_t = statistics.mean(times), statistics.median(times)
    spread = (max(per_round) - min(per_round)) / med_t
    spreads.append(spread)
    b = plan["breakdown_s"]
    time_pts.append((name, int(world), plan["step_s"], med_t))
    mean_pts.append((name, int(world), plan["step_s"], meas_t))
    time_rows.append(f"{name:22s} {world:>5s} {1e3*plan['step_s']:9.1f} {1e3*med_t:9.1f} {100*(plan['step_s']-med_t)/med_t:+8.1f}% {1e3*meas_t:9.1f} "
                     f"{1e3*b['compute']:8.1f} {1e3*b['bubble']:7.1f} {1e3*b['tp_comm']:7.1f} {1e3*b['pp_comm']:7.1f} "
                     f"{1e3*b['dp_exposed']:7.1f} {1e3*b['optimizer']:6.2f} {1e3*b['recompute']:7.1f} {1e3*b['step_sync']:6.1f} {100*spread:6.1f}%")
    meas = {}
    for r in range(int(world)):
        s = json.load(open(os.path.join(tmp, f"{name}.r1", f"rank-{r}.json")))
        if s["tp"] != 0 or s["dp"] != 0:
            continue  # one device per pipeline rank: tp and dp peers hold the same
        states = s["local_parameters"] * 8 + s["optimizer_state_bytes"]  # fp32 weights and gradients
        meas[s["pp"]] = (states, s["peak_activation_bytes"], s["peak_boundary_bytes"], s["peak_inflight"])
    for pr in plan["ranks"]:
        st, act, bnd, inflight = meas[pr["pp_rank"]]
        p_states = pr["params_bytes"] + pr["grads_bytes"] + pr["optimizer_bytes"]
        p_total, m_total = pr["total_bytes"], st + act + bnd
        e_tot = (p_total - m_total) / m_total
        e_act = (pr["activation_bytes"] - act) / act
        mem_errs.append((abs(e_tot), abs(e_act))); mem_pairs.append((p_total, m_total))
        mem_rows.append(f"{name:22s} {world:>5s} {pr['pp_rank']:>4d} {p_states/1e6:9.3f} {st/1e6:9.3f} {pr['activation_bytes']/1e6:9.3f} "
                        f"{act/1e6:9.3f} {pr['peak_inflight']:>4d} {inflight:>4d} {p_total/1e6:9.3f} {m_total/1e6:9.3f} {100*e_tot:+7.1f}% {100*e_act:+7.1f}%")

def summary(pts):
    errs = [abs(p - m) / m for _, _, p, m in pts]
    return statistics.median(errs), max(errs), spearman([(p, m) for _, _, p, m in pts])

print("# step time (ms): predicted (the planner's breakdown of it: compute incl. action and layer host overhead, bubble, tp_comm, pp_comm,")
print("# dp_exposed, optimizer, recompute, step_sync) against measured (the median step; the mean of the same steps beside it)")
print(f"{'layout':22s} {'world':>5s} {'pred_ms':>9s} {'meas_ms':>9s} {'err':>9s} {'mean_ms':>9s} {'compute':>8s} {'bubble':>7s} {'tp_comm':>7s} {'pp_comm':>7s} {'dp_exp':>7s} {'optim':>6s} {'recomp':>7s} {'sync':>6s} {'rounds':>7s}")
print("\n".join(time_rows))
for label, pts in (("all rows", time_pts), ("world <= 2 (a core per rank)", [p for p in time_pts if p[1] <= 2]),
                   ("world > 2 (ranks share the 2 cores)", [p for p in time_pts if p[1] > 2])):
    if len(pts) >= 2:
        med, worst, rho = summary(pts)
        print(f"step time, {label}: {len(pts)} layouts, median |error| {100*med:.1f}%, worst {100*worst:.1f}%, Spearman {rho:.3f}")
groups = {"one device": lambda n, w: w == 1, "pp only (world 2)": lambda n, w: w == 2 and "-pp" in n and "tp" not in n,
          "tp (world 2)": lambda n, w: w == 2 and "-tp" in n, "dp (world 2)": lambda n, w: w == 2 and "-dp" in n,
          "world > 2": lambda n, w: w > 2}
signed = []
for label, pick in groups.items():
    errs = [(p - m) / m for n, w, p, m in time_pts if pick(n, w)]
    if errs: signed.append(f"{label} {100*statistics.median(errs):+.1f}% ({len(errs)})")
print("signed error, median per group of layouts (layouts): " + ", ".join(signed))
if rounds > 1:
    print(f"round-to-round spread of the measured median step ((slowest - fastest round) / median): median {100*statistics.median(spreads):.1f}%, worst {100*max(spreads):.1f}%")
med, worst, rho = summary(mean_pts)
print(f"step time against the mean step instead of the median, all rows: median |error| {100*med:.1f}%, worst {100*worst:.1f}%, Spearman {rho:.3f}")
print("goals (median |error| <= 10 %, worst <= 25 %, Spearman >= 0.9 on step time): "
      + ("met" if summary(time_pts)[0] <= 0.10 and summary(time_pts)[1] <= 0.25 and summary(time_pts)[2] >= 0.9 else "missed"))
print()
print("# memory per pipeline rank: MB = 1e6 bytes; states = parameters + gradients + AdamW moments; in-flight = peak (micro-batch, chunk) pairs")
print(f"{'layout':22s} {'world':>5s} {'pp':>4s} {'states_p':>9s} {'states_m':>9s} {'act_p':>9s} {'act_m':>9s} {'if_p':>4s} {'if_m':>4s} {'total_p':>9s} {'total_m':>9s} {'err_tot':>8s} {'err_act':>8s}")
print("\n".join(mem_rows))
print(f"memory: {len(mem_rows)} pipeline ranks of {len(time_pts)} layouts; total per rank: median |error| "
      f"{100*statistics.median(e for e, _ in mem_errs):.1f}%, worst {100*max(e for e, _ in mem_errs):.1f}%, Spearman {spearman(mem_pairs):.3f}; "
      f"activations alone: median |error| {100*statistics.median(a for _, a in mem_errs):.1f}%, worst {100*max(a for _, a in mem_errs):.1f}%")

# The plot: predicted against measured, step time (left) and memory per rank (right), log axes, y = x and +-25 %.
import math
W, H, M = 460, 420, 60
def panel(x0, pts, title, unit, colors):
    lo = min(min(p, m) for p, m, _ in pts) / 1.3; hi = max(max(p, m) for p, m, _ in pts) * 1.3
    sx = lambda v: x0 + M + (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo)) * (W - M - 20)
    sy = lambda v: H - M - (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo)) * (H - M - 40)
    o = [f'<text x="{x0 + W/2}" y="24" text-anchor="middle" font-size="15">{title}</text>',
         f'<rect x="{x0+M}" y="40" width="{W-M-20}" height="{H-M-40}" fill="none" stroke="#444"/>']
    for f, dash in ((1, ""), (1.25, "4,4"), (1 / 1.25, "4,4")):
        o.append(f'<line x1="{sx(lo)}" y1="{sy(min(hi, lo*f))}" x2="{sx(min(hi, hi/f))}" y2="{sy(min(hi, hi*f) if f<=1 else hi)}" '
                 f'stroke="#999" stroke-dasharray="{dash}"/>' if f == 1 else
                 f'<polyline points="{" ".join(f"{sx(x)},{sy(x*f)}" for x in [lo*(hi/lo)**(k/20) for k in range(21)] if lo <= x*f <= hi)}" '
                 f'fill="none" stroke="#bbb" stroke-dasharray="{dash}"/>')
    e = math.floor(math.log10(lo))
    while 10 ** e <= hi:
        for mant in (1, 2, 5):
            v = mant * 10 ** e
            if lo <= v <= hi:
                o.append(f'<text x="{sx(v)}" y="{H-M+16}" text-anchor="middle" font-size="11">{v:g}</text>')
                o.append(f'<text x="{x0+M-6}" y="{sy(v)+4}" text-anchor="end" font-size="11">{v:g}</text>')
                o.append(f'<line x1="{sx(v)}" y1="{H-M}" x2="{sx(v)}" y2="{H-M+4}" stroke="#444"/>')
                o.append(f'<line x1="{x0+M-4}" y1="{sy(v)}" x2="{x0+M}" y2="{sy(v)}" stroke="#444"/>')
        e += 1
    o.append(f'<text x="{x0 + M + (W-M-20)/2}" y="{H-18}" text-anchor="middle" font-size="12">measured {unit}</text>')
    o.append(f'<text x="{x0+16}" y="{(H-M+40)/2}" text-anchor="middle" font-size="12" transform="rotate(-90 {x0+16} {(H-M+40)/2})">predicted {unit}</text>')
    for p, m, key in pts:
        o.append(f'<circle cx="{sx(m)}" cy="{sy(p)}" r="4" fill="{colors[key]}" fill-opacity="0.8"/>')
    return o
colors = {1: "#1f77b4", 2: "#2ca02c", 4: "#ff7f0e", 8: "#d62728"}
body = panel(0, [(1e3 * p, 1e3 * m, w) for _, w, p, m in time_pts], "step time", "ms", colors)
mem_world = []
for line in open(os.path.join(tmp, "index")):
    name, model, world, layout = line.strip().split("|")
    plan = json.load(open(os.path.join(tmp, name + ".plan.json")))[0]
    mem_world += [int(world)] * len(plan["ranks"])
body += panel(W, [(p / 1e6, m / 1e6, w) for (p, m), w in zip(mem_pairs, mem_world)], "peak memory per pipeline rank", "MB", colors)
legend = [f'<circle cx="{2*W-110}" cy="{H-M-80+18*i}" r="4" fill="{c}"/><text x="{2*W-100}" y="{H-M-76+18*i}" font-size="11">world {w}</text>'
          for i, (w, c) in enumerate(colors.items())]
legend.append(f'<text x="{W}" y="{H-2}" text-anchor="middle" font-size="11">solid: predicted = measured; dashed: +-25 %</text>')
open(svg_path, "w").write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{2*W}" height="{H}" font-family="sans-serif">'
                          f'<rect width="100%" height="100%" fill="white"/>' + "".join(body + legend) + "</svg>\n")
PY
} > "$tmp/out.txt"
cat "$tmp/out.txt" > "$out"
cat "$out"
echo "plan_vs_measured: wrote $out and $svg" >&2
