#!/usr/bin/env bash
# The GPT on GPT-2's tokens (data = tokens, vocab 50257 padded to 50304): files made here by
# fgpipe tokenize (README and docs train, 20 KB of the KJV validates) train on 1 and 2 stages
# with identical losses and parameters (bp-zb and fg+bp), the loss falls, fgpipe eval scores
# the checkpoint exactly as the run scored its validation split, generate writes BPE text, and
# bad token files are refused by name; a run out of core equals it in memory.
# FGPIPE_TIER=rest: all but the long tier's cases (each behaviour once); long: the head in
# eleven blocks, bp-1f1b clipped, fg+bp cv out of core, row blocks in fg and fg+bp cv, bp-zb's
# checkpoint in row blocks.
# usage: gpt_tokens.sh FGPIPE CONFIG   (CONFIG: launch/configs/gpt-kjv.conf)
. "$(dirname "$0")/lib.sh" "$@"
root=$(realpath "$(dirname "$0")/..")
vocab=$(cd "$root" && realpath "$(launch/gpt2-vocab.sh)") || { echo "FAIL: no GPT-2 vocabulary"; exit 1; }
cat "$root"/README.md "$root"/docs/*.md >"$dir/train.txt"
head -c 20000 "$(cd "$root" && launch/text-corpus.sh 2>/dev/null)" >"$dir/val.txt"
for s in train val; do
  "$fgpipe" tokenize --vocab "$vocab" --in "$dir/$s.txt" --out "$dir/$s.bin" 2>"$dir/tok.err" ||
    { echo "FAIL: tokenize $s: $(tail -n 1 "$dir/tok.err")"; exit 1; }
done
# mem_runtime=0: the budgets here are the stage's own bytes (exact floors and slot counts), not
# the process's, whose measured runtime varies between processes (docs/out-of-core.md)
base=(--set data=tokens --set train_tokens="$dir/train.bin" --set val_tokens="$dir/val.bin"
      --set vocab=50257 --set pad_vocab=64 --set n_layer=2 --set n_embd=16 --set n_head=2
      --set ctx=16 --set micro_batch=2 --set micro_batches=2 --set steps=15 --set warmup_steps=0 --set lr=0.01
      --set eval_every=0 --set print_every=1000000 --set mem_runtime=0)

run() {  # run NAME M KEY=VALUE...: trains into $dir/NAME/ and $dir/NAME.bin
  local name=$1 M=$2; shift 2
  local sets=()
  for kv in "$@"; do sets+=(--set "$kv"); done
  timeout 120 mpirun -np "$M" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    "$fgpipe" train --config "$config" "${base[@]}" --set stages="$M" "${sets[@]}" \
    --out "$dir/$name" --save-params "$dir/$name.bin" --summary-json "$dir/$name.json" \
    >"$dir/$name.log" 2>&1 ||
    echo "mpirun -np $M exited with $?: $(grep -m1 error "$dir/$name.log")" >"$dir/$name.problem"
}

if in_tier rest; then  # (not indented: a heredoc's end starts its line)
for c in "bp-zb|mode=bp schedule=zb" "fgbp|mode=fg+bp perturb=activity estimator=mix shrink=0.5 select=2 lag=1"; do
  name=${c%%|*}
  read -r -a sets <<<"${c#*|}"
  for M in 1 2; do run "$name-M$M" "$M" "${sets[@]}"; done
  why=""
  for r in "$name-M1" "$name-M2"; do [ -f "$dir/$r.problem" ] && why="$r: $(cat "$dir/$r.problem")"; done
  if [ -z "$why" ]; then
    cmp -s <(cut -d, -f1-3 "$dir/$name-M1/loss.csv") <(cut -d, -f1-3 "$dir/$name-M2/loss.csv") || why="losses differ"
    cmp -s "$dir/$name-M1.bin" "$dir/$name-M2.bin" || why="$why params differ"
  fi
  verdict "$name on tokens: M=2 equals M=1" "$why"
done

verdict "bp-zb on tokens: the loss falls (first 3 steps' mean against the last 3's)" "$(py_check "$dir/bp-zb-M1/loss.csv" <<'PY'
import sys, numpy as np
loss = np.genfromtxt(sys.argv[1], delimiter=",", names=True)["loss"]
print("" if loss[-3:].mean() < loss[:3].mean() - 0.3 else f"{loss[:3].mean():.3f} -> {loss[-3:].mean():.3f}")
PY
)"

# fgpipe eval on the validation file: the run's validation loss, from the checkpoint alone.
"$fgpipe" eval --checkpoint "$dir/bp-zb-M1/checkpoint.h5" --tokens "$dir/val.bin" \
  --summary-json "$dir/eval.json" >"$dir/eval.log" 2>&1
verdict "eval: the checkpoint scores the validation tokens as the run did" "$(py_check "$dir/eval.json" "$dir/bp-zb-M1.json" <<'PY'
import json, sys
e, r = (json.load(open(p)) for p in sys.argv[1:3])
ok = abs(e["loss"] - r["val_loss"]) <= 1e-5 * r["val_loss"] and e["tokens"] == e["windows"] * 16
print("" if ok else f"eval {e['loss']} over {e['tokens']} tokens, run {r['val_loss']}")
PY
)"
out=$("$fgpipe" generate --checkpoint "$dir/bp-zb-M1/checkpoint.h5" --vocab "$vocab" \
      --prompt "In the beginning" --tokens 12 --top-k 40 2>"$dir/gen.err")
[ "${out#In the beginning}" != "$out" ] && [ ${#out} -gt 20 ] &&
  verdict "generate: BPE text after the prompt" "" ||
  verdict "generate: BPE text after the prompt" "rc/output: $(tail -n 1 "$dir/gen.err") '$out'"
fi

# Tokens out of core: a stage at the smallest budget that streams (the one the refusal of a
# 1-byte budget names: ONE slot of the token table and three small ones for the blocks' layers,
# the table's two copies taking turns in the one large slot, their gradients on flash in a
# spill file, not in memory) and at the budget it names for two
# large slots ends with the in-memory run's weights, bitwise, in bp-zb, fg and fg+bp (fg's floor
# takes row blocks with two slots instead: they fit it). GPT-2's token
# table would be most of this small model, so the ids are folded into a 1024-token vocabulary (its
# table outweighs two slots of the blocks' largest layer, so the floor has one slot of it).
/usr/bin/python3 -c "
import sys, numpy as np
for s in ('train', 'val'):
    (np.fromfile(f'{sys.argv[1]}/{s}.bin', dtype='<u2') % 1024).astype('<u2').tofile(f'{sys.argv[1]}/{s}1024.bin')" "$dir"
small=(--set train_tokens="$dir/train1024.bin" --set val_tokens="$dir/val1024.bin" --set vocab=1024 --set n_layer=3
       --set n_embd=64 --set steps=4 --no-checkpoint)
streamed() {  # streamed LABEL LARGE KEY=VALUE...: in memory against the floor's budget (LARGE 1) or
  # the floor plus a slot of the table (LARGE 2), bitwise
  local label=$1 large=$2 sets=() budget why=""; shift 2
  for kv in "$@"; do sets+=(--set "$kv"); done
  rm -rf "$dir/flash" && mkdir -p "$dir/flash"
  "$fgpipe" train --config "$config" "${base[@]}" "${small[@]}" "${sets[@]}" --mem-budget 1 --weights-dir "$dir/flash" >"$dir/probe.log" 2>&1
  budget=$(grep -o "at least [0-9]* bytes" "$dir/probe.log" | grep -o "[0-9]*" | head -n 1)
  [ "$large" -eq 2 ] && budget=$(grep -o "[0-9]* bytes with two slots" "$dir/probe.log" | grep -o "^[0-9]*")
  "$fgpipe" train --config "$config" "${base[@]}" "${small[@]}" "${sets[@]}" --save-params "$dir/ooc-mem.bin" >"$dir/ooc-mem.log" 2>&1
  "$fgpipe" train --config "$config" "${base[@]}" "${small[@]}" "${sets[@]}" --save-params "$dir/ooc.bin" \
    --mem-budget "${budget:-1}" --weights-dir "$dir/flash" >"$dir/ooc.log" 2>&1
  if [ -z "$budget" ]; then why="no budget from the probe: $(grep -m1 error "$dir/probe.log")"
  elif [ -n "${ROWS:-}" ] && ! grep -q "the token table streams in row blocks" "$dir/ooc.log"; then
    why="no row blocks chosen: $(grep -m1 -E 'error|streams' "$dir/ooc.log")"
  elif [ -z "${ROWS:-}" ] && ! grep -qE "slots \($large of" "$dir/ooc.log" &&  # one slot size (TIED=0, SIZES=1): no "(N of"
       ! { { [ "${TIED:-1}" = 0 ] || [ "${SIZES:-2}" = 1 ]; } && grep -qE "streams its layers .* through [0-9]+ slots(, the tied copies kept once)?$" "$dir/ooc.log"; }; then why="not streamed through $large large slot(s): $(grep -m1 -E 'error|streams' "$dir/ooc.log")"
  elif ! grep -q "out of core: .*-bound" "$dir/ooc.log"; then why="no bound line"
  elif [ "${TIED:-1}" = 1 ] && ! grep -q "tied copies' gradients on flash" "$dir/ooc.log"; then why="the tied copies' gradients not on flash"
  elif ! cmp -s "$dir/ooc-mem.bin" "$dir/ooc.bin"; then why="the weights differ"; fi
  local slots="$large slot(s) of the token table"
  [ -n "${ROWS:-}" ] && slots="its floor of $large slot(s) of the table whole, which takes row blocks that give two"
  verdict "tokens out of core ($label, $slots, budget ${budget:-?}): the in-memory weights, bitwise" "$why"
}
fgbp=(mode=fg+bp perturb=activity estimator=mix shrink=0.5 select=2 lag=0)
if in_tier rest; then
  streamed "fg+bp, the head's logits in one block of 1024 columns" 1 "${fgbp[@]}" head_block=1024
  streamed "bp-zb" 1 mode=bp schedule=zb head_block=96
  # fg's floor with the table whole in one slot has room for two slots of a row block: the
  # budget takes those (the table's read then overlaps the wave; docs/out-of-core.md).
  ROWS=1 streamed "fg" 1 mode=fg optimizer=sgd lr=0.0001 head_block=96
else
  # The head's logits in eleven blocks (head_block = 96, the last of 64 columns).
  streamed "fg+bp, eleven blocks" 1 "${fgbp[@]}" head_block=96
  streamed "fg+bp, eleven blocks" 2 "${fgbp[@]}" head_block=96
  streamed "bp-1f1b, clipped" 1 mode=bp schedule=1f1b clip_norm=0.05
  streamed "fg+bp cv lag 1" 1 mode=fg+bp estimator=cv select=1 lag=1 optimizer=sgd lr=0.0001
fi

# The token table in row blocks (table_block_rows, docs/out-of-core.md): the store, the waves and
# op U take the table (embedding 1040 rows, head 1024) 512 rows at a time, so its slot and the
# gradient buffer are a block's: the floor falls, and every mode still ends with the in-memory
# weights of the same config, bitwise.
# A block (512 x 64) is less than the three small slots the floor holds beside one large one
# (c_fc's 64 x 256 and bias, Adam's state), so this floor is two slots of a block, one size.
blocks=(head_block=128 table_block_rows=512)
if in_tier rest; then
  SIZES=1 streamed "bp-zb, the table in row blocks" 1 mode=bp schedule=zb "${blocks[@]}"
  # The table frozen (freeze = embedding, the tied head with it): the store keeps one copy of it,
  # written block by block once by the load, never by a step; no tied gradient (TIED=0).
  TIED=0 streamed "bp-zb, the table frozen in row blocks" 1 mode=bp schedule=zb freeze=embedding "${blocks[@]}"
else
  SIZES=1 streamed "fg, the table in row blocks" 1 mode=fg optimizer=sgd lr=0.0001 "${blocks[@]}"
  SIZES=1 streamed "fg+bp cv lag 1, the table in row blocks" 1 mode=fg+bp estimator=cv select=1 lag=1 optimizer=sgd lr=0.0001 "${blocks[@]}"
fi
floor() {  # floor KEY=VALUE...: the smallest budget the refusal of a 1-byte budget names
  local sets=()
  for kv in "$@"; do sets+=(--set "$kv"); done
  "$fgpipe" train --config "$config" "${base[@]}" "${small[@]}" "${sets[@]}" --mem-budget 1 \
    --weights-dir "$dir/flash" >"$dir/floor.log" 2>&1
  grep -o "at least [0-9]* bytes" "$dir/floor.log" | grep -o "[0-9]*" | head -n 1
}
# Checkpoints, --save-params and loads of the table in row blocks go a block at a time (the
# table's datasets by hyperslabs, the params file at the block's offset), and make the files a
# whole table makes: a streamed run in blocks at the floor's budget writes the datasets and
# --save-params of the same run in memory without blocks, bitwise (bp-zb: params and AdamW's m
# and v; fg+bp cv: its reference too). That checkpoint loads streamed in blocks as in memory
# without them: --init-from (weights) and --resume (all the state, 2 steps more), bitwise.
small_ck=()
for a in "${small[@]}"; do [ "$a" = --no-checkpoint ] || small_ck+=("$a"); done
table_run() {  # table_run NAME BUDGET KEY=VALUE... [-- ARGS...]: $dir/NAME.h5 and .bin (BUDGET 0: in memory)
  local name=$1 budget=$2 sets=() mem=(); shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do sets+=(--set "$1"); shift; done
  [ $# -gt 0 ] && shift
  [ "$budget" = 0 ] || { rm -rf "$dir/flash" && mkdir -p "$dir/flash" &&
                         mem=(--mem-budget "$budget" --weights-dir "$dir/flash"); }
  "$fgpipe" train --config "$config" "${base[@]}" "${small_ck[@]}" "${sets[@]}" "${mem[@]}" "$@" \
    --checkpoint "$dir/$name.h5" --save-params "$dir/$name.bin" >"$dir/$name.log" 2>&1 ||
    echo "$name: exit $?: $(grep -m1 error "$dir/$name.log")"
}
same_h5() {  # same_h5 A B: the problems of two checkpoints' datasets, compared bitwise
  py_check "$1" "$2" <<'PY'
import sys, h5py, numpy as np
def sets(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda k, v: out.__setitem__(k, v[()]) if isinstance(v, h5py.Dataset) else None)
    return out
a, b = sets(sys.argv[1]), sets(sys.argv[2])
bad = [k for k in a if k not in b or a[k].dtype != b[k].dtype or a[k].tobytes() != b[k].tobytes()]
print(f"{len(a)} datasets against {len(b)}" if a.keys() != b.keys() else
      f"{len(bad)} datasets differ: {bad[:3]}" if bad else
      "" if any(k.startswith("optimizer/") for k in a) else "no optimizer state")
PY
}
ck_cases=("fg+bp cv|mode=fg+bp estimator=cv select=1 lag=1 optimizer=sgd lr=0.0001")  # the loads below read its checkpoint
in_tier rest || ck_cases=("bp-zb|mode=bp schedule=zb")
for c in "${ck_cases[@]}"; do
  label=${c%%|*}
  read -r -a sets <<<"${c#*|}"
  budget=$(floor "${sets[@]}" "${blocks[@]}")
  why=$(table_run ck-mem 0 "${sets[@]}" head_block=128)$(table_run ck-ooc "${budget:-1}" "${sets[@]}" "${blocks[@]}")
  grep -q "row blocks\|streams its layers" "$dir/ck-ooc.log" || why="$why not streamed"
  [ -z "$why" ] && why=$(same_h5 "$dir/ck-ooc.h5" "$dir/ck-mem.h5")
  cmp -s "$dir/ck-ooc.bin" "$dir/ck-mem.bin" || why="$why --save-params differ"
  [ "$label" = bp-zb ] || { h5ls -r "$dir/ck-ooc.h5" | grep -q "^/estimator/reference/wte" || why="$why no reference"; }
  verdict "row blocks: $label's checkpoint and --save-params written a block at a time, streamed (budget ${budget:-?}) = whole, in memory, bitwise" "$why"
done
in_tier rest || finish  # the rest is the full suite's
cp "$dir/ck-ooc.h5" "$dir/ck-blocks.h5"  # fg+bp cv's, with its reference
why=$(table_run ld-none 0 "${sets[@]}" head_block=128 steps=6)  # what a load must change
[ -z "$why" ] || verdict "row blocks: 6 steps without a load" "$why"
for load in "--init-from" "--resume"; do
  why=$(table_run ld-mem 0 "${sets[@]}" head_block=128 steps=6 -- "$load" "$dir/ck-blocks.h5")
  why=$why$(table_run ld-ooc "${budget:-1}" "${sets[@]}" "${blocks[@]}" steps=6 -- "$load" "$dir/ck-blocks.h5")
  [ -z "$why" ] && why=$(same_h5 "$dir/ld-ooc.h5" "$dir/ld-mem.h5")
  cmp -s "$dir/ld-ooc.bin" "$dir/ld-mem.bin" || why="$why weights differ"
  [ "$load" = --resume ] && ! grep -q "resumed from .* at step 4$" "$dir/ld-ooc.log" && why="$why not resumed at step 4"
  [ "$load" = --init-from ] && cmp -s "$dir/ld-ooc.bin" "$dir/ld-none.bin" && why="$why the load changed nothing"
  verdict "row blocks: $load of that checkpoint, streamed in blocks = in memory whole, bitwise" "$why"
done
# SIGKILL while fg writes the table's blocks back, then --resume-weights: the store reopens at a
# whole version and the run ends with the in-memory weights (the resume is mid-run).
killed=(--set mode=fg --set optimizer=sgd --set lr=0.0001 --set steps=40 --set print_every=1)
for kv in "${blocks[@]}"; do killed+=(--set "$kv"); done
rm -rf "$dir/flash" && mkdir -p "$dir/flash"
"$fgpipe" train --config "$config" "${base[@]}" "${small[@]}" "${killed[@]}" --mem-budget 2M \
  --weights-dir "$dir/flash" >"$dir/killed.log" 2>&1 &
pid=$!
for _ in $(seq 1200); do grep -q "step 6/" "$dir/killed.log" && break; sleep 0.05; done
kill -KILL "$pid"; wait "$pid" 2>/dev/null
"$fgpipe" train --config "$config" "${base[@]}" "${small[@]}" "${killed[@]}" --mem-budget 2M \
  --weights-dir "$dir/flash" --resume-weights --save-params "$dir/resumed.bin" >"$dir/resumed.log" 2>&1
rc=$?
"$fgpipe" train --config "$config" "${base[@]}" "${small[@]}" "${killed[@]}" \
  --save-params "$dir/straight.bin" >"$dir/straight.log" 2>&1
at=$(grep -o "resumed from the layer stores .* at step [0-9]*" "$dir/resumed.log" | grep -o "[0-9]*$")
why=""
[ "$rc" -eq 0 ] || why="exit $rc: $(grep -m1 error "$dir/resumed.log")"
[ -n "$at" ] && [ "$at" -gt 0 ] && [ "$at" -lt 40 ] || why="$why not resumed mid-run (${at:-no step})"
cmp -s "$dir/resumed.bin" "$dir/straight.bin" || why="$why weights differ"
verdict "row blocks: SIGKILL mid-run (fg), --resume-weights at step ${at:-?}: the in-memory weights, bitwise" "$why"
whole=$(floor mode=bp head_block=128) in_blocks=$(floor mode=bp "${blocks[@]}")
why=""
grep -qE "(one slot|two slots) of its largest layer, a row block \(512 rows\) of " "$dir/floor.log" || why="the refusal names no row block: $(grep -m1 error "$dir/floor.log")"
# The table's slot (params, Adam's m and v) and its gradient buffer shrink from the embedding's
# 1040 rows to a block's 512: at least 528 rows x 64 floats x 4 buffers less.
saved=$((528 * 64 * 4 * 4))
[ -n "$whole" ] && [ -n "$in_blocks" ] && [ $((whole - in_blocks)) -ge "$saved" ] || why="$why floor $in_blocks in blocks against $whole whole (less by $saved at least)"
verdict "row blocks lower the floor (bp-zb: ${in_blocks:-?} bytes against ${whole:-?} with the table whole) and the refusal names the block" "$why"

# Bad token files: an id outside the vocabulary, an odd size, text with a BPE vocabulary.
expect_error() {  # expect_error LABEL NEEDLE ARGS...: exit 2 and NEEDLE in the message
  local label=$1 needle=$2; shift 2
  "$fgpipe" train --config "$config" "${base[@]}" --set steps=2 --no-checkpoint "$@" >"$dir/bad.log" 2>&1
  local rc=$?
  [ $rc -eq 2 ] && grep -q -- "$needle" "$dir/bad.log" && verdict "$label" "" ||
    verdict "$label" "rc $rc: $(grep -m1 error "$dir/bad.log")"
}
/usr/bin/python3 -c "import sys; open(sys.argv[1], 'wb').write(bytes([0x60, 0xea]) * 100)" "$dir/big.bin"  # id 60000
expect_error "a token id >= vocab is refused by file and index" "big.bin: token 0 is 60000, outside the vocabulary of 50257" \
  --set val_tokens="$dir/big.bin"
head -c 1001 "$dir/val.bin" >"$dir/odd.bin"
expect_error "an odd-sized token file is refused" "odd.bin: 1001 bytes is an odd size" --set train_tokens="$dir/odd.bin"
expect_error "data = text with vocab 50257 is refused" "vocab must be 256" --set data=text --set text_file="$dir/val.txt"
expect_error "row blocks of the token table with activity tangents are refused by name" \
  "table_block_rows = 256: fg and fg+bp run on row blocks of the token table with perturb = weight" \
  --set mode=fg --set perturb=activity --set head_block=128 --set table_block_rows=256
expect_error "row blocks that are not whole pages are refused, naming a size that works" \
  "table_block_rows = 100: must be a multiple of head_block (100) and its rows of n_embd = 16 floats a multiple of 1024 floats (4 KiB pages); 1600 would do" \
  --set head_block=100 --set table_block_rows=100
finish
