#!/usr/bin/env bash
# Evaluation at the bound (docs/out-of-core.md, "Evaluation in passes"): a streamed stage scores
# the validation set in passes of as many windows as its stashes' memory holds, reading its
# store once a pass: the test loss and accuracy equal the run's in memory bit for bit
# (summary.json's, at full precision) on 1 and 2 stages, the passes hold more windows than a
# step's micro-batches and the evaluation reads at most a store a pass; SIGTERM during the
# final evaluation ends the run within a second with the exit code of a stopped run (0), the
# checkpoint written before it whole (its parameters those of the run in memory) and no test
# loss (null); SIGTERM ends `fgpipe eval` at once (128 + 15).
#
# usage: eval_pass.sh FGPIPE CONFIG   (CONFIG: launch/configs/gpt-kjv.conf)
. "$(dirname "$0")/lib.sh" "$@"
# 12 000 validation tokens: 750 windows of 16, in 375 micro-batches of 2.
kjv_tokens 32000 20000
base=(--set data=tokens --set train_tokens="$dir/train.bin" --set val_tokens="$dir/val.bin"
      --set vocab=256 --set n_layer=2 --set n_embd=64 --set n_head=2 --set ctx=16
      --set micro_batch=2 --set micro_batches=2 --set steps=3 --set warmup_steps=0
      --set mode=bp --set schedule=zb --set eval_every=0 --set print_every=1000000
      --set mem_runtime=0)

