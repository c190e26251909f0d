#!/usr/bin/env bash
# launch/slurm/fgpipe-cpu.sbatch on a real single-node Slurm (Debian's slurmctld, slurmd and
# munged, started here with a generated slurm.conf in a temp dir, own ports and munge socket):
#
#  1. A 4-rank job (2 stages x 2 replicas, srun --mpi=pmix) runs to the end: exit 0, state
#     COMPLETED, the resolved layout and the result in its output, a checkpoint.
#  2. A second job gets Slurm's time-limit warning (scancel --signal=USR1 --batch: what
#     `#SBATCH --signal=B:USR1@120` sends): it must write a checkpoint, be requeued, and the
#     requeued run must resume from that checkpoint and finish; its final weights must equal,
#     bit for bit, those of the same run without interruption (mpirun, no Slurm).
#  3. launch/slurm/fgpipe-gpu.sbatch on 4 stand-in GPUs (gres): every task gets its own GPU in
#     CUDA_VISIBLE_DEVICES, and the run completes (FGPIPE_DEVICE=cpu: the GPUs are not real).
#  4. A job with --time=1 gets the warning from its own `#SBATCH --signal=B:USR1@120` line, sent
#     by Slurm at the time limit, which is due at once: the script holds it until the ranks
#     have started (FGPIPE_WARN_DELAY), then the job checkpoints and requeues itself (and is
#     cancelled).
#
# Slurm delays a requeued job by ~120 s (EligibleTime); the test moves its start to now with
# `scontrol update StartTime=now` (2 s after the requeue) instead of waiting. Every daemon
# started here is stopped at the end. Without the Slurm packages (launch/install-deps.sh
# installs them) or without root (slurmd must run as root) the test is skipped, with the
# reason, exit code 77.
#
# usage: slurm.sh FGPIPE CONFIG
. "$(dirname "$0")/lib.sh" "$@"
root=$(cd "$(dirname "$0")/.." && pwd)

skip() {
  echo "SKIP: $*" >&2
  echo "******** slurm test SKIPPED: $* ********"
  exit 77
}
missing=()
for b in slurmctld slurmd munged mungekey munge unmunge sbatch squeue scontrol scancel sinfo srun setpriv; do
  command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || missing+=("$b")
