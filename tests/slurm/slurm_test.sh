#!/usr/bin/env bash
# The Slurm commands of launch/README.md, run for real (CTest `Slurm`, label slurm, as root).
#
# Starts a private single-node Slurm (Debian's slurm-wlm and munge, which scripts/setup.sh
# installs; nothing is installed here): munged, slurmctld and slurmd as root, configured in a
# temporary folder (never /etc), and runs the two ```sh blocks of launch/README.md that are
# marked for this script, as written, in scratch folders where build/ and configs/ are links:
#   a. srun: the first block (export MASTER_ADDR=...; srun -N1 -n2 ... trident train) in an
#      allocation (salloc -N1 -n2) trains on two Slurm tasks; every step's loss and grad_norm
#      (their text in metrics.jsonl) and the final checkpoint (every tensor's bytes and index
#      record, AdamW's step: restart_util.h's criterion) equal those of
#      `trident launch --nproc-per-node 2` with the same train arguments.
#   b. preemption: the second block (the job script) is submitted with sbatch; once its first
#      checkpoint exists, `scancel --signal=TERM JOB` reaches the tasks, which save at the step
#      they agree on and exit 143; the script requeues the job, which runs again, resumes from
#      that step's checkpoint and ends COMPLETED with one restart, in the final state and with
#      the losses of the uninterrupted run (a's baseline), bit for bit. Then the same with
#      SIGUSR1 (exit 138), what `--signal=USR1@T` sends the tasks before a time limit.
#   c. a killed task: the first block with rank 1 SIGKILLed inside step 4 (TRIDENT_FAULT) ends
#      within 30 s of the kill, non-zero, srun naming the killed task, no process left; and the
#      same under Slurm's default (--kill-on-bad-exit=0), where rank 0 fails on its own.
# Prints one PASS/FAIL line per part and exits 1 if any failed. A machine that cannot run it
# (not root, a program missing) fails with one line saying why: it never skips. Every step is
# bounded (timeout); the whole script stops itself after $SLURM_TEST_LIMIT_S (240) seconds.
# Whatever it started (daemons, slurmstepd, ranks) is stopped and its folder removed on any exit.
#   tests/slurm/slurm_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
die() { echo "slurm_test: FAIL: $*"; exit 1; }
(($# == 2)) || die "usage: slurm_test.sh BUILD_DIR SOURCE_DIR"
build="$(cd "$1" 2>/dev/null && pwd)" || die "build directory '$1' does not exist"
src="$(cd "$2" 2>/dev/null && pwd)" || die "source directory '$2' does not exist"
limit_s=${SLURM_TEST_LIMIT_S:-240}
readme="$src/launch/README.md"
[[ -f $readme ]] || die "$readme is missing"
((EUID == 0)) || die "must run as root (it starts slurmctld, slurmd and munged as root)"
for p in munged munge slurmctld slurmd salloc srun sbatch scancel scontrol sinfo squeue python3 timeout; do
  command -v "$p" >/dev/null 2>&1 || die "'$p' is missing (scripts/setup.sh installs slurm-wlm and munge)"
done
[[ -x $build/trident ]] || die "$build/trident is missing (build it first)"
host=$(hostname -s)
getent hosts "$host" >/dev/null || die "host name '$host' does not resolve (getent hosts): MASTER_ADDR would not either"

# A clean environment: nothing of an outer job, launcher or test may reach the ranks.
for v in $(compgen -e); do
  case "$v" in
    SLURM_* | OMPI_* | TORCHELASTIC_* | TRIDENT_*) unset "$v" ;;
  esac
done
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK NODE_RANK MASTER_ADDR MASTER_PORT

# munged wants execute permission for all on the folders above its socket.
T=$(mktemp -d /tmp/trident-slurm-XXXXXX)
chmod 755 "$T"
export SLURM_CONF=$T/slurm.conf

# Processes of this test: any whose environment or working directory names $T (the daemons'
# children get SLURM_CONF=$T/..., the tasks the whole environment), except this shell, the
# watchdog and the pids given.
own_pids() {
  python3 - "$T" "$$" "${watchdog:-0}" "$@" <<'EOF'
import os, sys
t, skip = sys.argv[1].encode(), {int(x) for x in sys.argv[2:]} | {os.getpid(), os.getppid()}
for p in filter(str.isdigit, os.listdir("/proc")):
    if int(p) in skip: continue
    try:
        env = open("/proc/%s/environ" % p, "rb").read()
        cwd = os.readlink("/proc/%s/cwd" % p).encode()
    except OSError:
        continue
    if t in env or cwd.startswith(t): print(p)
EOF
}
# Processes whose working directory is under $1 (the ranks of a part).
pids_under() {
  local d
  for d in /proc/[0-9]*; do
    [[ "$(readlink "$d/cwd" 2>/dev/null)" == "$1"* ]] && echo "${d#/proc/}"
  done
  return 0
}

daemons=()
watchdog=""
cleanup() {
  local rc=$? i left
  trap - EXIT INT TERM
  set +e  # every step of the cleanup runs, whatever fails
  if [[ -n $watchdog ]]; then  # the watchdog, then its sleep (in this order: no "Terminated" notice)
    i=$(pgrep -P "$watchdog" || true)
    kill -KILL "$watchdog" 2>/dev/null || true
    [[ -n $i ]] && kill $i 2>/dev/null
  fi
  if ((rc != 0)) && [[ -f $T/log/slurmctld.log ]]; then
    echo "--- last lines of slurmctld.log and slurmd.log:"
    tail -n 15 "$T/log/slurmctld.log" "$T/log/slurmd.log" 2>/dev/null || true
  fi
  # At most about 30 s in all, so that a stop by the watchdog ends before ctest's TIMEOUT.
  timeout 5 scancel --quiet --user=root 2>/dev/null || true
  i=$((SECONDS + 10))
  while ((SECONDS < i)) && [[ -n "$(timeout 3 squeue -h 2>/dev/null)" ]]; do sleep 0.5; done
  ((${#daemons[@]})) && kill -TERM "${daemons[@]}" 2>/dev/null
  for ((i = 0; i < 20; i++)); do
    left=$(own_pids)
    [[ -z $left ]] && break
    sleep 0.25
  done
  left=$(own_pids)
  if [[ -n $left ]]; then
    echo "slurm_test: killing what is left: $(echo $left)"
    kill -KILL $left 2>/dev/null || true
    sleep 0.5
  fi
  rm -rf "$T"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# The whole script is bounded: past the limit everything it started is killed, which ends
# whatever this shell waits for, and the EXIT trap cleans up.
( sleep "$limit_s"
  echo "slurm_test: FAIL: over its ${limit_s} s bound, stopping"
  kill -TERM $$ 2>/dev/null
  sleep 1
  kill -KILL $(own_pids "$BASHPID") 2>/dev/null ) &
watchdog=$!
disown "$watchdog"  # no "Terminated" notice when cleanup stops it

# ---- the README's blocks -----------------------------------------------------------------
# The ```sh blocks right after a `<!-- doc-test: skip ... tests/slurm/slurm_test.sh ... -->` line.
awk -v out="$T/block" '
  /<!-- doc-test: skip.*tests\/slurm\/slurm_test\.sh/ { want = 1; next }
  /^```sh[[:space:]]*$/ { if (want) { n++; inb = 1 } want = 0; next }
  /^```/ { inb = 0; next }
  inb { print > (out "-" n); next }
  $0 !~ /^[[:space:]]*$/ { want = 0 }' "$readme"
[[ -f $T/block-1 && -f $T/block-2 && ! -e $T/block-3 ]] ||
  die "$readme: expected two \`\`\`sh blocks after a 'doc-test: skip ... tests/slurm/slurm_test.sh' line"
# A block's srun command, continuations joined.
srun_of() { sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$1" | grep -E '^srun ' | tr -s ' '; }
srun_cmd=$(srun_of "$T/block-1")
[[ -n $srun_cmd && $(grep -c '' <<< "$srun_cmd") == 1 ]] || die "$readme: the first Slurm block has no single srun line"
[[ "$(srun_of "$T/block-2")" == "$srun_cmd" ]] || die "$readme: the job script's srun line differs from the first block's"
head -n 1 "$T/block-2" | grep -q '^#!' && grep -q '^#SBATCH' "$T/block-2" ||
  die "$readme: the second Slurm block is not a job script (#! and #SBATCH lines)"
[[ $srun_cmd == *" build/trident train "* ]] || die "$readme: the srun line does not run build/trident train"
train="build/trident train ${srun_cmd#* build/trident train }"
ckdir=$(grep -oE 'checkpoint\.dir=[^ ]+' <<< "$srun_cmd" | cut -d= -f2)
logdir=$(grep -oE 'logging\.dir=[^ ]+' <<< "$srun_cmd" | cut -d= -f2)
[[ -n $ckdir && -n $logdir ]] || die "$readme: the srun line sets no checkpoint.dir or logging.dir"

# ---- the cluster -------------------------------------------------------------------------
mkdir -p "$T/munge" "$T/run" "$T/state" "$T/spool" "$T/log"
chmod 700 "$T/munge"
chmod 755 "$T/run"
head -c 1024 /dev/urandom > "$T/munge/munge.key"
chmod 400 "$T/munge/munge.key"
read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
cpus=$(nproc)
((cpus >= 2)) || cpus=2  # two tasks; slurmd accepts the count (config_overrides)
# cred_expire: a requeued job waits cred_expire + 1 s before it may start again (120 s by
# default; 10 still leaves a loaded machine time to launch a step with its credential); the
# scheduler's passes every second then start it at once (the main pass runs every 60 s).
cat > "$T/slurm.conf" <<EOF
ClusterName=trident-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$T/run/munge.socket,cred_expire=10
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/run/slurmctld.pid
SlurmdPidFile=$T/run/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=5
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
# No cgroup is used (proctrack/linuxproc, task/none); slurmd still loads the plugin.
echo "CgroupPlugin=autodetect" > "$T/cgroup.conf"

t_start=$(date +%s)
munged -F --key-file="$T/munge/munge.key" --socket="$T/run/munge.socket" --pid-file="$T/run/munged.pid" \
  --log-file="$T/log/munged.log" --seed-file="$T/munge/munged.seed" > "$T/log/munged.out" 2>&1 &
daemons+=($!)
for ((i = 0; i < 50; i++)); do [[ -S $T/run/munge.socket ]] && break; sleep 0.1; done
timeout 10 munge -S "$T/run/munge.socket" -n > /dev/null || die "munged did not start: $(tail -n 3 "$T/log/munged.log" "$T/log/munged.out" 2>&1 | tr '\n' ' ')"
(cd "$T/log" && exec slurmctld -D -f "$T/slurm.conf" > "$T/log/slurmctld.out" 2>&1) &
daemons+=($!)
(cd "$T/log" && exec slurmd -D -f "$T/slurm.conf" > "$T/log/slurmd.out" 2>&1) &
daemons+=($!)
state=""
for ((i = 0; i < 60; i++)); do
  state=$(timeout 5 sinfo -h -N -o %T 2>/dev/null || true)
  [[ $state == idle ]] && break
  sleep 0.5
done
[[ $state == idle ]] || die "the node did not become idle within 30 s (sinfo: '${state:-no answer}')"
echo "slurm_test: slurmctld and slurmd up on $host ($cpus CPUs) in $(($(date +%s) - t_start)) s ($T)"

# A scratch folder laid out like the repository (the commands use its relative paths).
scratch() {
  mkdir -p "$T/$1"
  ln -s "$build" "$T/$1/build"
  ln -s "$src/configs" "$T/$1/configs"
  cp "$T/block-1" "$T/$1/srun.sh"
  cp "$T/block-2" "$T/$1/train.sbatch"
}

# Same steps, and the same text of every step's loss and grad_norm, in two metrics.jsonl.
same_metrics() {
  python3 - "$1" "$2" <<'EOF'
import json, re, sys
def rows(path):
    out = []
    for line in open(path):
        if not line.strip(): continue
        step = json.loads(line)["step"]
        out.append((step, {k: re.search(r'"%s":([^,}]*)' % k, line).group(1) for k in ("loss", "grad_norm")}))
    return out
ref, got = rows(sys.argv[1]), rows(sys.argv[2])
if [s for s, _ in ref] != list(range(1, len(ref) + 1)) or not ref:
    sys.exit("    %s: steps %s, expected 1..N" % (sys.argv[1], [s for s, _ in ref]))
if [s for s, _ in got] != [s for s, _ in ref]:
    sys.exit("    %s: steps %s, expected 1..%d" % (sys.argv[2], [s for s, _ in got], len(ref)))
for (s, a), (_, b) in zip(ref, got):
    for k in a:
        if a[k] != b[k]:
            sys.exit("    step %d: %s %s, expected %s (%s)" % (s, k, b[k], a[k], sys.argv[1]))
print("    %d steps, loss and grad_norm identical" % len(ref))
EOF
}

# restart_util.h's same_checkpoint: every rank's entries (index records equal, bytes equal)
# and meta.extra (AdamW's step); the rng.cpu blob is left out (seeded anew in every process).
same_checkpoint() {
  python3 - "$1" "$2" <<'EOF'
import glob, json, os, sys
a, b = sys.argv[1], sys.argv[2]
ranks = sorted(os.path.basename(p) for p in glob.glob(os.path.join(a, "rank-*.json")))
if not ranks: sys.exit("    no rank-*.json in " + a)
for r in ranks:
    name = r[:-5]
    if not os.path.exists(os.path.join(b, r)): sys.exit("    missing %s in %s" % (r, b))
    ia, ib = (json.load(open(os.path.join(d, r))) for d in (a, b))
    ba, bb = (open(os.path.join(d, name + ".bin"), "rb").read() for d in (a, b))
    ea, eb = ia["entries"], ib["entries"]
    if len(ea) != len(eb) or not ea: sys.exit("    %s: %d vs %d entries" % (name, len(ea), len(eb)))
    for x, y in zip(ea, eb):
        if x != y: sys.exit("    %s: entry %s differs: %s vs %s" % (name, x["name"], x, y))
        o, n = x["byte_offset"], x["nbytes"]
        if o + n > len(ba) or o + n > len(bb) or ba[o:o + n] != bb[o:o + n]:
            sys.exit("    %s: the bytes of %s differ" % (name, x["name"]))
    if ia["meta"]["extra"] != ib["meta"]["extra"]:
        sys.exit("    %s: meta.extra %s vs %s" % (name, ia["meta"]["extra"], ib["meta"]["extra"]))
print("    %d ranks' checkpoint tensors identical" % len(ranks))
EOF
}

# A failed check inside a part: says what and ends the part (run in a subshell).
fail() { echo "    $*"; exit 1; }
show() { echo "    --- $1:"; tail -n "${2:-25}" "$1" | sed 's/^/    | /'; }

# ---- baseline: trident launch with the same arguments -------------------------------------
scratch launch
t0=$(date +%s)
if ! (cd "$T/launch" && timeout -k 5 120 bash -c "build/trident launch --nproc-per-node 2 --master-port 0 -- $train" \
  < /dev/null > out.txt 2>&1); then
  show "$T/launch/out.txt"
  die "baseline: trident launch --nproc-per-node 2 -- $train failed"
fi
base_last=$(cat "$T/launch/$ckdir/latest")
echo "slurm_test: baseline (trident launch --nproc-per-node 2, same arguments): $base_last in $(($(date +%s) - t0)) s"

# ---- a. srun in an allocation --------------------------------------------------------------
part_a() {
  scratch a
  cd "$T/a"
  local rc=0
  timeout -k 5 120 salloc -N1 -n2 bash srun.sh < /dev/null > out.txt 2>&1 || rc=$?
  ((rc == 0)) || { show out.txt; fail "salloc -N1 -n2 bash srun.sh exited $rc"; }
  grep -q "rendezvous at $host:29500: 2 ranks joined" out.txt || { show out.txt; fail "no 'rendezvous at $host:29500: 2 ranks joined' line"; }
  same_metrics "$T/launch/$logdir/metrics.jsonl" "$logdir/metrics.jsonl" || fail "losses differ from trident launch's"
  [[ "$(cat "$ckdir/latest")" == "$base_last" ]] || fail "last checkpoint $(cat "$ckdir/latest"), expected $base_last"
  same_checkpoint "$T/launch/$ckdir/$base_last" "$ckdir/$base_last" || fail "final checkpoint differs from trident launch's"
}

# ---- b. sbatch --requeue, preempted by scancel --signal=TERM (USR1), resumed ------------------
job_field() { timeout 10 scontrol show job "$1" | grep -oE "(^|[[:space:]])$2=[^[:space:]]*" | head -n 1 | cut -d= -f2; }
# $1: the signal (TERM, USR1), $2: the tasks' exit status (143, 138).
preempted_job() {
  local sig=$1 code=$2 job i st k
  scratch "b-$sig"
  cd "$T/b-$sig"
  job=$(timeout 10 sbatch --parsable train.sbatch) || fail "sbatch train.sbatch failed"
  job=${job%%;*}
  # Its first checkpoint, while it runs.
  for ((i = 0; i < 600; i++)); do
    [[ -s $ckdir/latest ]] && break
    sleep 0.1
  done
  [[ -s $ckdir/latest ]] || { show "slurm-$job.out"; fail "no checkpoint within 60 s"; }
  st=$(job_field "$job" JobState)
  [[ $st == RUNNING ]] || { show "slurm-$job.out"; fail "job $job is $st, not RUNNING, at its first checkpoint"; }
  timeout 10 scancel --signal="$sig" "$job" || fail "scancel --signal=$sig $job failed"
  echo "    scancel --signal=$sig $job after $(cat "$ckdir/latest")"
  for ((i = 0; i < 600; i++)); do
    st=$(job_field "$job" JobState)
    case "$st" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) break ;; esac
    sleep 0.2
  done
  [[ $st == COMPLETED ]] || { show "slurm-$job.out" 40; fail "job $job ended $st (ExitCode $(job_field "$job" ExitCode)), expected COMPLETED"; }
  [[ "$(job_field "$job" Restarts)" == 1 ]] || { show "slurm-$job.out" 40; fail "job $job ran with Restarts=$(job_field "$job" Restarts), expected 1"; }
  k=$(grep -oE "preempted by SIG$sig: checkpoint at step [0-9]+ of [0-9]+" "slurm-$job.out" | head -n 1 | awk '{print $7}')
  [[ -n $k ]] || { show "slurm-$job.out" 40; fail "no 'preempted by SIG$sig: checkpoint at step K' line"; }
  grep -q "Exited with exit code $code" "slurm-$job.out" || { show "slurm-$job.out" 40; fail "srun did not report the tasks' exit code $code"; }
  grep -q "checkpoint: resumed from $ckdir/$(printf 'step-%08d' "$k") " "slurm-$job.out" ||
    { show "slurm-$job.out" 40; fail "the requeued run did not resume from step $k's checkpoint"; }
  # The requeued run is attempt 1 (SLURM_RESTART_COUNT): its rendezvous line says so.
  grep -q "joins the rendezvous at .*, restart 1" "slurm-$job.out" ||
    { show "slurm-$job.out" 40; fail "the requeued run's rendezvous line does not say restart 1"; }
  echo "    preempted by SIG$sig at step $k (exit $code), requeued, resumed from step $k"
  same_metrics "$T/launch/$logdir/metrics.jsonl" "$logdir/metrics.jsonl" || fail "losses differ from the uninterrupted run's"
  [[ "$(cat "$ckdir/latest")" == "$base_last" ]] || fail "last checkpoint $(cat "$ckdir/latest"), expected $base_last"
  same_checkpoint "$T/launch/$ckdir/$base_last" "$ckdir/$base_last" || fail "final state differs from the uninterrupted run's"
}
part_b() {
  preempted_job TERM 143
  preempted_job USR1 138
}

# ---- c. a task SIGKILLed ends the job -------------------------------------------------------
# $1: the srun option for a failed task (the README's --kill-on-bad-exit=1, or Slurm's default 0).
killed_task() {
  local dir=$T/c$2 pid i t0 rc left
  scratch "c$2"
  cd "$dir"
  sed -i "s/--kill-on-bad-exit=1/--kill-on-bad-exit=$1/" srun.sh
  : > out.txt
  TRIDENT_FAULT=rank=1,step=3,kind=kill timeout -k 5 120 salloc -N1 -n2 bash srun.sh < /dev/null > out.txt 2>&1 &
  pid=$!
  for ((i = 0; i < 600; i++)); do
    grep -q "rank 1 injects kill after step 3" out.txt && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  t0=$(date +%s.%N)
  grep -q "rank 1 injects kill after step 3" out.txt || { wait "$pid" || true; show out.txt; fail "the fault never fired"; }
  rc=0
  wait "$pid" || rc=$?
  local took
  took=$(python3 -c "import time; print('%.1f' % (time.time() - $t0))")
  ((rc != 0)) || { show out.txt; fail "exit status 0 after a task was killed"; }
  python3 -c "import sys; sys.exit(not $took <= 30)" || { show out.txt; fail "took $took s after the kill (bound 30 s)"; }
  grep -qE "task 1: Killed" out.txt || { show out.txt; fail "srun did not name task 1 as killed"; }
  sleep 0.5
  cd "$T"  # this shell's own folder is not a leftover
  left=$(pids_under "$dir")
  [[ -z $left ]] || fail "processes left behind: $(echo $left)"
  for ((i = 0; i < 100; i++)); do  # the allocation's job completing (CG)
    [[ -z "$(timeout 10 squeue -h)" ]] && break
    sleep 0.1
  done
  [[ -z "$(timeout 10 squeue -h)" ]] || fail "jobs still in the queue 10 s after salloc ended: $(timeout 10 squeue -h)"
  echo "    --kill-on-bad-exit=$1: ended $took s after the kill, exit status $rc"
}
part_c() {
  killed_task 1 1
  killed_task 0 0
}

fails=0
for part in a b c; do
  t0=$(date +%s)
  # Not `( ... ) || rc=$?`: errexit would be off inside.
  set +e
  (set -e; "part_$part")
  rc=$?
  set -e
  case $part in
    a) what="srun -N1 -n2 in salloc: losses and final checkpoint equal trident launch's" ;;
    b) what="sbatch --requeue, scancel --signal=TERM (and USR1): requeued, resumed, final state bit-identical" ;;
    c) what="a task SIGKILLed: the job ends, non-zero, srun names the task (with and without --kill-on-bad-exit)" ;;
  esac
  if ((rc == 0)); then
    echo "PASS $part: $what ($(($(date +%s) - t0)) s)"
  else
    echo "FAIL $part: $what ($(($(date +%s) - t0)) s)"
    fails=$((fails + 1))
  fi
done
echo "slurm_test: $fails part(s) failed, $(($(date +%s) - t_start)) s in all"
((fails == 0))
