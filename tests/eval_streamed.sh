#!/usr/bin/env bash
# fgpipe eval --mem-budget (docs/out-of-core.md, "fgpipe eval of a checkpoint larger than the
# budget"): a checkpoint's layers stream through the budget from a layer store made from it in
# --weights-dir, in passes of as many windows as the budget holds: the loss and accuracy equal
# the in-memory eval's bit for bit (byte vocabulary: one block of head columns; vocab 5000 with
# head_block 1024: five, the running softmax, and the token table in row blocks), a pass reads
# about the store once, a larger budget takes more windows a pass; the checkpoint is unchanged
# and no store is left in --weights-dir; a budget below the floor is refused naming the
# smallest that works (exit 2), as are --mem-budget without --weights-dir, --logits and --ctx
# with it; SIGTERM ends a streamed eval at once (143).
#
# usage: eval_streamed.sh FGPIPE CONFIG   (CONFIG: launch/configs/gpt-kjv.conf)
. "$(dirname "$0")/lib.sh" "$@"
# 12 000 validation tokens: 749 windows of 16.
kjv_tokens 32000 20000
base=(--set data=tokens --set train_tokens="$dir/train.bin" --set val_tokens="$dir/val.bin"
      --set n_layer=2 --set n_embd=64 --set n_head=2 --set ctx=16 --set micro_batch=2
      --set micro_batches=2 --set steps=3 --set warmup_steps=0 --set mode=bp --set eval_every=0
      --set print_every=1000000 --set mem_runtime=0)  # the stored config's runtime: 0 bytes

field() {  # field FILE KEY: the summary's KEY as written
  grep -oE "\"$2\": [^,}]*" "$1" 2>/dev/null | head -n 1 | sed 's/^[^:]*: //'
}

floor_of() {  # floor_of LOG: the smallest budget a refusal names (with two slots where named)
  grep -oE "(at least [0-9]* bytes|[0-9]* bytes with two slots)" "$1" | grep -oE "[0-9]+" | sort -n | tail -n 1
}

ev() {  # ev NAME CHECKPOINT [ARGS...]: fgpipe eval into NAME.json and NAME.log; its exit code
  local name=$1 ck=$2; shift 2
  timeout 120 "$fgpipe" eval --checkpoint "$ck" --tokens "$dir/val.bin" --summary-json "$dir/$name.json" \
    "$@" >"$dir/$name.log" 2>&1
}

# Streamed at BUDGET against the in-memory eval REF: the same loss and accuracy, bit for bit,
# streamed in passes that read about one store each; prints its windows a pass.
check_streamed() {  # check_streamed LABEL CHECKPOINT REF NAME BUDGET
  local label=$1 ck=$2 ref=$3 name=$4 budget=$5 why=""
  rm -rf "$dir/$name.w" && mkdir "$dir/$name.w"
  ev "$name" "$ck" --mem-budget "$budget" --weights-dir "$dir/$name.w"; local rc=$?
  if [ "$rc" -ne 0 ]; then why="exit $rc: $(grep -m1 error "$dir/$name.log")"
  elif ! grep -q "streams its layers" "$dir/$name.log"; then why="it did not stream"
  else
    for k in loss accuracy windows; do
      a=$(field "$dir/$ref.json" $k) b=$(field "$dir/$name.json" $k)
      [ -n "$a" ] && [ "$a" = "$b" ] || why="$why $k $a in memory, $b streamed"
    done
    why="$why$(py_check "$dir/$name.log" <<'PY'
import re, sys
log = open(sys.argv[1]).read()
plan = re.search(r"evaluates up to (\d+) windows a pass .*: its layers \((\d+) bytes\)", log)
line = re.search(r"evaluation: (\d+) windows in (\d+) passes of up to (\d+): read [0-9.]+ GB \((\d+) bytes", log)
if not plan or not line:
    print(" no plan or evaluation line")
else:
    store = int(plan.group(2))
    w, passes, g, read = (int(x) for x in line.groups())
    if passes != -(-w // g) or g != int(plan.group(1)):
        print(f" {w} windows in {passes} passes of {g} (plan {plan.group(1)})")
    # each pass reads each layer once at most (whole 4 KiB pages: up to a quarter more at this
    # size; a table kept in its slot between passes is not read again)
    elif read > passes * store * 1.25:
        print(f" read {read} bytes in {passes} passes of a {store}-byte store")
PY
)"
  fi
  [ -z "$(ls -A "$dir/$name.w")" ] || why="$why; left in --weights-dir: $(ls "$dir/$name.w" | head -n 3 | tr '\n' ' ')"
  verdict "$label" "$why"
  windows=$(grep -oE "passes of up to [0-9]+" "$dir/$name.log" | grep -oE "[0-9]+$")
}

# Byte vocabulary (256: the head's columns in one block).
timeout 120 "$fgpipe" train --config "$config" "${base[@]}" --set vocab=256 --out "$dir/run" >"$dir/run.log" 2>&1 ||
  { echo "FAIL training the checkpoint: $(grep -m1 error "$dir/run.log")"; exit 1; }
ck=$dir/run/checkpoint.h5
sum=$(md5sum <"$ck")
ev mem "$ck" || echo "FAIL the in-memory eval: $(grep -m1 error "$dir/mem.log")"

