#!/usr/bin/env bash
# Out-of-core stages (--mem-budget, --weights-dir): training that streams every stage's layers
# from a layer store through two or three slots equals training in memory byte for byte (losses
# and final weights) for fg, fg+bp and bp on 1 and 2 stages; the peak RSS stays under a budget
# that counts the process's runtime (mem_runtime); SIGKILL mid-run, then --resume-weights,
# ends with the uninterrupted run's weights; a missing or full weights dir and a budget too small
# are refused with exit 2 and a message naming the problem.
# usage: out_of_core.sh FGPIPE CONFIG
# FGPIPE_TIER=quick: fg+bp (cv) on 2 stages against memory and its log; rest: everything else.
. "$(dirname "$0")/lib.sh" "$@"
# Deep and narrow, so that a stage's layers outweigh what a streaming stage keeps in memory.
model=784-512-512-512-512-512-512-512-512-10
# mem_runtime=0: the budgets here are the stage's own bytes (section 2 counts the runtime), not
# the process's, whose measured runtime varies between processes (docs/out-of-core.md)
base=(--set model=$model --set warmup_steps=0 --set steps=12 --set print_every=1 --set mem_runtime=0)

run() {  # run M OUT BUDGET SETS... [-- ARGS]: a run on M stages (BUDGET -: in memory) into OUT/, OUT.bin
  local M=$1 out=$2 budget=$3; shift 3
  local sets=() extra=() R=1
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    sets+=(--set "$1"); [[ $1 == replicas=* ]] && R=${1#replicas=}; shift
  done
  [ "${1:-}" = "--" ] && { shift; extra=("$@"); }
  [ "$budget" != - ] && extra+=(--mem-budget "$budget" --weights-dir "$out.w") && mkdir -p "$out.w"
  timeout 300 mpirun -np $((M * R)) --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
    --config "$config" "${base[@]}" --set stages="$M" "${sets[@]}" --out "$out" \
    --save-params "$out.bin" --summary-json "$out.json" "${extra[@]}" >"$out.log" 2>&1
}

same() {  # same A B: the problem, if runs A and B differ in step,loss,lr or weights
  cmp -s <(cut -d, -f1-3 "$1/loss.csv") <(cut -d, -f1-3 "$2/loss.csv") || { echo "losses differ"; return; }
  cmp -s "$1.bin" "$2.bin" || echo "weights differ ($(cmp -l "$1.bin" "$2.bin" | wc -l) bytes)"
}

same_checkpoint() {  # same_checkpoint A B: the problem, if A's and B's checkpoints differ in values
  h5diff -q "$1/checkpoint.h5" "$2/checkpoint.h5" /params /params >/dev/null 2>&1 &&
    h5diff -q "$1/checkpoint.h5" "$2/checkpoint.h5" /optimizer /optimizer >/dev/null 2>&1 ||
    echo " checkpoints differ"
}

# 1. Equivalence, for every mode and the options that change what a step streams (lags 1 and 2's
# previous weights, the guide, clipping's second pass). The budgets (on 1 stage, on 2) give a
# stage two slots, and are below what every stage needs in memory (the test checks that every
# stage streams). Activations include what F keeps for U (local losses: inputs and estimates).
cases=("fg|14M|12.5M|mode=fg optimizer=sgd lr=0.0001"
       "fgbp|24M|22M|mode=fg+bp estimator=cv lag=0 select=2 optimizer=sgd lr=0.0001"
       "bp|20M|18M|mode=bp schedule=1f1b"
       "bp-zb|22M|18M|mode=bp schedule=zb"
       "fg-activity|18M|-|mode=fg perturb=activity optimizer=sgd lr=0.0001"
       "fg-local|25M|-|mode=fg perturb=activity local_groups=8 tangents=2 optimizer=sgd lr=0.0001"
       "mix-local-clip|32M|-|mode=fg+bp perturb=activity estimator=mix shrink=0.5 lag=0 select=2 local_groups=8 tangents=2 clip_norm=0.05 optimizer=sgd lr=0.001"
       "mix-activity|26M|-|mode=fg+bp perturb=activity estimator=mix shrink=0.5 lag=0 select=2 optimizer=sgd lr=0.0001"
       "fg-replicas|14M|12.5M|mode=fg optimizer=sgd lr=0.0001 replicas=2"
       "fgbp-replicas|24M|22M|mode=fg+bp estimator=cv lag=0 select=2 optimizer=sgd lr=0.0001 replicas=2"
       "bp-replicas|20M|18M|mode=bp schedule=1f1b replicas=2"
       "fgbp-lag1|29M|26M|mode=fg+bp estimator=cv lag=1 select=2 optimizer=sgd lr=0.0001"
       "fgbp-lag2|35M|31M|mode=fg+bp estimator=cv lag=2 select=2 optimizer=sgd lr=0.0001"
       "guided|24M|22M|mode=fg+bp estimator=guided tangents=1 lag=0 select=2 optimizer=sgd lr=0.0001"
       "guided-adam|30M|-|mode=fg+bp estimator=guided tangents=2 lag=0 select=2 optimizer=adam lr=0.0001"
       "fg-clip|14M|12.5M|mode=fg optimizer=sgd lr=0.001 clip_norm=0.05"
       "bp-clip|22M|-|mode=bp optimizer=sgd clip_norm=0.05")
for c in "${cases[@]}"; do
  IFS='|' read -r name budget1 budget2 sets <<<"$c"
  [ "$name" = fgbp ] || in_tier rest || continue
  read -r -a sets <<<"$sets"
  for M in 1 2; do
    # quick: fgbp on 2 stages only; rest: what quick leaves out
    if [ "$name" = fgbp ] && [ "$M" -eq 2 ]; then in_tier quick || continue
    elif [ "$tier" = quick ]; then continue; fi
    budget=$budget1; [ "$M" -eq 2 ] && budget=$budget2
    [ "$budget" = - ] && continue  # no budget streams every stage of this model on 2 stages
    run "$M" "$dir/$name-mem$M" - "${sets[@]}" -- --log "$dir/$name-mem$M.h5"; rc_mem=$?
    run "$M" "$dir/$name-ooc$M" "$budget" "${sets[@]}" -- --log "$dir/$name-ooc$M.h5"; rc_ooc=$?
    R=1; [[ $name == *-replicas ]] && R=2
    streams=$(grep -c "streams its layers" "$dir/$name-ooc$M.log")
    why=""
    if [ "$rc_mem" -ne 0 ] || [ "$rc_ooc" -ne 0 ]; then
      why="exit $rc_mem / $rc_ooc: $(grep error "$dir/$name-ooc$M.log" "$dir/$name-mem$M.log" | head -n 1)"
    elif [ "$streams" -ne $((M * R)) ]; then why="$streams of $((M * R)) stages streamed their layers"
    elif ! grep -qE "through 2 slots|slots \(2 of" "$dir/$name-ooc$M.log"; then why="no stage ran with only 2 slots of its largest layer"
    else why=$(same "$dir/$name-mem$M" "$dir/$name-ooc$M")$(same_checkpoint "$dir/$name-mem$M" "$dir/$name-ooc$M"); fi
    verdict "$name, M=$M: out of core ($budget) equals in memory, bitwise (losses, weights, HDF5 checkpoint)" "$why"
  done
done

# The step log of a streaming run: its rows are the progress's, and its gradient statistics
# (a second pass over the layers out of core) are the in-memory run's, bit for bit.
in_tier quick && verdict "fgbp, M=2, out of core: --log rows match loss.csv" "$(py_check "$dir/fgbp-ooc2.h5" "$dir/fgbp-ooc2/loss.csv" <<'PY'
import sys, h5py, numpy as np
s = h5py.File(sys.argv[1], "r")["steps"]
csv = np.genfromtxt(sys.argv[2], delimiter=",", names=True)
ok = len(s["loss"]) == len(csv) and np.allclose(s["loss"][:], csv["loss"], rtol=0, atol=5e-7)
print("" if ok else f"{len(s['loss'])} rows, loss.csv {len(csv)}")
PY
)"
for name in fgbp guided fg-clip fgbp-lag1 fgbp-lag2; do
  if [ "$name" = fgbp ]; then in_tier quick || continue; else in_tier rest || continue; fi
  verdict "$name, M=2: the log's gradient statistics out of core equal in memory's, bitwise" "$(py_check "$dir/$name-mem2.h5" "$dir/$name-ooc2.h5" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(f, "r")["steps"] for f in sys.argv[1:3])
