#!/usr/bin/env bash
# Nothing lost, ever (issue 50), on the tiny Llama with LoRA adapters, streamed from a layer
# store: a refused run (another model's or a cut checkpoint for --resume or --init-from, a
# --resume-weights whose settings differ from the store's, a LoRA checkpoint a run would drop,
# a token file with ids beyond the vocabulary) leaves the store, its settings and the run's
# files byte for byte as they were and names the cause; a second run on a store in use is
# refused naming the first's pid, and once that one is SIGKILLed its lock is taken over with a
# note; on a disk that fills (a tmpfs, as root; /dev/full otherwise) loss.csv keeps whole
# lines and config.txt, summary.json and trace.json stay whole or absent; messages name the
# cause (a checkpoint that is a directory, a --weights-dir that is a file or a device, a
# missing Hugging Face directory); `SUBCOMMAND --help` prints its usage and exits 0.
# usage: nothing_lost.sh FGPIPE CONFIG   (CONFIG: launch/configs/llama-tiny.conf)
. "$(dirname "$0")/lib.sh" "$@"
root=$(dirname "$config")/../..
kjv_tokens 60000 50000
base=(--set data=tokens --set train_tokens="$dir/train.bin" --set val_tokens="$dir/val.bin"
      --set n_embd=32 --set ctx=16 --set micro_batch=1 --set micro_batches=2 --set warmup_steps=0
      --set eval_every=0 --set print_every=1000000 --set mem_runtime=0 --set steps=3)
lora=(--set lora_rank=2 --set lora_alpha=4 --set lora_targets=q,v)
streamed=(--set stream=1 --mem-budget 100M --weights-dir "$dir/w")