run() {  # run NAME M BUDGET [ARGS...]: M stages (BUDGET -: in memory) into NAME/, NAME.json
  local name=$1 M=$2 budget=$3; shift 3
  local extra=("$@") mpi=()
  [ "$budget" != - ] && rm -rf "$dir/$name.w" && mkdir -p "$dir/$name.w" &&
    extra+=(--mem-budget "$budget" --weights-dir "$dir/$name.w")
  [ "$M" -gt 1 ] && mpi=(mpirun -np "$M" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
  timeout 120 "${mpi[@]}" "$fgpipe" train --config "$config" "${base[@]}" --set stages="$M" \
    --out "$dir/$name" --summary-json "$dir/$name.json" "${extra[@]}" >"$dir/$name.log" 2>&1
}

field() {  # field NAME KEY: summary.json's KEY as written
  grep -oE "\"$2\": [^,}]*" "$dir/$1.json" 2>/dev/null | head -n 1 | sed 's/^[^:]*: //'
}

for M in 1 2; do
  # The floor the refusal of a 1-byte budget names with two slots (the largest over the stages).
  run "probe$M" "$M" 1
  budget=$(grep -oE "(at least [0-9]* bytes\)|[0-9]* bytes with two slots)" "$dir/probe$M.log" |
           grep -oE "[0-9]+" | sort -n | tail -n 1)
  run "mem$M" "$M" -
  run "ooc$M" "$M" "${budget:-1}"
  why=""
  if [ -z "$budget" ]; then why="no floor from the probe: $(grep -m1 error "$dir/probe$M.log")"
  elif [ "$(grep -c "streams its layers" "$dir/ooc$M.log")" -ne "$M" ]; then
    why="not every stage streamed: $(grep -m1 error "$dir/ooc$M.log")"
  else
    for k in test_loss test_acc; do
      a=$(field "mem$M" $k) b=$(field "ooc$M" $k)
      [ -n "$a" ] && [ "$a" = "$b" ] || why="$why $k $a in memory, $b streamed"
    done
  fi
  verdict "$M stage(s): the streamed evaluation (at $budget bytes) equals the in-memory one bit for bit" "$why"
  [ "$M" -eq 2 ] && budget2=$budget

  # Every streamed stage: windows a pass, passes, bytes read against its store's bytes.
  verdict "$M stage(s): passes of many windows, a store read at most once a pass" "$(py_check "$dir/ooc$M.log" "$M" <<'PY'
import re, sys
log, M = open(sys.argv[1]).read(), int(sys.argv[2])
windows, group = 375, 2  # micro-batches of the set (750 windows of 16 tokens); the step's
plans = {int(s): (int(g), int(b)) for s, g, b in
         re.findall(r"stage (\d) evaluates up to (\d+) windows a pass .*: its layers \((\d+) bytes\)", log)}
lines = re.findall(r"stage (\d) evaluation: (\d+) windows in (\d+) passes of up to (\d+): read [0-9.]+ GB "
                   r"\((\d+) bytes", log)
problems = []
if len(lines) != M or len(plans) != M:
    problems.append(f"{len(lines)} evaluation lines and {len(plans)} plans for {M} stages")
for s, w, passes, g, read in lines:
    s, w, passes, g, read = int(s), int(w), int(passes), int(g), int(read)
    plan, store = plans.get(s, (0, 0))
    # At least twice a step's micro-batches a pass: half the passes, or fewer, of a pass per
    # micro-batch group (before).
    if w != windows or passes != -(-w // g) or g < 2 * group or g > plan:
        problems.append(f"stage {s}: {w} windows in {passes} passes of {g} (plan {plan})")
    # A pass reads each layer's weights once at most (read-ahead into the next pass included),
    # each buffer in whole 4 KiB pages (direct I/O: up to a tenth more at this tiny size).
    if read > passes * store * 1.25 or read < (passes - 1) * store / 2:
        problems.append(f"stage {s}: read {read} bytes in {passes} passes of a {store}-byte store")
print("; ".join(problems))
PY
)"
done

# SIGTERM during the final evaluation: 40 000 validation tokens, one stage streamed, sent once
# the checkpoint (written before the evaluation) is there.
kjv_tokens 200000 20000
budget=$(grep -oE "(at least [0-9]* bytes\)|[0-9]* bytes with two slots)" "$dir/probe1.log" | grep -oE "[0-9]+" | sort -n | tail -n 1)
# stop_during_eval NAME MEM SIGNAL LIMIT LAUNCH...: LAUNCH (a streamed run into $dir/NAME, in the
# background) gets SIGNAL once its checkpoint (written before the evaluation) is there; the
# problems: not exit 0 within LIMIT seconds, or a checkpoint that is not run MEM's (the same
# steps in memory, on 12 000 validation tokens: the training set is the same).
stop_during_eval() {
  local name=$1 mem=$2 signal=$3 limit=$4 pid why=""; shift 4
  mkdir -p "$dir/$name.w"
  "$@" >"$dir/$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 1200); do [ -s "$dir/$name/checkpoint.h5" ] && break; sleep 0.05; done
  sleep 0.5
  signal_stop "$pid" "$signal" 0 "$limit" "$dir/$name.log"
  why=$stop_problem
  h5diff -q "$dir/$name/checkpoint.h5" "$dir/$mem/checkpoint.h5" /params /params >/dev/null 2>&1 ||
    why="$why; the checkpoint's /params differ from the run in memory's (or it is unreadable)"
  echo "$why"
}
why=$(stop_during_eval term mem1 TERM 2 "$fgpipe" train --config "$config" "${base[@]}" --mem-budget "${budget:-1}" \
      --weights-dir "$dir/term.w" --out "$dir/term" --summary-json "$dir/term.json")
elapsed=$(grep -o "it took [0-9.]* s" <<<"$why" || echo "under 2 s")
grep -q "stopped by a signal: no test loss" "$dir/term.log" || why="$why; no line saying the evaluation stopped"
grep -q "stage 0 evaluation stopped by a signal" "$dir/term.log" || why="$why; no evaluation line saying it stopped"
[ "$(field term val_loss)" = null ] || why="$why; val_loss $(field term val_loss), not null"
verdict "SIGTERM during the evaluation: exit 0 ($elapsed), the checkpoint whole, no test loss" "$why"

# On 2 stages: SIGUSR1 (Slurm's warning before the time limit; mpirun forwards it to every rank,
# where SIGTERM would end the job) stops it the same way, the stages telling each other.
why=$(stop_during_eval term2 mem2 USR1 3 mpirun -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
      "$fgpipe" train --config "$config" "${base[@]}" --set stages=2 --mem-budget "$budget2" \
      --weights-dir "$dir/term2.w" --out "$dir/term2")
elapsed=$(grep -o "it took [0-9.]* s" <<<"$why" || echo "under 3 s")
[ "$(grep -c "stage [01] evaluation stopped by a signal" "$dir/term2.log")" -eq 2 ] || why="$why; not both stages' evaluations stopped"
verdict "2 stages, SIGUSR1 during the evaluation: exit 0 ($elapsed), the checkpoint whole" "$why"

# fgpipe eval reads a checkpoint and changes nothing: SIGTERM ends it at once.
"$fgpipe" eval --checkpoint "$dir/mem1/checkpoint.h5" --tokens "$dir/val.bin" --batch 1 \
  >"$dir/eval.log" 2>&1 &
pid=$!
sleep 1
signal_stop "$pid" TERM 143 1 "$dir/eval.log"
why=$stop_problem
grep -q "stopped by a signal" "$dir/eval.log" || why="$why; no line saying so"
verdict "SIGTERM ends fgpipe eval at once (exit 143)" "$why"
finish