keys = ["estimate_norm", "exact_norm", "cos_estimate_exact", "cos_fg_exact", "variance_reduction"]
bad = [k for k in keys if not np.array_equal(a[k][:], b[k][:], equal_nan=True)]
none = all(np.isnan(a[k][:]).all() for k in keys)
print(("differ: " + ", ".join(bad)) if bad else "all NaN" if none else "")
PY
)"
done
in_tier rest || finish

# 2. Peak RSS (the process's own getrusage, in --summary-json) against a budget that covers the
# whole process: a wider model (14.9 M parameters, 238 MB in memory with SGD momentum) with the
# runtime measured (mem_runtime = -1: the program, its libraries and the data set, 0.2 GB).
# The floor a 1-byte budget's refusal names is the runtime more than with mem_runtime = 0; a
# run at that floor, in another process (whose runtime differs by a few hundred KB), streams,
# shows the runtime in its memory report, peaks within the budget, and ends with the in-memory
# weights.
wide=(model=784-2048-2048-2048-2048-10 mode=fg optimizer=sgd lr=0.0001 steps=3)
floor_of() { grep -oE "at least [0-9]+ bytes" "$1.log" | grep -oE "[0-9]+"; }
run 1 "$dir/rss-probe0" 1 "${wide[@]}"
run 1 "$dir/rss-probe" 1 "${wide[@]}" mem_runtime=-1
floor0=$(floor_of "$dir/rss-probe0") floor=$(floor_of "$dir/rss-probe")
runtime=$(grep -oE "the runtime takes [0-9]+ bytes" "$dir/rss-probe.log" | grep -oE "[0-9]+")
verdict "the floor with the runtime measured is the floor without it plus the runtime (${runtime:-?} bytes)" \
  "$([ -n "$floor0" ] && [ -n "$runtime" ] && [ "$runtime" -gt $((8 * 1048576)) ] &&
     [ "$floor" -eq $((floor0 + runtime)) ] || echo "floor ${floor:-?} against ${floor0:-?} + ${runtime:-?}")"
