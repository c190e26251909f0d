#!/usr/bin/env bash
# Fine-tunes a Hugging Face model directory (config.json, model*.safetensors and, for Llama 3 and
# Qwen3, tokenizer.json) on a text, end to end:
#   1. imports it (tools/fgpipe-convert: GPT-2, Llama, Qwen3; BF16/F16 widened to float32),
#   2. tokenizes the text with the model's own tokenizer (fgpipe tokenize --tokenizer
#      tokenizer.json; GPT-2 without one: its vocabulary, launch/gpt2-vocab.sh),
#   3. scores the validation text (fgpipe eval; its first VAL_WINDOWS windows, default 16: a
#      151 936-token head scored all 64 613 tokens of the fortunes in about 2 minutes),
#   4. fine-tunes the whole model with the checkpoint's own config plus the fine-tuning settings
#      below (fgpipe train --init-from; extra ARGS go to it: --set steps=500, --set mode=fg+bp,
#      --set stages=2, --mem-budget 2G --weights-dir /flash/w), or LoRA adapters on the frozen
#      base of a Llama or Qwen3 (--set lora_rank=8 [--set lora_targets=q,k,v,o]),
#   5. takes the run's own score of the same windows (its summary's val_loss: not scored a
#      third time) and exports it in Hugging Face's layout to OUT/hf (LoRA: the merged model
#      there, and the adapters in PEFT's layout in OUT/adapter).
# TRAIN_TEXT and VAL_TEXT name the text (default: the fortunes' text, launch/fortunes-corpus.sh
# --text, which fetches and tokenizes nothing: the model's own tokenizer does);
# OUT the folder (default out/finetune-<dir name>); CTX the window (default 128); FGPIPE a built
# fgpipe (default: launch/build.sh, then build/fgpipe).
#   usage: launch/finetune.sh HF_DIR [ARGS for fgpipe train...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,21p' "$0" >&2; exit 2; }
hf=$(realpath "$1")
shift
fail() { echo "finetune: $*" >&2; exit 1; }
[ -f "$hf/config.json" ] || fail "$hf has no config.json (a Hugging Face model directory?)"
if [ -z "${FGPIPE:-}" ]; then (cd "$root" && launch/build.sh >&2); FGPIPE=$root/build/fgpipe; fi
convert=$root/tools/fgpipe-convert
out=${OUT:-$root/out/finetune-$(basename "$hf")} ctx=${CTX:-128} val_windows=${VAL_WINDOWS:-16}
mkdir -p "$out"
if [ -z "${TRAIN_TEXT:-}" ]; then
  { read -r TRAIN_TEXT; read -r VAL_TEXT; } < <(cd "$root" && launch/fortunes-corpus.sh --text)
  TRAIN_TEXT=$root/$TRAIN_TEXT VAL_TEXT=$root/$VAL_TEXT
fi
family=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("model_type", "?"))' "$hf/config.json")

echo "== import ($family)"
case $family in
  gpt2)
    heads=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["n_head"])' "$hf/config.json")
    "$convert" import "$hf/model.safetensors" "$out/init.h5" --n-head "$heads" --ctx "$ctx" ;;
  llama|qwen3) "$convert" import "$hf" "$out/init.h5" --ctx "$ctx" ;;
  *) fail "model_type '$family' in $hf/config.json: fgpipe fine-tunes gpt2, llama and qwen3" ;;
esac

echo "== tokenize with the model's tokenizer"
if [ -f "$hf/tokenizer.json" ]; then tok=(--tokenizer "$hf/tokenizer.json")
elif [ "$family" = gpt2 ]; then tok=(--vocab "$(cd "$root" && realpath "$(launch/gpt2-vocab.sh)")")
else fail "$hf has no tokenizer.json"; fi
for s in train val; do
  text=TRAIN_TEXT; [ $s = val ] && text=VAL_TEXT
  "$FGPIPE" tokenize "${tok[@]}" --in "${!text}" --out "$out/$s.bin"
done
# The validation windows scored: the first val_windows windows of ctx + 1 tokens (uint16, or
# uint32 after the 8-byte FGTOKU32 header).
head=0 width=2
[ "$(head -c 8 "$out/val.bin")" = FGTOKU32 ] && head=8 width=4
keep=$((head + val_windows * (ctx + 1) * width))
if [ "$(stat -c %s "$out/val.bin")" -gt "$keep" ]; then
  truncate -s "$keep" "$out/val.bin"
  echo "validation: the first $val_windows windows of $ctx tokens (VAL_WINDOWS)"
fi

# The checkpoint's config (its shape, vocab, window) and settings for a fine-tune: AdamW at a
# small rate, a short warm-up, 4 windows of 128 tokens a step; ARGS override any of them. A
# small model's step is its head's: 151 936 columns took 13 s a step at 8 windows of 256 tokens
# (2 048), so a 20-step run was over 4 minutes of steps alone; at 512 tokens a quarter of that.
/usr/bin/python3 -c 'import sys, h5py; print(h5py.File(sys.argv[1], "r").attrs["config"].decode())' \
  "$out/init.h5" >"$out/model.conf"
cat >>"$out/model.conf" <<EOF
data = tokens
mode = bp
optimizer = adam
lr = 0.00005
beta2 = 0.95
weight_decay = 0
warmup_steps = 10
lr_schedule = cosine
micro_batch = 1
micro_batches = 4
steps = 100
eval_every = 0
print_every = 10
EOF
. "$root/launch/lib.sh"
stages=1 replicas=1
for a in "$@"; do
  case $a in stages=*) stages=${a#stages=} ;; replicas=*) replicas=${a#replicas=} ;; esac
done
mpi_flags $((stages * replicas))

echo "== before fine-tuning"
"$FGPIPE" eval --checkpoint "$out/init.h5" --tokens "$out/val.bin" --summary-json "$out/eval-before.json"
echo "== fine-tuning"
mpirun "${MPI_FLAGS[@]}" "$FGPIPE" train --config "$out/model.conf" --init-from "$out/init.h5" \
  --set train_tokens="$out/train.bin" --set val_tokens="$out/val.bin" --out "$out/run" \
  --summary-json "$out/summary.json" "$@"

echo "== export to $out/hf"
if [ "$family" = gpt2 ]; then
  mkdir -p "$out/hf" && "$convert" export "$out/run/checkpoint.h5" "$out/hf/model.safetensors"
else
  "$convert" export "$out/run/checkpoint.h5" "$out/hf"
  lora=$(sed -n 's/^lora_rank = \([0-9]*\).*/\1/p' "$out/run/config.txt" 2>/dev/null | tail -n 1)
  if [ "${lora:-0}" -gt 0 ]; then
    echo "== LoRA adapters (PEFT's layout) to $out/adapter"
    "$convert" export-lora "$out/run/checkpoint.h5" "$out/adapter"
  fi
fi
/usr/bin/python3 - "$out" <<'PY'
import json, sys
b, a = json.load(open(f"{sys.argv[1]}/eval-before.json")), json.load(open(f"{sys.argv[1]}/summary.json"))
print(f"validation loss {b['loss']:.4f} -> {a['val_loss']:.4f} nats/token over {b['tokens']} tokens")
PY