ev probe "$ck" --mem-budget 1 --weights-dir "$dir/probe.w"; rc=$?
floor=$(floor_of "$dir/probe.log")
why=""
[ "$rc" -eq 2 ] || why="exit $rc, not 2"
[ -n "$floor" ] || why="$why; no smallest budget named: $(grep -m1 error "$dir/probe.log")"
grep -q "mem_budget 1 bytes is too small" "$dir/probe.log" || why="$why; the budget not named"
verdict "a 1-byte budget is refused naming the smallest that works ($floor bytes), exit 2" "$why"

# One byte below the smallest it names (one slot of the table and small ones, where that is less
# than two slots of the table) is refused.
least=$(grep -oE "at least [0-9]* bytes" "$dir/probe.log" | grep -oE "[0-9]+" | head -n 1)
ev below "$ck" --mem-budget $((${least:-2} - 1)) --weights-dir "$dir/below.w"; rc=$?
[ "$rc" -eq 2 ] && verdict "one byte below it is refused too (exit 2)" "" ||
  verdict "one byte below it is refused too (exit 2)" "exit $rc"

check_streamed "at the floor ($floor bytes): the in-memory loss and accuracy bit for bit, a store read a pass" \
  "$ck" mem floor "${floor:-1}"
at_floor=${windows:-0}
roomy=$((${floor:-0} + 200000))  # still below the stage in memory
check_streamed "at $roomy bytes: the same, in passes of more windows" "$ck" mem roomy "$roomy"
[ "${windows:-0}" -gt "$at_floor" ] && [ "$at_floor" -ge 1 ] &&
  verdict "a larger budget holds more windows a pass ($at_floor at the floor, ${windows:-0} at $roomy)" "" ||
  verdict "a larger budget holds more windows a pass" "$at_floor at the floor, ${windows:-none} at $roomy"

# vocab 5000, head_block 1024: five blocks of head columns (the running softmax), the token
# table in row blocks at the floor the refusal names for them.
timeout 120 "$fgpipe" train --config "$config" "${base[@]}" --set vocab=5000 --set head_block=1024 \
  --out "$dir/run5k" >"$dir/run5k.log" 2>&1 ||
  { echo "FAIL training the vocab-5000 checkpoint: $(grep -m1 error "$dir/run5k.log")"; exit 1; }
ev mem5k "$dir/run5k/checkpoint.h5" || echo "FAIL the in-memory eval: $(grep -m1 error "$dir/mem5k.log")"
ev probe5k "$dir/run5k/checkpoint.h5" --mem-budget 1 --weights-dir "$dir/probe5k.w"
floor5k=$(grep -oE "in row blocks .*at least [0-9]+ bytes" "$dir/probe5k.log" | grep -oE "[0-9]+ bytes" | grep -oE "[0-9]+")
check_streamed "vocab 5000 in 5 head blocks at its row blocks' floor ($floor5k bytes): bit for bit" \
  "$dir/run5k/checkpoint.h5" mem5k floor5k "${floor5k:-1}"
grep -q "row blocks" "$dir/floor5k.log" && verdict "... with the token table in row blocks" "" ||
  verdict "... with the token table in row blocks" "no row blocks: $(grep -m1 "streams" "$dir/floor5k.log")"

[ "$(md5sum <"$ck")" = "$sum" ] && verdict "the checkpoint is unchanged" "" ||
  verdict "the checkpoint is unchanged" "its bytes changed"

# Options a streamed evaluation refuses by name.
why=""
ev r1 "$ck" --mem-budget 4M; [ $? -eq 2 ] && grep -q "needs --weights-dir" "$dir/r1.log" || why="no weights dir: $(tail -n 1 "$dir/r1.log")"
ev r2 "$ck" --weights-dir "$dir/r2.w"; [ $? -eq 2 ] && grep -q "needs --mem-budget" "$dir/r2.log" || why="$why; no budget: $(tail -n 1 "$dir/r2.log")"
ev r3 "$ck" --mem-budget 4M --weights-dir "$dir/r3.w" --logits "$dir/l.bin"; [ $? -eq 2 ] && grep -q -- "--logits with --mem-budget" "$dir/r3.log" || why="$why; --logits: $(tail -n 1 "$dir/r3.log")"
ev r4 "$ck" --mem-budget 4M --weights-dir "$dir/r4.w" --ctx 8; [ $? -eq 2 ] && grep -q -- "--ctx 8 with --mem-budget" "$dir/r4.log" || why="$why; --ctx: $(tail -n 1 "$dir/r4.log")"
verdict "refused by name (exit 2): --mem-budget without --weights-dir and the reverse, --logits, --ctx" "$why"

# SIGTERM during a streamed evaluation (200 000 validation tokens at the floor: a window a pass)
# ends it at once.
kjv_tokens 220000 20000
mkdir -p "$dir/term.w"
"$fgpipe" eval --checkpoint "$ck" --tokens "$dir/val.bin" --mem-budget "${floor:-1}" \
  --weights-dir "$dir/term.w" >"$dir/term.log" 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q "evaluates up to" "$dir/term.log" && break; sleep 0.05; done
sleep 0.5
signal_stop "$pid" TERM 143 1 "$dir/term.log"
why=$stop_problem
grep -q "evaluates up to" "$dir/term.log" || why="$why; it never began streaming"
verdict "SIGTERM ends a streamed eval at once (exit 143 in ${stop_seconds}s)" "$why"
finish
