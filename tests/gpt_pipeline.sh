#!/usr/bin/env bash
# The GPT end to end (docs/gpt.md), on a small model and a corpus made here (this repository's
# docs, so the test needs no download): every mode gives byte-identical losses and parameters
# on M = 1, 2 and 3 stages (stage cuts inside the blocks, the tied embedding summed across the
# end stages), the two copies of wte stay equal, the loss falls, generate samples from the
# checkpoint, and bad text input is refused by name. FGPIPE_TIER=rest: every mode on 3 stages
# against 1 (a first, middle and last stage) and the rest of the checks; long: on 2 against 1.
#
# usage: gpt_pipeline.sh FGPIPE CONFIG   (CONFIG: the GPT config, launch/configs/gpt-kjv.conf)
. "$(dirname "$0")/lib.sh" "$@"
root=$(dirname "$config")/../..
docs_corpus
steps=12 C=32 V=256
base=(--set text_file="$dir/corpus.txt" --set n_layer=2 --set n_embd=$C --set n_head=2 --set ctx=16
      --set steps=$steps --set warmup_steps=0 --set eval_every=0 --set print_every=1000000)

run() { train_on "$@"; }     # lib.sh: NAME M KEY=VALUE... [-- ARGS], into $dir/NAME/, NAME.bin
same() { same_runs "$@"; }   # lib.sh: LABEL A B

cases=(
  "bp|mode=bp"
  "bp-1f1b|mode=bp schedule=1f1b"
  "bp-zb|mode=bp schedule=zb"
  "fg|mode=fg optimizer=sgd lr=0.0001"
  "fgbp-cv-sel1-lag1|mode=fg+bp estimator=cv select=1 lag=1 optimizer=sgd lr=0.0001"
  "fg-lowrank-r2|mode=fg tangent_rank=2 optimizer=sgd lr=0.0001"
  "fgbp-cv-lowrank-r3-lag1|mode=fg+bp estimator=cv select=1 lag=1 tangent_rank=3 optimizer=sgd lr=0.0001"
  "fg-activity-K2|mode=fg perturb=activity tangents=2"
  "fgbp-mix-activity-sel2|mode=fg+bp perturb=activity estimator=mix shrink=0.5 select=2"
)
stages="$(in_tier long && echo 2) $(in_tier rest && echo 3)"
for c in "${cases[@]}"; do
  name=${c%%|*}
  read -r -a sets <<<"${c#*|}"
  for M in 1 $stages; do run "$name-M$M" "$M" "${sets[@]}" -- --no-checkpoint; done
  for M in $stages; do same "$name: M=$M vs M=1" "$name-M1" "$name-M$M"; done
done

# Zero bubble's split backward (the tied embedding's halves on the first and last stage
# included) adds the weight gradients in 1F1B's order.
for M in $stages; do same "bp-zb equals bp-1f1b: M=$M" "bp-zb-M$M" "bp-1f1b-M$M"; done
in_tier rest || finish

# The tied copies: wte is the first V x C floats of the flat parameters, lm_head.weight the last.
bytes=$((V * C * 4))
for name in bp-M3 fg-M3 fg-activity-K2-M3; do
  if [ -f "$dir/$name.bin" ]; then
    size=$(stat -c %s "$dir/$name.bin")
    cmp -s <(head -c $bytes "$dir/$name.bin") <(tail -c $bytes "$dir/$name.bin") &&
      verdict "$name: wte and lm_head.weight equal after $steps steps" "" ||
      verdict "$name: wte and lm_head.weight equal after $steps steps" "they differ ($size bytes of params)"
  else
    verdict "$name: wte and lm_head.weight equal" "no params file"
  fi
done

# Restart: a run stopped by SIGUSR1 (it checkpoints at the step boundary) and resumed on 2
# stages ends bitwise where the uninterrupted run does (fg+bp with activity and mix, lag 0).
restart=(mode=fg+bp perturb=activity estimator=mix shrink=0.5 select=2 lag=0 steps=150)
run straight 1 "${restart[@]}"
sets=(); for kv in "${restart[@]}"; do sets+=(--set "$kv"); done
mpirun -np 1 --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train --config "$config" "${base[@]}" \
  "${sets[@]}" --out "$dir/stopped" >"$dir/stopped.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  [ -f "$dir/stopped/loss.csv" ] && [ "$(wc -l <"$dir/stopped/loss.csv")" -gt 30 ] && break
  sleep 0.05
done
pkill -USR1 -f "mpirun .*--out $dir/stopped( |$)"
wait "$pid"
step=$(grep -o "stopped by a signal after step [0-9]*" "$dir/stopped.log" | grep -o "[0-9]*$")
if [ -z "$step" ]; then
  verdict "restart: stopped run resumed on 2 stages equals the straight run" "the run was not stopped by the signal"
