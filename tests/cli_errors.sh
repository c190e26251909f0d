#!/usr/bin/env bash
# The command line refuses bad input with exit code 2 and a message naming the problem.
# usage: cli_errors.sh FGPIPE CONFIG
. "$(dirname "$0")/lib.sh" "$@"

expect() {  # expect CODE NEEDLE ARGS...
  local code=$1 needle=$2; shift 2
  local out rc args="$*"
  out=$("$fgpipe" "$@" 2>&1); rc=$?
  verdict "fgpipe ${args//"$config"/CONFIG} -> exit $code, '$needle'" \
    "$([ "$rc" -eq "$code" ] && grep -qF -- "$needle" <<<"$out" || echo "exit $rc, output: $out")"
}

expect 2 "unknown config key 'colour'" train --config "$config" --set colour=red
expect 2 "mode: 'sideways' is not one of bp|fg" train --config "$config" --set mode=sideways
expect 2 "lr: 'fast' is not a number" train --config "$config" --set lr=fast
expect 2 "expected key=value" train --config "$config" --set lr
expect 2 "No such file" train --config /nonexistent.conf
expect 2 "needs --config" train
expect 2 "--no-checkpoint contradicts" train --config "$config" --no-checkpoint --checkpoint-every 5
expect 2 "unknown or incomplete argument '--bogus'" train --config "$config" --bogus
expect 2 "model: '784-x-10' is not a list" train --config "$config" --set model=784-x-10 --set steps=1
expect 2 "takes 100 features" train --config "$config" --set model=100-10 --set steps=1
expect 2 "perturb = activity works in mode fg+bp with estimator = mix" train --config "$config" --set mode=fg+bp --set perturb=activity --set estimator=cv --set steps=1
expect 2 "shrink: 1.5 is" train --config "$config" --set shrink=1.5
expect 2 "local_groups needs mode = fg or fg+bp, perturb = activity" train --config "$config" --set local_groups=4 --set steps=1
expect 2 "local_groups = 3 does not divide the 1024 outputs of layer fc1" train --config "$config" --set mode=fg --set perturb=activity --set local_groups=3 --set steps=1
expect 2 "cv_scale = auto applies to mode fg+bp with estimator cv" train --config "$config" --set cv_scale=auto --set steps=1
expect 2 "cv_scale = auto applies to mode fg+bp with estimator cv" train --config "$config" --set mode=fg+bp --set perturb=activity --set cv_scale=auto --set steps=1
expect 2 "cv_scale: '0.5' is not one of 1|auto" train --config "$config" --set cv_scale=0.5
expect 2 "dataset-fashion-mnist" train --config "$config" --set data_dir=/nonexistent --set steps=1
expect 2 "'tpu' is not one of cpu|cuda" train --config "$config" --device tpu
# --resume-weights continues from the layer stores; a checkpoint load beside it would replace them.
expect 2 "--resume-weights continues from the layer stores; --init-from" train --config "$config" \
  --mem-budget 14M --weights-dir "$dir" --resume-weights --init-from "$dir/any.h5"
expect 2 "--resume-weights continues from the layer stores; --resume" train --config "$config" \
  --mem-budget 14M --weights-dir "$dir" --resume-weights --resume "$dir/any.h5"
if ! nvidia-smi -L >/dev/null 2>&1; then
  # No GPU here: refused up front whether or not this build has the CUDA backend.
  expect 2 "device = cuda, but" train --config "$config" --device cuda --set steps=1