run 1 "$dir/rss-mem" - "${wide[@]}"
run 1 "$dir/rss-ooc" "${floor:-1}" "${wide[@]}" mem_runtime=-1
rss() { grep -o '"peak_rss_bytes": [0-9]*' "$1.json" | grep -o '[0-9]*$'; }
mem=$(rss "$dir/rss-mem") ooc=$(rss "$dir/rss-ooc")
echo "# peak RSS: in memory $((${mem:-0} / 1048576)) MiB, out of core $((${ooc:-0} / 1048576)) MiB, budget $((${floor:-0} / 1048576)) MiB"
verdict "peak RSS out of core <= the budget (the floor the probe named; in memory it is more)" \
  "$(grep -q "streams its layers" "$dir/rss-ooc.log" || echo "not streamed: $(grep -m1 error "$dir/rss-ooc.log")")$([ -n "$ooc" ] && [ "$ooc" -le "${floor:-0}" ] && [ "$mem" -gt "${floor:-0}" ] || echo " ooc ${ooc:-?} mem ${mem:-?} budget ${floor:-?}")"
verdict "the memory report shows the runtime (memory line and summary.json)" \
  "$(grep -qE "^memory: .* runtime [0-9.]+" "$dir/rss-ooc.log" || echo "no runtime in the memory line")$(grep -qE '"runtime": \[[1-9]' "$dir/rss-ooc.json" || echo " no runtime in summary.json")"
verdict "peak RSS: same weights in and out of core" "$(same "$dir/rss-mem" "$dir/rss-ooc")"

# 3. SIGKILL mid-run, then --resume-weights (twice, on 2 stages), against an uninterrupted run.
resume_sets=(mode=fg optimizer=sgd lr=0.0001 steps=40)
out="$dir/killed"
resumed=()
for round in 1 2 3; do
  extra=(); [ "$round" -gt 1 ] && extra=(--resume-weights)
  sets=(); for kv in "${resume_sets[@]}"; do sets+=(--set "$kv"); done
  mkdir -p "$out.w"
  rm -f "$out.log"  # here, not in the background run: kill_after must not read the last round's log
  timeout 300 mpirun -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
    --config "$config" "${base[@]}" --set stages=2 "${sets[@]}" --out "$out" --save-params "$out.bin" \
    --mem-budget 12.5M --weights-dir "$out.w" "${extra[@]}" >"$out.log" 2>&1 &
  pid=$!
  [ "$round" -lt 3 ] && kill_after "$out" 6
  wait "$pid"; rc=$?
  step=$(grep -o "resumed from the layer stores .* at step [0-9]*" "$out.log" | grep -o "[0-9]*$" || true)
  [ "$round" -gt 1 ] && resumed+=("${step:-none}")
done
echo "# killed twice, resumed at steps ${resumed[*]}"
run 2 "$dir/straight" 12.5M "${resume_sets[@]}"
first=${resumed[1]}
verdict "SIGKILL twice, --resume-weights (at steps ${resumed[*]}): exit 0, the uninterrupted run's weights" \
  "$([ "$rc" -eq 0 ] || echo "exit $rc: $(grep error "$out.log" | head -n 1)")$(cmp -s "$out.bin" "$dir/straight.bin" || echo " weights differ")$([ "${resumed[0]}" != none ] && [ "$first" != none ] && [ "$first" -lt 40 ] || echo " a run was not resumed mid-run")"
verdict "the resumed run's losses equal the uninterrupted run's from step $first" \
  "$([ "$first" != none ] && cmp -s <(cut -d, -f1-3 "$out/loss.csv" | awk -F, -v f="$first" 'NR == 1 || $1 >= f') \
             <(cut -d, -f1-3 "$dir/straight/loss.csv" | awk -F, -v f="$first" 'NR == 1 || $1 >= f') || echo differ)"

