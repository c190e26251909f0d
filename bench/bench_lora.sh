#!/usr/bin/env bash
# The LoRA race (issue 44, item 5): a small Llama-shaped model pretrained here on the King James
# Bible with bp, then LoRA-fine-tuned on Debian's fortunes with bp, fg and fg+bp, where the
# forward gradient has its best chance: its dimension is the adapters' (about 6% of the model
# here), not the model's.
#
#   tokens  a byte-level BPE of VOCAB (4096) tokens trained on the KJV's training split by
#           bench/bpe_train.py (Hugging Face's tokenizer.json layout; `fgpipe tokenize
#           --tokenizer` encodes everything with it). Not Llama 3's 128256: that table would be
#           most of the parameters and its softmax most of the step (the script measures it,
#           LLAMA3_CHECK=1, when data/hf/llama3 is there: launch/hf-tokenizer.sh).
#   data    KJV: the first 90% of the bytes train (cut at a line end), the rest validates.
#           fortunes: launch/fortunes-corpus.sh --text (every 10th fortune validates). Each
#           validation file is cut to its first VAL_TOKENS tokens (16384: 256 windows).
#   model   model = llama: 4 blocks, n_embd 128, 4 query heads and 2 kv heads of 32, SwiGLU
#           352, RMSNorm, rope_theta 500000, tied head, ctx 64; steps of 4 micro-batches of 4
#           sequences (1024 tokens); AdamW, beta2 0.95, no weight decay, warm-up 10% of the
#           steps, cosine to 0. One process, one stage, OMP_NUM_THREADS=1.
#   rows    pretrain: bp, lr 3e-3 (llama-tiny.conf's), PRETRAIN_STEPS. zero-shot: its fortunes
#           loss (`fgpipe eval`). The fine-tunes start from it (--init-from) with adapters of
#           rank 8, alpha 16 on q,k,v,o,gate,up,down, FINETUNE_STEPS each, validated on
#           fortunes every EVAL_EVERY steps:
#             bp      mode = bp, Adam lr 2e-3
#             fg      mode = fg (weight perturbation of the adapters, the only fg LoRA takes),
#                     K = 1, Adam, lr: the best of FG_LRS after SWEEP_STEPS steps each
#             fg K=8  the same with 8 tangents per micro-batch (an estimate 8 x less noisy)
#             fg+bp   mode = fg+bp, estimator = mix, select = 1, lag = 0, shrink = 0.1, Adam lr
#                     2e-3 (bench_transfer.sh's row): one stage has no bubbles, so micro-batch 0
#                     of 4 is backpropagated in the step (c) and the update is 0.9 c + 0.1 fg
#                     (the fg+bp the docs recommend, activity + mix + shrink 0 + select = -1, is
#                     refused with LoRA: no activity tangents for adapters; on one stage it is bp)
#   streamed  bp, fg and fg+bp again, STREAM_STEPS each, with the stage streaming its layers
#           from a layer store in OUT (--mem-budget, --weights-dir, stream = 1): the frozen base
#           read-only, at the budget a 1-byte budget's refusal names (the floor: a wave's
#           activations and two slots of the token table) or BUDGET bytes if that is more.
#           stream = 1 because at this size a streamed stage's floor, mostly a wave's
#           activations, is more than fg needs in memory. The stage's "out of core" line gives
#           the bytes read and written per step (steps 1-3).
# Output: the table (markdown), curves (OUT/curve-*.csv: step, seconds, val_loss) and
# docs/img/lora_race.png (PLOT=path to change it, PLOT= to skip).
#
# usage: bench/bench_lora.sh [PRETRAIN_STEPS] [FINETUNE_STEPS]      defaults 600 300
#   Environment: OUT (bench/out/lora), VOCAB (4096), VAL_TOKENS (16384), EVAL_EVERY (20),
#   FG_LRS ("1e-3 3e-3 1e-2 3e-2"), SWEEP_STEPS (50), LLAMA3_CHECK (1), PLOT, ROWS (the
#   in-memory rows to run, by name: "bp fg fg+bp"; all when empty), STREAM_STEPS
#   (FINETUNE_STEPS; 0: no streamed rows), BUDGET (0), PRECISION (fp32; bf16 on a CPU with
#   AVX512-BF16: every run of the bench, the pretraining included, in mixed precision).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
pre_steps=${1:-600} ft_steps=${2:-300}
out=${OUT:-bench/out/lora}
vocab=${VOCAB:-4096} val_cap=${VAL_TOKENS:-16384} every=${EVAL_EVERY:-20}
fg_lrs=${FG_LRS:-1e-3 3e-3 1e-2 3e-2} sweep_steps=${SWEEP_STEPS:-50}
plot=${PLOT-docs/img/lora_race.png}
[ "$sweep_steps" -le "$ft_steps" ] || sweep_steps=$ft_steps
fgpipe=build/fgpipe py=/usr/bin/python3
[ -x "$fgpipe" ] || { echo "bench_lora: build first (launch/build.sh)" >&2; exit 2; }
[ "$vocab" -le 65536 ] || { echo "bench_lora: VOCAB up to 65536 (uint16 token files)" >&2; exit 2; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
mkdir -p "$out"

# --- corpora and the tokenizer -------------------------------------------------------------
kjv=$(launch/text-corpus.sh 2>/dev/null)
{ read -r f_train; read -r f_val; } < <(launch/fortunes-corpus.sh --text)
"$py" - "$out/kjv-train.txt" "$out/kjv-val.txt" "$kjv" <<'PY'
import sys
tr, va, path = sys.argv[1:4]
data = open(path, "rb").read()
cut = data.index(b"\n", len(data) * 9 // 10) + 1
open(tr, "wb").write(data[:cut]); open(va, "wb").write(data[cut:])
PY
tok=$out/tokenizer.json
[ -s "$tok" ] && [ "$(cat "$out/tokenizer.vocab" 2>/dev/null)" = "$vocab" ] ||
  { "$py" bench/bpe_train.py "$out/kjv-train.txt" "$vocab" "$tok" && echo "$vocab" >"$out/tokenizer.vocab"; }
for s in kjv-train:"$out/kjv-train.txt" kjv-val:"$out/kjv-val.txt" fortunes-train:"$f_train" fortunes-val:"$f_val"; do
  "$fgpipe" tokenize --tokenizer "$tok" --in "${s#*:}" --out "$out/${s%%:*}.bin" 2>&1 | sed 's/^fgpipe: /  /'
done
for s in kjv-val fortunes-val; do
  head -c $((2 * val_cap)) "$out/$s.bin" >"$out/$s.cap" && mv "$out/$s.cap" "$out/$s.bin"
done

# --- runs ----------------------------------------------------------------------------------
model=(--config launch/configs/llama-tiny.conf --set data=tokens --set model=llama --set vocab="$vocab" --set n_layer=4 --set n_embd=128
       --set n_head=4 --set n_kv_head=2 --set head_dim=32 --set intermediate_size=352
       --set ctx=64 --set rope_theta=500000 --set rope_scaling_factor=0 --set rms_norm_eps=1e-5 --set qk_norm=0
       --set tie_embeddings=1
       --set micro_batch=4 --set micro_batches=4 --set stages=1 --set optimizer=adam
       --set beta1=0.9 --set beta2=0.95 --set weight_decay=0 --set lr_schedule=cosine
       --set min_lr=0 --set seed=1 --set print_every=1000000 --set precision="${PRECISION:-fp32}")
lora=(lora_rank=8 lora_alpha=16 lora_targets=q,k,v,o,gate,up,down)
kjv_data=(train_tokens="$out/kjv-train.bin" val_tokens="$out/kjv-val.bin")
fort_data=(train_tokens="$out/fortunes-train.bin" val_tokens="$out/fortunes-val.bin")
val_loss() { "$py" -c 'import json,sys; print("%.4f" % json.load(open(sys.argv[1]))["val_loss"])' "$1"; }

t0=$(date +%s)
echo "pretraining: $pre_steps steps of bp on the KJV"
train pretrain "$pre_steps" "${kjv_data[@]}" mode=bp lr=0.003 eval_every=0 || exit 1
ck=$out/pretrain/checkpoint.h5
"$fgpipe" eval --checkpoint "$ck" --tokens "$out/fortunes-val.bin" --summary-json "$out/zero-shot.json" \
  >"$out/zero-shot.log" 2>&1 || { echo "zero-shot eval failed: $(tail -n 1 "$out/zero-shot.log")"; exit 1; }

# Llama 3's vocabulary on the same blocks: a few bp steps, for the table's cost.
if [ "${LLAMA3_CHECK:-1}" = 1 ] && [ -s data/hf/llama3/tokenizer.json ]; then
  head -c 200000 "$out/kjv-train.txt" >"$out/kjv-head.txt"
  head -c 4000 "$out/kjv-val.txt" >"$out/kjv-val-head.txt"   # about 1000 tokens: a short evaluation
  for f in kjv-head kjv-val-head; do
    "$fgpipe" tokenize --tokenizer data/hf/llama3/tokenizer.json --in "$out/$f.txt" --out "$out/$f-llama3.bin" >/dev/null 2>&1
    "$fgpipe" tokenize --tokenizer "$tok" --in "$out/$f.txt" --out "$out/$f-$vocab.bin" >/dev/null 2>&1
  done
  for v in "$vocab" 128256; do
    f=$v; [ "$v" = 128256 ] && f=llama3
    train "vocab-$v" 6 mode=bp lr=0.003 eval_every=0 vocab="$v" train_tokens="$out/kjv-head-$f.bin" \
      val_tokens="$out/kjv-val-head-$f.bin" -- --no-checkpoint || true
  done
fi

best_lr="" best=""
for lr in $fg_lrs; do
  train "sweep-fg-$lr" "$sweep_steps" mode=fg lr="$lr" eval_every=0 "${lora[@]}" "${fort_data[@]}" \
    -- --init-from "$ck" --no-checkpoint || continue
  l=$(val_loss "$out/sweep-fg-$lr.json")
  echo "fg lr sweep: lr $lr, $sweep_steps steps: fortunes validation $l nats/token"
  if [ -z "$best" ] || "$py" -c 'import sys; sys.exit(not float(sys.argv[1]) < float(sys.argv[2]))' "$l" "$best"; then
    best=$l best_lr=$lr
  fi
done
[ -n "$best_lr" ] || { echo "fg lr sweep: every lr failed" >&2; best_lr=1e-3; }

rows=(
  "bp|mode=bp lr=0.002"
  "fg|mode=fg lr=$best_lr"
  "fg K=8|mode=fg tangents=8 lr=$best_lr"
  "fg+bp|mode=fg+bp perturb=weight estimator=mix select=1 lag=0 shrink=0.1 lr=0.002"
)
read -r -a want <<<"${ROWS:-}"
for r in "${rows[@]}"; do
  IFS='|' read -r name sets <<<"$r"
  selected "$name" "${want[@]}" || continue
  echo "fine-tuning: $name ($sets), $ft_steps steps"
  # shellcheck disable=SC2086
  train "ft-${name// /-}" "$ft_steps" $sets eval_every="$every" "${lora[@]}" "${fort_data[@]}" \
    -- --init-from "$ck" --no-checkpoint || continue
done

# Streamed from flash: the same fine-tunes with the stage's layers in a layer store.
stream_steps=${STREAM_STEPS:-$ft_steps}
srows=()
for r in "${rows[@]}"; do [ "${r%%|*}" = "fg K=8" ] || srows+=("$r"); done
for r in "${srows[@]}"; do
  [ "$stream_steps" -gt 0 ] || break
  IFS='|' read -r name sets <<<"$r"
  w=$out/st-${name// /-}.w
  rm -rf "$w" && mkdir -p "$w"
  # shellcheck disable=SC2086
  train "probe-${name// /-}" 1 $sets "${lora[@]}" "${fort_data[@]}" \
    -- --mem-budget 1 --weights-dir "$w" --no-checkpoint >/dev/null || true
  floor=$(grep -oE "at least [0-9]+ bytes" "$out/probe-${name// /-}.log" | grep -oE "[0-9]+" | sort -n | tail -n 1)
  [ -n "$floor" ] || { echo "streamed $name: no floor from the probe"; continue; }
  budget=$floor; [ "${BUDGET:-0}" -gt "$budget" ] && budget=$BUDGET
  echo "fine-tuning streamed: $name ($sets), $stream_steps steps, mem_budget $budget bytes (floor $floor)"
  # shellcheck disable=SC2086
  train "st-${name// /-}" "$stream_steps" $sets eval_every="$every" stream=1 "${lora[@]}" "${fort_data[@]}" \
    -- --init-from "$ck" --no-checkpoint --mem-budget "$budget" --weights-dir "$w" || continue
  echo "$budget $floor" >"$out/st-${name// /-}.budget"
  rm -rf "$w"
done
total=$(( $(date +%s) - t0 ))

# --- table, curves, plot -------------------------------------------------------------------
echo
echo "bench/bench_lora.sh $pre_steps $ft_steps: ${total} s in all (tokenizing not counted); fg lr $best_lr"
"$py" bench/bench_lora_report.py "$out" "$plot" "${rows[@]}"
if [ "$stream_steps" -gt 0 ]; then "$py" bench/bench_lora_stream_report.py "$out" "${srows[@]}"; fi