train() {  # train NAME ARGS...: one rank, its output in NAME.log, its exit code in $rc
  local name=$1; shift
  timeout 120 "$fgpipe" train --config "$config" "${base[@]}" "$@" >"$dir/$name.log" 2>&1
  rc=$?
}
sums() { (cd "$dir" && sha256sum w/* run0/* 2>&1); }

# refused LABEL PATTERN: the last run exited 2 with PATTERN in its message, and every file of
# the store and of run0 holds the bytes it held before.
refused() {
  local why="" log=$dir/$last.log
  [ "$rc" -eq 2 ] || why="exit $rc, not 2"
  grep -qE "$2" "$log" || why="$why; no '$2' in: $(grep -m1 error "$log")"
  [ "$(sums)" = "$before" ] || why="$why; files changed: $(diff <(echo "$before") <(sums) | grep '^>' | tr '\n' ' ')"
  verdict "$1" "$why"
}

train run0 "${lora[@]}" "${streamed[@]}" --out "$dir/run0"
[ "$rc" -eq 0 ] && ls "$dir"/w/*.conf >/dev/null 2>&1 &&
  verdict "a streamed LoRA run makes its store and the store's settings record" "" ||
  verdict "a streamed LoRA run makes its store and the store's settings record" "exit $rc: $(grep -m1 error "$dir/run0.log")"
train other --set n_embd=48 --out "$dir/other"
head -c 30000 "$dir/run0/checkpoint.h5" >"$dir/cut.h5"
before=$(sums)

# 1. Validate, then touch: checkpoints and token files refused before the store is opened.
last=resume-other; train $last "${lora[@]}" "${streamed[@]}" --out "$dir/run0" --resume "$dir/other/checkpoint.h5"
refused "--resume of another model's checkpoint leaves the store and --out as they were" "another model: it has n_embd = 48"
last=resume-cut; train $last "${lora[@]}" "${streamed[@]}" --out "$dir/run0" --resume "$dir/cut.h5"
refused "--resume of a cut checkpoint leaves them as they were" "cut.h5: not an HDF5 file, or truncated"
last=init-other; train $last "${lora[@]}" "${streamed[@]}" --out "$dir/run0" --init-from "$dir/other/checkpoint.h5"
refused "--init-from another model's checkpoint leaves them as they were" "another model: it has n_embd = 48"
# A refusal found once the run's new store is made (its timetable): that store is dropped, the
# old one stays.
last=no-bubble; train $last "${lora[@]}" "${streamed[@]}" --out "$dir/run0" --set mode=fg+bp --set perturb=weight \
  --set estimator=mix --set shrink=0 --set select=0
refused "a refusal after the new store is made (no bubble for fg+bp) leaves the old store whole" \
  "backpropagates no micro-batch"
/usr/bin/python3 - "$dir" <<'PY'
import sys, numpy as np
d = sys.argv[1]
t = np.fromfile(f"{d}/train.bin", dtype="<u2"); t[-3] = 300; t.tofile(f"{d}/bad.bin")
PY
last=bad-tokens; train $last "${lora[@]}" "${streamed[@]}" --out "$dir/run0" --set train_tokens="$dir/bad.bin"
refused "a token id beyond the vocabulary anywhere in the file is refused at start (the windows drawn never reach it)" \
  "bad.bin: token 49997 is 300, outside the vocabulary of 256"

# 2. --resume-weights refuses a setting the store's bytes depend on, by name.
for kv in lora_alpha=8 lora_rank=4 lora_targets=q,k,v seed=2 optimizer=sgd mode=fg freeze=h.1; do
  key=${kv%%=*}
  last=rw-$key; train $last "${lora[@]}" "${streamed[@]}" --set steps=6 --set "$kv" --out "$dir/run0" --resume-weights
  refused "--resume-weights with $kv is refused by name (the store holds '$(grep "^$key = " "$dir/w/"*.conf | cut -d' ' -f3-)')" \
    "was written with $key = .*, the config has $key ="
done

# 3. No silent drops: a LoRA checkpoint into a run without LoRA.
last=init-lora; train $last --out "$dir/nolora" --init-from "$dir/run0/checkpoint.h5"
[ -e "$dir/nolora" ] && rc="$rc (--out made)"
refused "--init-from a LoRA checkpoint without lora_rank is refused (the adapters would be dropped)" \
  "holds LoRA adapters \(lora_rank = 2, lora_alpha = 4, lora_targets = q,v\)"

# 4. One run per store: a second is refused naming the first; a SIGKILLed one's lock is taken over.
mkdir -p "$dir/w2"
"$fgpipe" train --config "$config" "${base[@]}" --set steps=100000 --set stream=1 \
  --mem-budget 100M --weights-dir "$dir/w2" --out "$dir/long" >"$dir/long.log" 2>&1 &
long=$!
for _ in $(seq 400); do ls "$dir"/w2/*.conf >/dev/null 2>&1 && break; sleep 0.05; done
locked=$(sha256sum "$dir"/w2/*.conf "$dir"/w2/*.lock 2>&1)
last=second; train $last --set stream=1 --mem-budget 100M --weights-dir "$dir/w2" --out "$dir/second"
why=""; [ "$rc" -eq 2 ] || why="exit $rc"
grep -q "is in use by another run (pid $long on " "$dir/second.log" || why="$why; no pid $long in: $(grep -m1 error "$dir/second.log")"
[ "$(sha256sum "$dir"/w2/*.conf "$dir"/w2/*.lock 2>&1)" = "$locked" ] || why="$why; the store's settings or lock changed"
[ -e "$dir/second" ] && why="$why; --out made"
verdict "a second run on a store in use is refused, naming the first run's pid" "$why"
kill -9 "$long"; wait "$long" 2>/dev/null
# It runs until SIGTERM (a checkpoint, then exit 0) once it says it resumed.
"$fgpipe" train --config "$config" "${base[@]}" --set steps=100000 --set stream=1 \
  --mem-budget 100M --weights-dir "$dir/w2" --out "$dir/long" --resume-weights >"$dir/takeover.log" 2>&1 &
takeover=$!
for _ in $(seq 400); do grep -qs "resumed from the layer stores" "$dir/takeover.log" && break; sleep 0.05; done
kill -TERM "$takeover"; wait "$takeover"; rc=$?
why=""; [ "$rc" -eq 0 ] || why="exit $rc: $(grep -m1 error "$dir/takeover.log")"
grep -q "took over the lock .* from pid $long on " "$dir/takeover.log" || why="$why; no note naming pid $long"
verdict "after a SIGKILL the lock is taken over with a note, and --resume-weights goes on" "$why"

# 5. Whole or absent on a disk that fills.
full_disk_checks() {  # full_disk_checks MNT: MNT a tmpfs of 16 KiB
  local mnt=$1 why
  echo old >"$mnt/summary.json"; echo old >"$mnt/trace.json"
  train full-csv --set steps=100000 --out "$mnt/o"
  why=""; [ "$rc" -eq 2 ] || why="exit $rc"
  grep -q "loss.csv in --out: writing .* No space left on device" "$dir/full-csv.log" || why="$why; $(grep -m1 error "$dir/full-csv.log")"
  [ "$(tail -c 1 "$mnt/o/loss.csv" | od -An -c | tr -d ' ')" = '\n' ] || why="$why; loss.csv ends mid-row"
  awk -F, 'NF != 7 { bad = 1 } END { exit bad }' "$mnt/o/loss.csv" || why="$why; a row of loss.csv is cut"
  [ "$(wc -l <"$mnt/o/config.txt")" -eq "$(wc -l <"$dir/run0/config.txt")" ] || why="$why; config.txt not whole"
  verdict "a disk that fills while loss.csv grows: exit 2 naming it, loss.csv keeps whole rows ($(($(wc -l <"$mnt/o/loss.csv") - 1)) of them)" "$why"
  rm -rf "$mnt/o"; head -c 100000 /dev/zero >"$mnt/filler" 2>/dev/null
  train full-trace --out "$dir/full-trace" --trace "$mnt/trace.json"
  train full-summary --out "$dir/full-summary" --no-checkpoint --summary-json "$mnt/summary.json"
  why=""
  for f in trace summary; do
    [ "$(cat "$mnt/$f.json")" = old ] || why="$why; $f.json changed"
    grep -q "writing $mnt/$f.json failed: No space left on device" "$dir/full-$f.log" || why="$why; $f: $(grep -m1 error "$dir/full-$f.log")"
  done
  [ -z "$(ls "$mnt" | grep tmp)" ] || why="$why; a temporary file left: $(ls "$mnt")"
  verdict "a full disk leaves the old trace.json and summary.json whole, no temporary behind" "$why"
  mkdir -p "$mnt/c"; rm -f "$mnt/filler"; echo old >"$mnt/c/config.txt"; head -c 100000 /dev/zero >"$mnt/filler" 2>/dev/null
  train full-config --out "$mnt/c"
  why=""; [ "$rc" -eq 2 ] && [ "$(cat "$mnt/c/config.txt")" = old ] || why="exit $rc, config.txt: $(head -c 40 "$mnt/c/config.txt")"
  verdict "a full disk leaves the old config.txt whole" "$why"
}
if [ "$(id -u)" -eq 0 ] && mkdir -p "$dir/mnt" && mount -t tmpfs -o size=16k tmpfs "$dir/mnt" 2>/dev/null; then
  full_disk_checks "$dir/mnt"
  umount "$dir/mnt"
else
  echo "SKIP the tmpfs checks (they need root to mount a small tmpfs)"
fi
train devfull --out "$dir/devfull" --summary-json /dev/full
[ "$rc" -eq 2 ] && grep -q "writing /dev/full failed: No space left" "$dir/devfull.log" &&
  verdict "--summary-json /dev/full: exit 2 naming the full disk" "" ||
  verdict "--summary-json /dev/full: exit 2 naming the full disk" "exit $rc: $(grep -m1 error "$dir/devfull.log")"

# 6. Messages that name the cause; each subcommand's --help.
expect() {  # expect LABEL PATTERN COMMAND...: exit 2 and PATTERN in its stderr
  local label=$1 pattern=$2 out; shift 2
  out=$("$@" 2>&1 >/dev/null); local code=$?
  [ "$code" -eq 2 ] && grep -qE "$pattern" <<<"$out" && verdict "$label" "" ||
    verdict "$label" "exit $code: $(head -n 1 <<<"$out")"
}
expect "eval --checkpoint on a run's directory names it" "run0 is a directory, not a checkpoint file: did you mean .*run0/checkpoint.h5" \
  "$fgpipe" eval --checkpoint "$dir/run0" --tokens "$dir/val.bin"
touch "$dir/afile"
expect "--weights-dir that is a file" "weights-dir .*afile is a file, not a directory" \
  "$fgpipe" train --config "$config" "${base[@]}" --mem-budget 100M --weights-dir "$dir/afile"
expect "--weights-dir /dev/null" "weights-dir /dev/null is a device, not a directory" \
  "$fgpipe" train --config "$config" "${base[@]}" --mem-budget 100M --weights-dir /dev/null
expect "fgpipe-convert import of a missing Hugging Face directory" "import: .*no-such-hf: no such file or directory" \
  "$root/tools/fgpipe-convert" import "$dir/no-such-hf" "$dir/x.h5"
for sub in train plan eval generate tokenize; do
  out=$("$fgpipe" "$sub" --help 2>&1); code=$?
  [ "$code" -eq 0 ] && grep -q "^usage: fgpipe $sub" <<<"$out" && verdict "fgpipe $sub --help" "" ||
    verdict "fgpipe $sub --help" "exit $code: $(head -n 1 <<<"$out")"
done
out=$("$root/tools/fgpipe-convert" --help 2>&1); code=$?
[ "$code" -eq 0 ] && grep -q "usage: fgpipe-convert import" <<<"$out" && verdict "fgpipe-convert --help" "" ||
  verdict "fgpipe-convert --help" "exit $code"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
