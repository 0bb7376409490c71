#!/usr/bin/env bash
# `trident plan`'s memory model against measured runs: gpt-tiny layouts over
# world sizes 1-4 (tp, pp, dp, ZeRO-1, every schedule kind, recomputation)
# trained for 2 steps each; per pipeline rank the predicted bytes of
# parameters + gradients + optimizer state + activations + boundary buffers
# (`trident plan --layout ... --format json`) against what the run's
# rank-R.json reports (NOTE [rank summary]: local parameters, optimizer state,
# peak activation and boundary bytes). Memory does not depend on the cluster
# file's speeds; step time is not compared here (no calibrated description of
# this machine yet).
# Usage: benchmarks/plan_vs_measured.sh [BUILD_DIR]   (a directory holding `trident`;
#   default build; PLAN_BUILD from the environment: where the planning `trident` is, default
#   BUILD_DIR); writes benchmarks/results/plan_vs_measured.txt (or $OUT).
set -euo pipefail
build="${1:-build}" out="${OUT:-benchmarks/results/plan_vs_measured.txt}"
plan_build="${PLAN_BUILD:-$build}"
py=python3
[[ -x .venv/bin/python3 ]] && py=.venv/bin/python3
[[ -x $build/trident ]] || { echo "plan_vs_measured: $build/trident not found" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cfg=configs/gpt-tiny.toml
# name | world | plan --layout | trident train --set ...
layouts="single-mbs2|1|mbs=2|training.micro_batch_size=2
single-mbs4|1|mbs=4|training.micro_batch_size=4
single-full|1|mbs=2,recompute=full|training.micro_batch_size=2 training.recompute=full
single-selective|1|mbs=2,recompute=selective|training.micro_batch_size=2 training.recompute=selective
pp2-1f1b|2|pp=2,mbs=2|parallel.pp=2 training.micro_batch_size=2
pp2-gpipe|2|pp=2,schedule=gpipe,mbs=2|parallel.pp=2 schedule.kind=gpipe training.micro_batch_size=2
pp2-interleaved|2|pp=2,schedule=interleaved,chunks=2,mbs=2|parallel.pp=2 schedule.kind=interleaved schedule.chunks=2 training.micro_batch_size=2
pp2-zbh1|2|pp=2,schedule=zb-h1,mbs=2|parallel.pp=2 schedule.kind=zb-h1 training.micro_batch_size=2
pp2-zbv|2|pp=2,schedule=zb-v,mbs=2|parallel.pp=2 schedule.kind=zb-v training.micro_batch_size=2
pp2-dualpipev|2|pp=2,schedule=dualpipev,mbs=2|parallel.pp=2 schedule.kind=dualpipev training.micro_batch_size=2
tp2|2|tp=2,mbs=2|parallel.tp=2 training.micro_batch_size=2
tp2-sp|2|tp=2,sp=1,mbs=2|parallel.tp=2 parallel.sequence_parallel=true training.micro_batch_size=2
dp2-zero1|2|dp=2,zero=1,mbs=2|parallel.zero=1 training.micro_batch_size=2
tp2-pp2-full|4|tp=2,pp=2,mbs=2,recompute=full|parallel.tp=2 parallel.pp=2 training.micro_batch_size=2 training.recompute=full"
while IFS='|' read -r name world layout sets; do
  args=()
  for s in $sets; do args+=(--set "$s"); done
  "$build/trident" launch --nproc-per-node "$world" --master-port 0 -- "$build/trident" train --config "$cfg" "${args[@]}" \
    --set training.steps=2 --set logging.progress=false --set logging.dir="$tmp/$name" > "$tmp/$name.log" 2>&1 ||
    { echo "plan_vs_measured: $name failed:" >&2; tail -20 "$tmp/$name.log" >&2; exit 1; }
  "$plan_build/trident" plan --config "$cfg" --cluster configs/clusters/dgx-a100.toml --gpus "$world" --layout "$layout" \
    --format json > "$tmp/$name.plan.json"
  echo "$name|$world|$layout" >> "$tmp/index"
done <<< "$layouts"
{
  echo "# trident plan's memory model vs measured rank summaries: $cfg, 2 steps per layout"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  machine: $(nproc) cores  commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# command: PLAN_BUILD=$plan_build benchmarks/plan_vs_measured.sh $build"
  echo "# where the model is wrong (read from the table below):"
  echo "#  - states (parameters, gradients, AdamW moments) are exact on every rank, ZeRO-1 and V placement included;"
  echo "#  - activations without recomputation are over-predicted by ~22 % in fp32 without dropout: the count adapted"
  echo "#    from Korthikanti et al. 2022 keeps tensors that Trident's autograd graph does not hold separately;"
  echo "#  - V-placement ranks (zb-v, dualpipev) are over-predicted most: the model charges every in-flight pair the"
  echo "#    largest chunk of the rank (the one with the LM head's logits), though the pairs belong to different chunks;"
  echo "#  - full recomputation is under-predicted (-16 to -45 %): the model keeps only each layer's input, and"
  echo "#    leaves out the working set of the one layer being recomputed during its backward."
  "$py" - "$tmp" <<'PY'
import json, os, statistics, sys
tmp = sys.argv[1]
rows, errs_total, errs_act, pairs = [], [], [], []
for line in open(os.path.join(tmp, "index")):
    name, world, layout = line.strip().split("|")
    plan = json.load(open(os.path.join(tmp, name + ".plan.json")))[0]
    meas = {}
    for r in range(int(world)):
        s = json.load(open(os.path.join(tmp, name, f"rank-{r}.json")))
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
        errs_total.append(abs(e_tot)); errs_act.append(abs(e_act)); pairs.append((p_total, m_total))
        rows.append(f"{name:18s} {world:>5s} {pr['pp_rank']:>4d} {p_states/1e6:9.3f} {st/1e6:9.3f} {pr['activation_bytes']/1e6:9.3f} "
                    f"{act/1e6:9.3f} {pr['peak_inflight']:>4d} {inflight:>4d} {p_total/1e6:9.3f} {m_total/1e6:9.3f} {100*e_tot:+7.1f}% {100*e_act:+7.1f}%")
def rank(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i]); r = [0.0] * len(xs); i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]: j += 1
        for k in range(i, j + 1): r[order[k]] = (i + j) / 2
        i = j + 1
    return r
rp, rm = rank([p for p, _ in pairs]), rank([m for _, m in pairs])
mp, mm = statistics.mean(rp), statistics.mean(rm)
spearman = sum((a - mp) * (b - mm) for a, b in zip(rp, rm)) / (sum((a - mp) ** 2 for a in rp) * sum((b - mm) ** 2 for b in rm)) ** 0.5
print("# MB = 1e6 bytes; states = parameters + gradients + AdamW moments; in-flight = peak (micro-batch, chunk) pairs")
print(f"{'layout':18s} {'world':>5s} {'pp':>4s} {'states_p':>9s} {'states_m':>9s} {'act_p':>9s} {'act_m':>9s} {'if_p':>4s} {'if_m':>4s} {'total_p':>9s} {'total_m':>9s} {'err_tot':>8s} {'err_act':>8s}")
print("\n".join(rows))
print(f"summary: {len(rows)} pipeline ranks of {len(set(r.split()[0] for r in rows))} layouts; total per rank: median |error| "
      f"{100*statistics.median(errs_total):.1f}%, worst {100*max(errs_total):.1f}%, Spearman {spearman:.3f}; "
      f"activations alone: median |error| {100*statistics.median(errs_act):.1f}%, worst {100*max(errs_act):.1f}%")
PY
} | tee "$out"
