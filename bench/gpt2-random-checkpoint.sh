#!/usr/bin/env bash
# A random-weight GPT-2 of a launch/configs shape as fgpipe checkpoint, made the way a real one
# is: tests/gpt2_reference.py writes it in Hugging Face's layout (python3-torch), then
# tools/fgpipe-convert imports it, keeping ctx rows of wpe. Speed does not depend on the weights.
# Does nothing when OUT exists. Needs about 2x the model's float32 size free beside OUT.
#   usage: bench/gpt2-random-checkpoint.sh SIZE CTX OUT.h5      (SIZE: 124m, 355m, 774m, 1.5b)
set -euo pipefail
cd "$(dirname "$0")/.."
size=$1 ctx=$2 out=$3
config=launch/configs/gpt2-$size.conf
[ -f "$config" ] || { echo "no $config (124m, 355m, 774m, 1.5b)" >&2; exit 2; }
[ -f "$out" ] && exit 0
shape() { sed -n "s/^$1 = \([0-9]*\).*/\1/p" "$config"; }
ref=$(dirname "$out")/ref-$size
/usr/bin/python3 tests/gpt2_reference.py "$ref" --weights-only --n-layer "$(shape n_layer)" \
  --n-embd "$(shape n_embd)" --n-head "$(shape n_head)" --ctx 1024
tools/fgpipe-convert import "$ref/model.safetensors" "$out" --n-head "$(shape n_head)" --ctx "$ctx"
rm -rf "$ref"