done
[ ${#missing[@]} -eq 0 ] || skip "Slurm/munge programs missing (${missing[*]}): apt-get install slurmctld slurmd slurm-client munge, or run launch/install-deps.sh"
[ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to start job steps; run as root"
id munge >/dev/null 2>&1 || skip "no munge user (is the munge package installed?)"
PATH=$PATH:/usr/sbin

chmod 755 "$dir"  # the munge user reaches its socket below it
pids=() jobs=()

stop_pid() {  # stop_pid PID: TERM, up to 5 s, then KILL
  local p=$1
  kill -TERM "$p" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null
  wait "$p" 2>/dev/null
}
cleanup() {
  local j
  for j in "${jobs[@]}"; do scancel "$j" 2>/dev/null; done
  # The jobs' step daemons end with their jobs; give them a moment before slurmd goes.
  for _ in $(seq 50); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.1; done
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop_pid "${pids[i]}"; done
  # slurmstepd of this cluster (its spool dir is ours), if any survived.
  local p
  for p in $(pgrep -f slurmstepd); do
    grep -qF "$dir" "/proc/$p/cmdline" "/proc/$p/environ" 2>/dev/null && kill -KILL "$p"
  done
  [ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
# A job's last lines; a crash's report from its first line (the signal, the innermost frames).
show() {
  grep -h -A12 "Process received signal" "$@" | head -n 14 | sed 's/^/#   /'
  sed 's/^/#   /' "$@" | tail -n 25
}

# --- munge: own key, socket, log and pid file, as the munge user -------------------------------
m=$dir/munge
mkdir -p "$m" && chown munge:munge "$m" && chmod 755 "$m"
setpriv --reuid=munge --regid=munge --init-groups mungekey --create --keyfile="$m/munge.key" >/dev/null 2>&1 ||
  { verdict "munge key created" "mungekey failed"; finish; }
setpriv --reuid=munge --regid=munge --init-groups munged -F -S "$m/socket" --key-file="$m/munge.key" \
  --log-file="$m/log" --pid-file="$m/pid" --seed-file="$m/seed" >"$dir/munged.out" 2>&1 &
pids+=($!)
ok=false
for _ in $(seq 50); do munge -n -S "$m/socket" 2>/dev/null | unmunge -S "$m/socket" >/dev/null 2>&1 && { ok=true; break; }; sleep 0.1; done
$ok || { verdict "munged answers" "no credential round trip"; show "$dir/munged.out"; finish; }

# --- slurm.conf: one node that claims 4 CPUs (2 cores are enough to run 4 small ranks) ---------
free_port() {  # a port nobody listens on, from a random start
  local p=$((20000 + RANDOM % 30000))
  while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || (exec 3<>"/dev/tcp/127.0.0.1/$((p + 1))") 2>/dev/null; do
    p=$((p + 2))
  done
  echo "$p"
}
port=$(free_port)
mkdir -p "$dir/state" "$dir/spool"
export SLURM_CONF=$dir/slurm.conf
cat >"$SLURM_CONF" <<EOF
ClusterName=fgpipetest
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$m/socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=pmix
ReturnToService=2
JobRequeue=1
MailProg=/bin/true
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs=4 Gres=gpu:4 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
# Four stand-in GPUs (links to /dev/null: Slurm wants character devices): enough for Slurm to
# hand one to each task of fgpipe-gpu.sbatch in CUDA_VISIBLE_DEVICES; nothing opens them.
mkdir -p "$dir/gpu" && for g in 0 1 2 3; do ln -s /dev/null "$dir/gpu/nvidia$g"; done
echo "NodeName=localhost Name=gpu File=$dir/gpu/nvidia[0-3]" >"$dir/gres.conf"
slurmctld -D -f "$SLURM_CONF" >"$dir/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N localhost >"$dir/slurmd.out" 2>&1 &
pids+=($!)
state=
for _ in $(seq 150); do state=$(sinfo -h -o %t 2>/dev/null); [ "$state" = idle ] && break; sleep 0.2; done
verdict "slurmctld and slurmd up, node idle (port $port)" "$([ "$state" = idle ] || echo "node state '${state:-none}'")"
[ "$state" = idle ] || { show "$dir/slurmctld.log" "$dir/slurmd.log"; finish; }
srun --mpi=list 2>&1 | grep -qw pmix
verdict "srun --mpi=list offers pmix" "$([ $? -eq 0 ] || srun --mpi=list 2>&1 | tr '\n' ' ')"

# job_field JOB FIELD: a field of `scontrol show job`, e.g. JobState, ExitCode, Restarts.
job_field() { scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"; }
# wait_state JOB SECONDS STATE...: until the job is in one of the states; prints the state.
wait_state() {
  local j=$1 n=$(($2 * 5)) s; shift 2
  for _ in $(seq "$n"); do
    s=$(job_field "$j" JobState)
    for want in "$@"; do [ "$s" = "$want" ] && { echo "$s"; return 0; }; done
    sleep 0.2
  done
  echo "${s:-gone}"
  return 1
}

# The runs: 2 stages x 2 replicas of a small MLP, Adam, constant lr (so a stop and a resume
# change nothing). The jobs take fgpipe, the layout and the output dir from the environment.
small=(--set model=784-64-32-10 --set warmup_steps=0 --set lr_schedule=constant --set print_every=50)
export FGPIPE=$fgpipe FGPIPE_ROOT=$root FGPIPE_STAGES=2 FGPIPE_REPLICAS=2
# 4 ranks on the 2 real cores: let waiting ranks yield (mpirun does this when oversubscribed).
export OMPI_MCA_mpi_yield_when_idle=1
submit() {  # submit NAME ARGS...: prints the job id
  local name=$1; shift
  FGPIPE_OUT=$dir/$name sbatch --parsable --ntasks-per-node=4 --time=10 -o "$dir/$name.out" \
    "$root/launch/slurm/fgpipe-cpu.sbatch" "$config" "${small[@]}" "$@"
}

# --- 1: a job that runs to the end ---------------------------------------------------------------
j1=$(submit job1 --set steps=40 --save-params "$dir/job1.bin" 2>"$dir/sbatch1.err")
[ -n "$j1" ] && jobs+=("$j1")
verdict "sbatch accepts fgpipe-cpu.sbatch (job ${j1:-none})" "$([ -n "$j1" ] || cat "$dir/sbatch1.err")"
[ -n "$j1" ] || finish
st=$(wait_state "$j1" 120 COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL)
ec=$(job_field "$j1" ExitCode)
verdict "job 1 COMPLETED with exit code 0:0 ($st, $ec)" "$([ "$st" = COMPLETED ] && [ "$ec" = 0:0 ] || echo "state $st, exit $ec")"
# A COMPLETED job can still have run nothing (a broken plugin does that): read its output.
out1=$dir/job1.out
for want in "fgpipe-run: 2 stages x 2 replicas = 4 ranks" "srun --mpi=pmix -n 4" \
            "fgpipe: 2 data-parallel replicas of 2 stages" "result: 40 steps" "fgpipe exited with status 0"; do
  grep -qF -- "$want" "$out1"
  verdict "job 1 output has '$want'" "$([ $? -eq 0 ] || echo missing)"
done
verdict "job 1 wrote its checkpoint and weights" \
  "$([ -s "$dir/job1/checkpoint.h5" ] && [ -s "$dir/job1.bin" ] || echo "no $dir/job1/checkpoint.h5 or job1.bin")"
[ "$failed" -eq 0 ] || show "$out1"

# --- 2: warned, checkpointed, requeued, resumed --------------------------------------------------
steps=600
# (FGPIPE_WARN_DELAY=0: the warning comes once fgpipe is training; job 4 has one at the start.)
j2=$(FGPIPE_WARN_DELAY=0 submit job2 --set steps=$steps --save-params "$dir/job2.bin" 2>"$dir/sbatch2.err")
[ -n "$j2" ] && jobs+=("$j2")
verdict "second job submitted (job ${j2:-none})" "$([ -n "$j2" ] || cat "$dir/sbatch2.err")"
[ -n "$j2" ] || finish
training=false
for _ in $(seq 600); do
  [ -f "$dir/job2/loss.csv" ] && [ "$(wc -l <"$dir/job2/loss.csv")" -gt 20 ] && { training=true; break; }
  sleep 0.1
done
verdict "job 2 is training" "$($training || echo "no loss.csv lines; state $(job_field "$j2" JobState)")"
$training || { show "$dir/job2.out"; finish; }
scancel --signal=USR1 --batch "$j2"
verdict "scancel --signal=USR1 --batch delivered" "$([ $? -eq 0 ] || echo "scancel failed")"
# Requeued: back to PENDING with one restart (Slurm holds it until its EligibleTime).
st=$(wait_state "$j2" 60 PENDING COMPLETED FAILED CANCELLED)
restarts=$(job_field "$j2" Restarts)
verdict "job 2 requeued after the warning (state $st, restarts $restarts)" \
  "$([ "$st" = PENDING ] && [ "$restarts" = 1 ] || echo "state $st, restarts $restarts")"
at=$(sed -n 's/^fgpipe: checkpoint at step \([0-9]*\) written.*/\1/p' "$dir/job2.out" | tail -n 1)
grep -q "fgpipe: stopped by a signal after step $at" "$dir/job2.out"
verdict "job 2 wrote a checkpoint at step ${at:-?} and stopped there" "$([ $? -eq 0 ] && [ -n "$at" ] || echo "no checkpoint-and-stop lines")"
grep -q "requeueing job $j2" "$dir/job2.out"
verdict "the batch script requeued the job itself" "$([ $? -eq 0 ] || echo "no 'requeueing job' line")"
# Slurm's requeue delay also covers the old run's cleanup: slurmd refuses a batch launch whose
# credential is not newer, in whole seconds, than the revocation of the killed run's ("Job
# credential revoked"). So: node idle again, and 2 s past the requeue.
for _ in $(seq 150); do [ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && break; sleep 0.2; done
sleep 2
scontrol update jobid="$j2" StartTime=now
st=$(wait_state "$j2" 180 COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL)
ec=$(job_field "$j2" ExitCode)
verdict "requeued job 2 COMPLETED with exit code 0:0 ($st, $ec)" "$([ "$st" = COMPLETED ] && [ "$ec" = 0:0 ] || echo "state $st, exit $ec")"
grep -q "fgpipe: resumed from $dir/job2/checkpoint.h5 at step $at\$" "$dir/job2.out"
verdict "the requeued run resumed from the checkpoint at step ${at:-?}" "$([ $? -eq 0 ] || echo "no 'resumed from ... at step $at' line")"
grep -q "result: $steps steps" "$dir/job2.out"
verdict "the requeued run finished all $steps steps" "$([ $? -eq 0 ] || echo "no 'result: $steps steps' line")"
[ "$failed" -eq 0 ] || { show "$dir/job2.out"; show "$dir/slurmctld.log"; show "$dir/slurmd.log"; }

# The same run without Slurm and without a stop: the same bits.
timeout 300 mpirun -np 4 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
  --config "$config" --set stages=2 --set replicas=2 "${small[@]}" --set steps=$steps \
  --save-params "$dir/straight.bin" >"$dir/straight.log" 2>&1
[ -f "$dir/straight.bin" ] || show "$dir/straight.log"
cmp -s "$dir/job2.bin" "$dir/straight.bin"
verdict "stopped, requeued and resumed weights equal the uninterrupted run's, bitwise" \
  "$([ $? -eq 0 ] || echo "differ ($(cmp "$dir/job2.bin" "$dir/straight.bin" 2>&1 | head -n 1))")"

# --- 3: fgpipe-gpu.sbatch: one rank per (stand-in) GPU --------------------------------------------
printf '#!/bin/sh\necho "task ${SLURM_PROCID:-?} CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset}" >&2\nexec "%s" "$@"\n' \
  "$fgpipe" >"$dir/show-gpu"
chmod +x "$dir/show-gpu"
j3=$(FGPIPE=$dir/show-gpu FGPIPE_OUT=$dir/job3 FGPIPE_DEVICE=cpu sbatch --parsable --ntasks-per-node=4 --cpus-per-task=1 \
     --time=10 -o "$dir/job3.out" "$root/launch/slurm/fgpipe-gpu.sbatch" "$config" "${small[@]}" \
     --set steps=10 2>"$dir/sbatch3.err")
[ -n "$j3" ] && jobs+=("$j3")
st=$([ -n "$j3" ] && wait_state "$j3" 120 COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL)
ec=$([ -n "$j3" ] && job_field "$j3" ExitCode)
verdict "fgpipe-gpu.sbatch job COMPLETED with exit code 0:0 (${st:-not submitted}, $ec)" \
  "$([ "$st" = COMPLETED ] && [ "$ec" = 0:0 ] && grep -q "result: 10 steps" "$dir/job3.out" ||
     echo "state $st, exit $ec; $(cat "$dir/sbatch3.err" 2>/dev/null)")"
gpus=$(sed -n 's/^task \([0-9]\) CUDA_VISIBLE_DEVICES=\(.*\)/\1:\2/p' "$dir/job3.out" 2>/dev/null | sort | tr '\n' ' ')
distinct=$(sed -n 's/^task [0-9] CUDA_VISIBLE_DEVICES=//p' "$dir/job3.out" 2>/dev/null | grep -x '[0-9]' | sort -u | wc -l)
verdict "each of the 4 tasks sees one GPU of its own ($gpus)" "$([ "$distinct" -eq 4 ] || echo "$distinct distinct single GPUs")"
[ "$failed" -eq 0 ] || show "$dir/job3.out"
# --- 4: the script's own `#SBATCH --signal=B:USR1@120`, sent by Slurm at a real time limit ---------
# With --time=1 the warning is due at once; slurmctld sends it at its next time-limit check.
j4=$(FGPIPE_OUT=$dir/job4 sbatch --parsable --ntasks-per-node=4 --time=1 -o "$dir/job4.out" \
     "$root/launch/slurm/fgpipe-cpu.sbatch" "$config" "${small[@]}" --set steps=1000000 2>"$dir/sbatch4.err")
[ -n "$j4" ] && jobs+=("$j4")
t4=$SECONDS
warned=false
for _ in $(seq 900); do grep -q "requeueing job $j4" "$dir/job4.out" 2>/dev/null && { warned=true; break; }; sleep 0.1; done
verdict "at the time limit Slurm sent the warning, the job checkpointed and requeued itself ($((SECONDS - t4)) s)" \
  "$($warned && grep -q "fgpipe: stopped by a signal after step" "$dir/job4.out" || echo "no warning within 90 s")"
[ -n "$j4" ] && scancel "$j4"
$warned || show "$dir/job4.out"
finish