else
  timeout 120 mpirun -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
    --config "$config" "${base[@]}" "${sets[@]}" --set stages=2 --resume "$dir/stopped" \
    --out "$dir/resumed" --save-params "$dir/resumed.bin" >"$dir/resumed.log" 2>&1
  cmp -s "$dir/straight.bin" "$dir/resumed.bin" &&
    verdict "restart: stopped after step $step, resumed on 2 stages, equals the straight run" "" ||
    verdict "restart: stopped after step $step, resumed on 2 stages, equals the straight run" \
      "params differ: $(tail -n 2 "$dir/resumed.log" | head -n 1)"
fi

# The loss falls: 60 bp steps on one rank.
run falls 1 mode=bp steps=60 lr=0.003
first=$(sed -n 2p "$dir/falls/loss.csv" | cut -d, -f2) last=$(tail -n 1 "$dir/falls/loss.csv" | cut -d, -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' &&
  verdict "bp: loss falls by more than 1 nat in 60 steps ($first -> $last)" "" ||
  verdict "bp: loss falls by more than 1 nat in 60 steps" "$first -> $last"
grep -q "val loss .* nats/byte (.* bits/byte)" "$dir/falls.log" &&
  verdict "result line: val loss in nats and bits per byte" "" ||
  verdict "result line: val loss in nats and bits per byte" "$(grep result "$dir/falls.log")"

# Transfer learning: --init-from the trained checkpoint (another seed, 2 stages, fresh Adam) with
# the embedding frozen: wte and wpe (the first (V + T) x C floats) and the tied head (the last
# V x C) stay bit for bit, the rest trains.
run finetune 2 mode=fg perturb=activity seed=9 freeze=embedding steps=20 -- --init-from "$dir/falls/checkpoint.h5"
emb=$(((V + 16) * C * 4)) head_bytes=$((V * C * 4))
if [ -f "$dir/finetune.problem" ]; then
  verdict "init-from + freeze" "$(cat "$dir/finetune.problem")"
elif cmp -s <(head -c $emb "$dir/falls.bin") <(head -c $emb "$dir/finetune.bin") &&
     cmp -s <(tail -c $head_bytes "$dir/falls.bin") <(tail -c $head_bytes "$dir/finetune.bin") &&
     ! cmp -s "$dir/falls.bin" "$dir/finetune.bin" && grep -q "weights from" "$dir/finetune.log"; then
  verdict "init-from + freeze=embedding: frozen copies unchanged, the rest trained" ""
else
  verdict "init-from + freeze=embedding: frozen copies unchanged, the rest trained" "$(grep -m1 -E 'error|weights' "$dir/finetune.log")"
fi

# tools/fgpipe-convert: a Hugging Face-layout safetensors file (Conv1D weights [in, out], no
# lm_head) made here imports into a checkpoint fgpipe loads (--init-from, generate) and exports
# back byte for byte; a trained checkpoint exports and imports back to the same tensors. The
# import's config says pad_vocab = 64 (the converter's default), so the fine-tune says it too.
convert=$root/tools/fgpipe-convert
/usr/bin/python3 - "$dir/hf.safetensors" <<'PY'
import json, struct, sys
import numpy as np
rng = np.random.default_rng(0)
C, T, L = 32, 16, 2
shapes = {"wte.weight": [256, C], "wpe.weight": [T, C], "ln_f.weight": [C], "ln_f.bias": [C]}
for i in range(L):
    for name, shape in {"ln_1.weight": [C], "ln_1.bias": [C], "attn.c_attn.weight": [C, 3 * C],
                        "attn.c_attn.bias": [3 * C], "attn.c_proj.weight": [C, C], "attn.c_proj.bias": [C],
                        "ln_2.weight": [C], "ln_2.bias": [C], "mlp.c_fc.weight": [C, 4 * C],
                        "mlp.c_fc.bias": [4 * C], "mlp.c_proj.weight": [4 * C, C], "mlp.c_proj.bias": [C]}.items():
        shapes[f"h.{i}.{name}"] = shape
header, off = {}, 0
for k in sorted(shapes):
    n = 4 * int(np.prod(shapes[k]))
    header[k] = {"dtype": "F32", "shape": shapes[k], "data_offsets": [off, off + n]}
    off += n
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for k in sorted(shapes):
        f.write((0.02 * rng.standard_normal(shapes[k])).astype("<f4").tobytes())
PY
if "$convert" import "$dir/hf.safetensors" "$dir/hf.h5" --n-head 2 2>"$dir/conv.err" &&
   "$convert" export "$dir/hf.h5" "$dir/back.safetensors" 2>>"$dir/conv.err"; then
  cmp -s "$dir/hf.safetensors" "$dir/back.safetensors" && verdict "convert: safetensors -> h5 -> safetensors byte for byte" "" ||
    verdict "convert: safetensors -> h5 -> safetensors byte for byte" "the files differ"
  "$fgpipe" generate --checkpoint "$dir/hf.h5" --tokens 8 >/dev/null 2>"$dir/gen.err" &&
    run from-hf 2 steps=4 pad_vocab=64 -- --init-from "$dir/hf.h5" && [ ! -f "$dir/from-hf.problem" ] &&
    verdict "convert: the imported file generates and fine-tunes (--init-from, 2 stages)" "" ||
    verdict "convert: the imported file generates and fine-tunes (--init-from, 2 stages)" "$(cat "$dir/gen.err" "$dir/from-hf.problem" 2>/dev/null | head -n 2)"
else
  verdict "convert: import and export run" "$(tail -n 1 "$dir/conv.err")"
fi
"$convert" export "$dir/falls/checkpoint.h5" "$dir/trained.safetensors" 2>"$dir/conv.err" &&
  "$convert" import "$dir/trained.safetensors" "$dir/trained.h5" --n-head 2 2>>"$dir/conv.err"
verdict "convert: a trained checkpoint exports and imports back to the same tensors" "$(py_check "$dir/falls/checkpoint.h5" "$dir/trained.h5" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["params"] for p in sys.argv[1:3])
names = []
a.visit(lambda n: names.append(n) if isinstance(a[n], h5py.Dataset) else None)
bad = [n for n in names if n not in b or not np.array_equal(a[n][...], b[n][...])]
print(f"{len(bad)} of {len(names)} tensors differ: {bad[:3]}" if bad or not names else "")
PY
)"
"$convert" import "$dir/corpus.txt" "$dir/x.h5" --n-head 2 2>"$dir/conv.err"
rc=$?
[ $rc -eq 2 ] && grep -q "corpus.txt" "$dir/conv.err" && verdict "convert: a file that is not safetensors is refused by name, exit 2" "" ||
  verdict "convert: a file that is not safetensors is refused by name, exit 2" "exit $rc: $(cat "$dir/conv.err")"