fi
# A precision the CPU cannot give is refused by name before training (or planning) starts:
# FGPIPE_CPU_NO_BF16=1 stands in for a CPU without AVX512-BF16.
FGPIPE_CPU_NO_BF16=1 expect 2 "precision = bf16 on the CPU needs the CPU flag avx512_bf16" train --config "$config" --set precision=bf16 --set steps=1
FGPIPE_CPU_NO_BF16=1 expect 2 "precision = bf16 on the CPU needs the CPU flag avx512_bf16" plan --config "$config" --set precision=bf16
expect 2 "precision = tf32 needs device = cuda" train --config "$config" --set precision=tf32 --set steps=1
# Every read error is an error; a line is read whole however long (issue 19 #4, #5).
expect 2 "read error at line 1: Is a directory" train --config "$dir"
long=$(printf 'x%.0s' $(seq 3000))
{ echo "# $long lr = 5"; echo "steps = x"; } >"$dir/long.conf"
expect 2 "long.conf:2: steps: 'x' is not a number" train --config "$dir/long.conf"
expect 2 "value must be 0 to 255 characters" train --config "$config" --set "text_file=$long"
# Outputs are checked before the first step and never overwrite an input (issue 19 #11).
"$fgpipe" train --config "$config" --set model=784-10 --set steps=1 --out "$dir/run" >/dev/null 2>&1
cp "$dir/run/checkpoint.h5" "$dir/before.h5"
expect 2 "--log $dir/run/checkpoint.h5 is the file given to --resume" train --config "$config" \
  --set model=784-10 --set steps=2 --resume "$dir/run" --log "$dir/run/checkpoint.h5"
expect 2 "--save-params $config is the file given to --config" train --config "$config" --save-params "$config"
expect 2 "--summary-json and --trace name the same file" train --config "$config" \
  --summary-json "$dir/s.json" --trace "$dir/s.json"
expect 2 "--trace /nonexistent/t.json: /nonexistent is not a directory" train --config "$config" --trace /nonexistent/t.json
verdict "the resumed checkpoint is untouched by a refused --log" \
  "$(cmp "$dir/before.h5" "$dir/run/checkpoint.h5" 2>&1)"
# A model that cannot fit this machine is refused before it allocates (issue 19 #9): 800 GB.
expect 2 "this machine has" train --config "$config" --set model=784-200000-200000-10 --set steps=1 \
  --no-checkpoint
expect 2 "usage" bogus-command

# Each mode's defaults follow it, a key that is set wins (docs/pipeline.md, "Defaults"), and
# a combination measured to learn nothing warns at start-up with its figure.
resolved() {  # resolved NAME SETTINGS...: a 1-step run; its resolved config's keys on one line
  local name=$1; shift
  local sets=(); for kv in "$@"; do sets+=(--set "$kv"); done
  "$fgpipe" train --config "$config" --set model=784-16-10 --set steps=1 "${sets[@]}" \
    --out "$dir/$name" --no-checkpoint >"$dir/$name.log" 2>&1 || { echo "exit $?: $(tail -n 1 "$dir/$name.log")"; return; }
  grep -E '^(schedule|perturb|estimator|shrink) = ' "$dir/$name/config.txt" | tr '\n' ' '
}
has() {  # has LABEL GOT WANT...: GOT holds every WANT
  local label=$1 got=$2 why=""; shift 2
  for want in "$@"; do [[ "$got" == *"$want "* ]] || why="$why lacks '$want'"; done
  verdict "$label" "${why:+$got:$why}"
}
has "bp's default schedule is zb" "$(resolved bp-default)" "schedule = zb"
has "a set schedule wins" "$(resolved bp-gpipe schedule=gpipe)" "schedule = gpipe"
has "--set mode=fg+bp gets fg+bp's defaults" "$(resolved fgbp-default mode=fg+bp)" \
  "perturb = activity" "estimator = mix" "shrink = 0"
has "a set shrink wins over fg+bp's default" "$(resolved fgbp-shrink mode=fg+bp shrink=0.5)" \
  "perturb = activity" "estimator = mix" "shrink = 0.5"
has "a chosen cv keeps perturb = weight" "$(resolved fgbp-cv estimator=cv mode=fg+bp)" \
  "perturb = weight" "estimator = cv" "shrink = 1"
verdict "fg+bp's defaults: no warning" "$(grep warning "$dir/fgbp-default.log")"
expect 0 "3.16 nats/byte" train --config "$config" --set model=784-16-10 --set steps=1 \
  --set mode=fg+bp --set perturb=weight --no-checkpoint
expect 0 "config keys" --help

finish
