#!/usr/bin/env bash
# Fine-tunes a GPT-2 checkpoint on the fortunes corpus (launch/fortunes-corpus.sh): converts
# Hugging Face's model.safetensors (tools/fgpipe-convert; an fgpipe .h5 is used as is), scores
# the validation tokens before training (fgpipe eval), trains with launch/configs/gpt2-SIZE.conf
# from those weights (--init-from: fresh optimizer state) into out/finetune-gpt2-SIZE/, and
# scores them again. Extra arguments go to `fgpipe train`: --set steps=50, --set ctx=256 (with a
# checkpoint imported at --ctx 256), --mem-budget 1G --weights-dir /flash/fgpipe (out of core),
# --set mode=fg+bp, --set stages=4.
#   usage: launch/finetune-gpt2.sh MODEL.safetensors|CHECKPOINT.h5 [124m|355m|774m|1.5b] [ARGS...]
# The weights: https://huggingface.co/openai-community/gpt2/resolve/main/model.safetensors
# (124M; gpt2-medium, gpt2-large, gpt2-xl for the others).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
model=$1 size=124m
shift
case ${1:-} in 124m|355m|774m|1.5b) size=$1; shift ;; esac
config=launch/configs/gpt2-$size.conf
launch/build.sh
out=out/finetune-gpt2-$size
mkdir -p "$out"
checkpoint=$model
if [[ $model == *.safetensors ]]; then
  checkpoint=$out/init.h5
  heads=$(sed -n 's/^n_head = \([0-9]*\).*/\1/p' "$config")
  tools/fgpipe-convert import "$model" "$checkpoint" --n-head "$heads"
fi
{ read -r train; read -r val; } < <(launch/fortunes-corpus.sh)
. launch/lib.sh
stages=1 replicas=1  # one rank per stage and replica: --set stages=4 --set replicas=2
for a in "$@"; do
  case $a in stages=*) stages=${a#stages=} ;; replicas=*) replicas=${a#replicas=} ;; esac
done
mpi_flags $((stages * replicas))
echo "before fine-tuning:"
build/fgpipe eval --checkpoint "$checkpoint" --tokens "$val" --batch 1
mpirun "${MPI_FLAGS[@]}" build/fgpipe train --config "$config" --init-from "$checkpoint" \
  --set train_tokens="$train" --set val_tokens="$val" --out "$out" --summary-json "$out/summary.json" "$@"
echo "after fine-tuning:"
build/fgpipe eval --checkpoint "$out/checkpoint.h5" --tokens "$val" --batch 1