# generate: the prompt, then exactly N sampled bytes and a newline; reproducible by seed.
gen=("$fgpipe" generate --checkpoint "$dir/falls/checkpoint.h5" --prompt "fgpipe" --tokens 40 --top-k 8 --seed 3)
if "${gen[@]}" >"$dir/gen1.txt" 2>"$dir/gen.err" && "${gen[@]}" >"$dir/gen2.txt" 2>>"$dir/gen.err"; then
  n=$(wc -c <"$dir/gen1.txt")
  [ "$n" -eq $((6 + 40 + 1)) ] && [ "$(head -c 6 "$dir/gen1.txt")" = fgpipe ] && cmp -s "$dir/gen1.txt" "$dir/gen2.txt" &&
    verdict "generate: prompt + 40 bytes, the same for the same seed" "" ||
    verdict "generate: prompt + 40 bytes, the same for the same seed" "$n bytes: $(head -c 60 "$dir/gen1.txt")"
else
  verdict "generate runs" "$(tail -n 1 "$dir/gen.err")"
fi
"$fgpipe" generate --checkpoint "$dir/nothing.h5" >/dev/null 2>"$dir/gen.err"
rc=$?
[ $rc -eq 2 ] && grep -q "nothing.h5" "$dir/gen.err" && verdict "generate: a missing checkpoint is named, exit 2" "" ||
  verdict "generate: a missing checkpoint is named, exit 2" "exit $rc: $(cat "$dir/gen.err")"

# Bad text input: refused by name with exit 2.
head -c 20 "$dir/corpus.txt" >"$dir/short.txt"
: >"$dir/empty.txt"
for bad in "missing|$dir/none.txt|No such file" "empty|$dir/empty.txt|is empty" \
           "too short|$dir/short.txt|too few for ctx" "a directory|$dir|not a regular file"; do
  IFS='|' read -r label path want <<<"$bad"
  "$fgpipe" train --config "$config" "${base[@]}" --set text_file="$path" --no-checkpoint >/dev/null 2>"$dir/bad.err"
  rc=$?
  [ $rc -eq 2 ] && grep -q "$want" "$dir/bad.err" && grep -q "$path" "$dir/bad.err" &&
    verdict "text_file $label: refused by name, exit 2" "" ||
    verdict "text_file $label: refused by name, exit 2" "exit $rc: $(cat "$dir/bad.err")"
done
"$fgpipe" train --config "$config" "${base[@]}" --set data=idx --no-checkpoint >/dev/null 2>"$dir/bad.err"
rc=$?
[ $rc -eq 2 ] && grep -q "model = gpt reads text" "$dir/bad.err" && verdict "model = gpt with data = idx: refused" "" ||
  verdict "model = gpt with data = idx: refused" "exit $rc: $(cat "$dir/bad.err")"

finish
