#!/usr/bin/env bash
# Transfer learning (issue 35): a small GPT on GPT-2's BPE tokens (vocab 50257, padded to
# 50304) pretrained on the King James Bible, then fine-tuned on a different corpus, the Debian
# package `fortunes` (/usr/share/games/fortunes: its plain-text files, not the *.dat indexes or
# the *.u8 links), with bp, fg and fg+bp, against bp from scratch for the same steps.
#
#   data    KJV (launch/text-corpus.sh): the first 90% of the bytes train (cut at a line end),
#           the rest validates, tokenized by `fgpipe tokenize` into OUT (default
#           bench/out/transfer). fortunes: launch/fortunes-corpus.sh's tokens (the package's
#           files in dpkg's order, every 10th fortune validates: the files are grouped by topic).
#   model   n_layer 4, n_embd 64, n_head 4, ctx 64; steps of 4 micro-batches of 4 sequences
#           (1024 tokens); AdamW, beta2 0.95, no weight decay, linear warm-up (10% of the
#           steps) then cosine to 0. One process, OMP_NUM_THREADS=1.
#   rows    zero-shot: the pretrained checkpoint (PRETRAIN_STEPS on the KJV, lr 1e-3) scored on
#           fortunes by `fgpipe eval`; the fine-tunes start from it (--init-from: fresh
#           optimizer state), FINETUNE_STEPS each:
#             bp          mode = bp, lr 1e-3
#             fg          mode = fg, perturb = activity, K = 1, lr: the best of a sweep
#                         (FG_LRS, SWEEP_STEPS each, scored on the first 8192 validation tokens;
#                         a weak predictor: docs/gpt.md's 1e-3 won at 25 steps, lost at 120)
#             fg+bp       mode = fg+bp, perturb = activity, estimator = mix, select = 1, lag = 0,
#                         shrink = 0.1, lr 1e-3: one stage has no bubbles, so the exact gradient
#                         c of micro-batch 0 of 4 is backpropagated in the step and mixed as
#                         0.9 c + 0.1 fg (fg over all 4 micro-batches)
#             scratch bp  mode = bp from fresh weights, lr 1e-3
#           fg+bp as the docs recommend (activity, mix, shrink = 0, select = -1) on one stage
#           chooses bp-zb's timetable, i.e. runs bp: the script checks that for min(10, F)
#           steps (losses equal to bp's, the choice printed) instead of training it again.
# Columns: training seconds (the run's train_seconds: steps only, no evaluation), tokens/s,
# the validation loss on fortunes (nats per token, the run's own end-of-run evaluation over
# every window of the validation file) and on the KJV after fine-tuning (`fgpipe eval` of the
# fine-tuned checkpoint: forgetting). Then the same-time comparison: each run's mean training
# loss over its last 10 steps before the wall time (sum of loss.csv's step seconds) at which
# the fastest fine-tune finished.
#
# usage: bench/bench_transfer.sh [PRETRAIN_STEPS] [FINETUNE_STEPS] [VAL_TOKENS]
#   defaults 300 120 0 (docs/gpt.md's run: about 25 minutes on one core); VAL_TOKENS > 0 keeps only the first VAL_TOKENS tokens of each
#   validation file (a quick run; the fortunes prefix then covers only the first topics).
#   Environment: OUT (output folder), FG_LRS ("3e-5 1e-4 3e-4"), SWEEP_STEPS (25).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
pre_steps=${1:-300} ft_steps=${2:-120} val_cap=${3:-0}
out=${OUT:-bench/out/transfer}
fg_lrs=${FG_LRS:-3e-5 1e-4 3e-4}
sweep_steps=${SWEEP_STEPS:-25}
[ "$sweep_steps" -le "$ft_steps" ] || sweep_steps=$ft_steps
fgpipe=build/fgpipe config=launch/configs/gpt-kjv.conf
[ -x "$fgpipe" ] || { echo "bench_transfer: build first (launch/build.sh)" >&2; exit 2; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
py=/usr/bin/python3
mkdir -p "$out"

# --- corpora -------------------------------------------------------------------------------
kjv=$(launch/text-corpus.sh 2>/dev/null)
vocab=$(launch/gpt2-vocab.sh)
split() {  # split TRAIN VAL FILE: the KJV's 90/10 split described above (at a line end)
  "$py" - "$@" <<'PY'
import sys
tr, va, path = sys.argv[1:4]
data = open(path, "rb").read()
cut = data.index(b"\n", len(data) * 9 // 10) + 1
open(tr, "wb").write(data[:cut])
open(va, "wb").write(data[cut:])
print(f"KJV: {len(data)} bytes: {cut} train, {len(data) - cut} validate")
PY
}
split "$out/kjv-train.txt" "$out/kjv-val.txt" "$kjv"
# fortunes: launch/fortunes-corpus.sh's split (every 10th fortune validates) and tokens.
{ read -r f_train; read -r f_val; } < <(launch/fortunes-corpus.sh)
cp "$f_train" "$out/fortunes-train.bin"
cp "$f_val" "$out/fortunes-val.bin"
for s in kjv-train kjv-val; do
  "$fgpipe" tokenize --vocab "$vocab" --in "$out/$s.txt" --out "$out/$s.bin" 2>&1 | sed 's/^fgpipe: //'
done
if [ "$val_cap" -gt 0 ]; then
  for s in kjv-val fortunes-val; do
    head -c $((2 * val_cap)) "$out/$s.bin" >"$out/$s.cap" && mv "$out/$s.cap" "$out/$s.bin"
  done
  echo "validation files cut to their first $val_cap tokens"
fi
head -c 16384 "$out/fortunes-val.bin" >"$out/fortunes-val-sweep.bin"   # 8192 tokens

# --- runs ----------------------------------------------------------------------------------
model=(--config "$config" --set data=tokens --set vocab=50257 --set pad_vocab=64
       --set n_layer=4 --set n_embd=64 --set n_head=4 --set ctx=64
       --set micro_batch=4 --set micro_batches=4 --set stages=1
       --set optimizer=adam --set beta2=0.95 --set weight_decay=0 --set lr_schedule=cosine
       --set min_lr=0 --set seed=1 --set eval_every=0 --set print_every=50)
kjv_data=(train_tokens="$out/kjv-train.bin" val_tokens="$out/kjv-val.bin")
fort_data=(train_tokens="$out/fortunes-train.bin" val_tokens="$out/fortunes-val.bin")
eval_on() {  # eval_on CHECKPOINT TOKENS JSON
  "$fgpipe" eval --checkpoint "$1" --tokens "$2" --summary-json "$3" >"${3%.json}.log" 2>&1 ||
    echo "eval of $1 on $2 failed: $(tail -n 1 "${3%.json}.log")"
}
val_loss() { "$py" -c 'import json,sys; print(f"{json.load(open(sys.argv[1]))[sys.argv[2]]:.4f}")' "$@"; }

t0=$(date +%s)
echo "pretraining: $pre_steps steps on the KJV"
train pretrain "$pre_steps" "${kjv_data[@]}" lr=0.001 || exit 1
ck=$out/pretrain/checkpoint.h5
eval_on "$ck" "$out/fortunes-val.bin" "$out/zero-shot.json"

# fg's learning rate: a short sweep from the pretrained weights, scored on 8192 validation tokens
best_lr="" best=""
for lr in $fg_lrs; do
  train "sweep-fg-$lr" "$sweep_steps" mode=fg perturb=activity lr="$lr" \
    train_tokens="$out/fortunes-train.bin" val_tokens="$out/fortunes-val-sweep.bin" \
    -- --init-from "$ck" --no-checkpoint || continue
  l=$(val_loss "$out/sweep-fg-$lr.json" val_loss)
  echo "fg lr sweep: lr $lr, $sweep_steps steps: fortunes validation (8192 tokens) $l nats/token"
  if [ -z "$best" ] || "$py" -c 'import sys; sys.exit(not float(sys.argv[1]) < float(sys.argv[2]))' "$l" "$best"; then
    best=$l best_lr=$lr
  fi
done
[ -n "$best_lr" ] || { echo "fg lr sweep: every lr failed" >&2; best_lr=1e-4; }

rows=(
  "bp|pretrained|mode=bp schedule=gpipe lr=0.001"
  "fg activity K=1 (lr $best_lr)|pretrained|mode=fg perturb=activity lr=$best_lr"
  "fg+bp activity mix select=1 shrink=0.1|pretrained|mode=fg+bp perturb=activity estimator=mix select=1 lag=0 shrink=0.1 lr=0.001"
  "bp from scratch|scratch|mode=bp schedule=gpipe lr=0.001"
)
for r in "${rows[@]}"; do
  IFS='|' read -r name init sets <<<"$r"
  tag=ft-${name%% *} init_args=(--init-from "$ck")
  if [ "$init" = scratch ]; then tag=$tag-scratch init_args=(); fi
  echo "fine-tuning: $name ($init), $ft_steps steps"
  # shellcheck disable=SC2086
  train "$tag" "$ft_steps" $sets "${fort_data[@]}" -- "${init_args[@]}" || continue
  eval_on "$out/$tag/checkpoint.h5" "$out/kjv-val.bin" "$out/$tag-kjv.json"
done

# fg+bp as the docs recommend, on one stage: which timetable it chooses, and its losses
# against bp's over the same few steps.
n=$(( ft_steps < 10 ? ft_steps : 10 ))
head -c 2048 "$out/fortunes-val.bin" >"$out/fortunes-val-check.bin"
chk=(train_tokens="$out/fortunes-train.bin" val_tokens="$out/fortunes-val-check.bin")
check=""
if train check-bp "$n" mode=bp schedule=gpipe lr=0.001 "${chk[@]}" -- --init-from "$ck" --no-checkpoint &&
   train check-fgbp "$n" mode=fg+bp perturb=activity estimator=mix shrink=0 select=-1 lr=0.001 \
     "${chk[@]}" -- --init-from "$ck" --no-checkpoint; then
  choice=$(grep -m1 "timetable chosen" "$out/check-fgbp.log" | sed 's/.*: //')
  if cmp -s <(cut -d, -f2 "$out/check-bp/loss.csv") <(cut -d, -f2 "$out/check-fgbp/loss.csv"); then
    check="fg+bp (activity, mix, shrink = 0, select = -1) on one stage chose \"$choice\"; its $n steps' losses equal bp's bit for bit"
  else
    check="fg+bp (activity, mix, shrink = 0, select = -1) on one stage chose \"$choice\"; its $n steps' losses DIFFER from bp's"
  fi
fi
total=$(( $(date +%s) - t0 ))

# --- tables --------------------------------------------------------------------------------
echo
echo "bench/bench_transfer.sh $pre_steps $ft_steps $val_cap: ${total} s in all (tokenizing not counted)"
"$py" - "$out" "$pre_steps" "$ft_steps" "${rows[@]}" <<'PY'
import csv, json, os, sys
out, pre, ft, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
def load(p):
    try: return json.load(open(os.path.join(out, p)))
    except (OSError, ValueError): return None
def f(x, fmt): return "n/a" if x is None else format(x, fmt)
hdr = "| row | init | steps | train s | tokens/s | fortunes val (nats/token) | KJV val (nats/token) |"
print(hdr); print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
p, z = load("pretrain.json"), load("zero-shot.json")
print(f"| pretrained on the KJV, zero-shot on fortunes | pretrained | 0 (pretraining: {pre}) | "
      f"{f(p and p['train_seconds'], '.0f')} (pretraining) | {f(p and p['tokens_per_s'], '.0f')} (pretraining) | "
      f"{f(z and z['loss'], '.4f')} | {f(p and p['val_loss'], '.4f')} |")
curves = {}
for r in rows:
    name, init, _ = r.split("|")
    tag = "ft-" + name.split()[0] + ("-scratch" if init == "scratch" else "")
    s, k = load(tag + ".json"), load(tag + "-kjv.json")
    if s is None:
        print(f"| {name} | {init} | {ft} | failed | | | |"); continue
    print(f"| {name} | {init} | {s['steps']} | {s['train_seconds']:.0f} | {s['tokens_per_s']:.0f} | "
          f"{s['val_loss']:.4f} | {f(k and k['loss'], '.4f')} |")
    with open(os.path.join(out, tag, "loss.csv")) as fh:
        rd = list(csv.DictReader(fh))
    curves[name] = [(float(x["seconds"]), float(x["loss"])) for x in rd]
if curves:
    t_star = min(sum(t for t, _ in c) for c in curves.values())
    print(f"\nSame time: training loss (mean of the last 10 steps' batches) at {t_star:.0f} s, "
          f"when the fastest fine-tune finished (loss.csv's step seconds summed):\n")
    print("| row | ms per step | steps done by then | training loss then | training loss at the end |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, c in curves.items():
        t, n = 0.0, 0
        for dt, _ in c:
            if t + dt > t_star + 1e-9: break
            t += dt; n += 1
        last = [l for _, l in c[max(0, n - 10):n]]
        end = [l for _, l in c[-10:]]
        ms = 1000 * sum(dt for dt, _ in c[1:]) / max(1, len(c) - 1)   # step 0 warms up
        print(f"| {name} | {ms:.0f} | {n} | {sum(last) / len(last):.4f} | {sum(end) / len(end):.4f} |")
PY
if [ -n "$check" ]; then echo; echo "$check"; fi