# 4. HDF5 checkpoints cross between memory and flash: a run stopped by SIGUSR1 writes its
# checkpoint (out of core: from its slots, after the pending update), and a run resumed from
# it on the other side ends with the uninterrupted run's weights ($dir/straight, 40 steps).
stop_after() {  # stop_after OUT N: SIGUSR1 to the run writing OUT once it has done N steps
  for _ in $(seq 2400); do
    grep -q "step $2/" "$1.log" 2>/dev/null && break
    sleep 0.05
  done
  pkill -USR1 -f "^mpirun .*--out $1( |$)"  # mpirun, not the timeout whose command names it
}
cross() {  # cross NAME M_STOP BUDGET_STOP M_RESUME BUDGET_RESUME
  local name=$1 out="$dir/$1-stopped"; shift
  local sets=(); for kv in "${resume_sets[@]}"; do sets+=(--set "$kv"); done
  local extra=(); [ "$2" != - ] && extra=(--mem-budget "$2" --weights-dir "$out.w") && mkdir -p "$out.w"
  timeout 300 mpirun -np "$1" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
    --config "$config" "${base[@]}" --set stages="$1" "${sets[@]}" --out "$out" "${extra[@]}" >"$out.log" 2>&1 &
  local pid=$!
  stop_after "$out" 8
  wait "$pid"; local rc=$?
  local step; step=$(grep -o "stopped by a signal after step [0-9]*" "$out.log" | grep -o "[0-9]*$" || true)
  run "$3" "$dir/$name-resumed" "$4" "${resume_sets[@]}" -- --resume "$out"
  local rc2=$?
  verdict "$name: stopped at step ${step:-?} with a checkpoint, resumed: the uninterrupted run's weights" \
    "$([ "$rc" -eq 0 ] && [ -n "$step" ] && [ "$step" -lt 40 ] || echo "stop: exit $rc, step ${step:-none}")$([ "$rc2" -eq 0 ] || echo " resume: exit $rc2: $(grep error "$dir/$name-resumed.log" | head -n 1)")$(cmp -s "$dir/$name-resumed.bin" "$dir/straight.bin" || echo " weights differ")"
}
cross "memory-to-flash" 1 - 2 14M
cross "flash-to-memory" 2 14M 1 -

# 5. Bad input: exit 2 and a message naming the problem.
refused() {  # refused LABEL PATTERN ARGS...: the run exits 2 and its error matches PATTERN
  local label=$1 pattern=$2; shift 2
  timeout 120 "$fgpipe" train --config "$config" "${base[@]}" --set mode=fg --set optimizer=sgd "$@" >"$dir/refused.log" 2>&1
  local rc=$?
  verdict "$label" "$([ "$rc" -eq 2 ] && grep -q "$pattern" "$dir/refused.log" || echo "exit $rc: $(grep error "$dir/refused.log")")"
}
touch "$dir/a-file"
refused "weights dir under a file: refused" "weights-dir $dir/a-file/w: $dir/a-file is not a directory" \
  --mem-budget 14M --weights-dir "$dir/a-file/w"
refused "budget below the floor (two slots of the largest layer, or one and three small ones): refused naming the layer and the minimum" "is too small for stage 0.*slots\? of its largest layer, fc[0-9]*.*, [0-9]* more (at least [0-9]* bytes" \
  --mem-budget 4M --weights-dir "$dir"
refused "--resume-weights without a store: refused" "no layer store" \
  --mem-budget 14M --weights-dir "$dir" --resume-weights
refused "mem_budget without weights_dir: refused" "weights_dir is not" --mem-budget 14M
run 1 "$dir/tiny" - mode=fg optimizer=sgd lr=0.0001 steps=1 model=784-16-10  # its checkpoint
refused "--resume from another model's checkpoint, out of core: refused" "is of another model: it has model = 784-16-10" \
  --mem-budget 14M --weights-dir "$dir" --resume "$dir/tiny"
# A full disk: a 24 MiB tmpfs cannot hold the 2-slot store of a 14.9 M-parameter stage: refused
# before anything is written, naming the bytes it has and needs.
full="$dir/full"
mkdir -p "$full"
if mount -t tmpfs -o size=24m tmpfs "$full" 2>/dev/null; then
  refused "disk full at store creation: refused naming the bytes, nothing left behind" \
    "weights dir $full has 0.02[0-9]* GB free; stage layers 0..[0-9]* need 0.[0-9]* GB" \
    --set model=784-2048-2048-2048-2048-10 --mem-budget 128M --weights-dir "$full"
  left=$(ls -A "$full")
  verdict "disk full: no half-made store left" "$([ -z "$left" ] || echo "left: $left")"
  umount "$full"
else
  echo "SKIP disk full: cannot mount a tmpfs here (needs root); not counted"
fi
finish
