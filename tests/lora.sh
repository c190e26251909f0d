#!/usr/bin/env bash
# LoRA end to end (docs/gpt.md, "LoRA"): the tiny Llama of llama-tiny.conf trained briefly as a
# base, then LoRA adapters (rank 2, every projection) on it from --init-from: bp, fg and fg+bp
# give byte-identical losses and parameters on 1 and 2 stages, the base's tensors stay bit for
# bit, the validation loss falls; one SGD step's change of every A and B is the gradient of a
# float64 PyTorch model with the adapters (tests/llama_reference.py lora-grad); the merged export
# evaluates to the adapter model's loss; export-lora writes PEFT's layout; bad settings are
# refused by name.
#
# usage: lora.sh FGPIPE CONFIG   (CONFIG: launch/configs/llama-tiny.conf)
. "$(dirname "$0")/lib.sh" "$@"
root=$(dirname "$config")/../..
convert=$root/tools/fgpipe-convert
# The KJV's first bytes as uint16 tokens (vocab 256): data = tokens, so that the gradient check
# can train on one fixed window with the same model config.
head -c 200000 "$(cd "$root" && launch/text-corpus.sh 2>/dev/null)" >"$dir/kjv.txt"
/usr/bin/python3 - "$dir" <<'PY'
import sys, numpy as np
d = sys.argv[1]
b = np.fromfile(f"{d}/kjv.txt", dtype=np.uint8).astype("<u2")
b[:180000].tofile(f"{d}/train.bin"); b[180000:].tofile(f"{d}/val.bin")
b[5000:5033].tofile(f"{d}/window.bin")  # ctx + 1 tokens: the only window of a split
PY
base=(--set data=tokens --set train_tokens="$dir/train.bin" --set val_tokens="$dir/val.bin"
      --set warmup_steps=0 --set eval_every=0 --set print_every=1000000 --set micro_batch=2
      --set micro_batches=3)
lora=(lora_rank=2 lora_alpha=4 lora_targets=q,k,v,o,gate,up,down)

problem() { [ -f "$dir/$1.problem" ] && echo "$1: $(cat "$dir/$1.problem")"; }

# The base: 20 steps of full training.
train_on basemodel 1 steps=20
verdict "the base model trains" "$(problem basemodel)"
from=(-- --init-from "$dir/basemodel/checkpoint.h5")

cases=(
  "bp|mode=bp"
  "fg|mode=fg optimizer=sgd lr=0.001"
  "fgbp|mode=fg+bp estimator=cv select=1 lag=1 optimizer=sgd lr=0.001"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name sets_text <<<"$c"
  read -r -a sets <<<"$sets_text"
  for M in 1 2; do train_on "$name-M$M" "$M" steps=10 "${lora[@]}" "${sets[@]}" "${from[@]}"; done
  same_runs "$name: LoRA on 2 stages = 1 stage, byte for byte" "$name-M1" "$name-M2"
done

# The base's tensors bit for bit in every LoRA checkpoint, with no optimizer state (a frozen layer
# takes no step: its parameters alone are saved, not zeros the size of an 8B base); every
# adapter's B moved from 0 (A moves only where B is not 0: after the first step).
for name in bp-M2 fg-M2 fgbp-M2; do
  verdict "$name: the base is unchanged and saved without optimizer state, the adapters trained" "$(py_check "$dir/basemodel/checkpoint.h5" "$dir/$name/checkpoint.h5" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["params"] for p in sys.argv[1:3])
f = h5py.File(sys.argv[2], "r")
opt = f["optimizer/m" if "m" in f["optimizer"] else "optimizer/velocity"]  # Adam's or SGD's
names = []
b.visit(lambda n: names.append(n) if isinstance(b[n], h5py.Dataset) else None)
base = [n for n in names if ".lora_" not in n]
lora_B = [n for n in names if ".lora_B" in n]
bad = [n for n in base if n not in a or not np.array_equal(a[n][...].view(np.uint32), b[n][...].view(np.uint32))]
still = [n for n in lora_B if not np.any(b[n][...])]
stepped = [n for n in base if n in opt]  # a frozen layer: parameters alone
kept = [n for n in lora_B if n not in opt]
out = []
if bad: out.append(f"base tensors changed: {bad[:3]}")
if still: out.append(f"B still zero: {still[:3]}")
if stepped: out.append(f"the base has optimizer state in the checkpoint: {stepped[:3]}")
if kept: out.append(f"adapters without optimizer state: {kept[:3]}")
if len(lora_B) != 2 * 7: out.append(f"{len(lora_B)} adapters' B, not 14 (2 blocks x 7)")
print("; ".join(out))
PY
)"
done

# The loss falls: the adapters' validation loss below the base's (which is where LoRA starts:
# B = 0), bp at a larger learning rate.
train_on falls 1 steps=30 lr=0.01 "${lora[@]}" "${from[@]}"
start=$(grep -o "val loss [0-9.]*" "$dir/basemodel.log" | grep -o "[0-9.]*$")
end=$(grep -o "val loss [0-9.]*" "$dir/falls.log" | grep -o "[0-9.]*$")
awk -v s="${start:-0}" -v e="${end:-9}" 'BEGIN { exit !(e < s) }' &&
  verdict "LoRA's validation loss falls ($start -> $end)" "" ||
  verdict "LoRA's validation loss falls" "$start -> $end $(problem falls)"

# The gradient: one plain SGD step (momentum 0) on the one window of window.bin from the bp
# checkpoint (B not 0), against PyTorch in float64. lr = 1000: (A0 - A1) / lr then carries
# float32's rounding of A1 at 1e-7 of the step, not of A (some gradients are 1e-6). The bound
# is per tensor, relative to its largest entry: float32's gradients of the smallest (1e-6)
# differ from float64's by ~1e-4 of that.
train_on grad 1 steps=1 micro_batch=1 micro_batches=1 optimizer=sgd momentum=0 lr=1000 \
  lr_schedule=constant weight_decay=0 clip_norm=0 train_tokens="$dir/window.bin" "${lora[@]}" \
  -- --init-from "$dir/bp-M1/checkpoint.h5"
if [ -f "$dir/grad.problem" ]; then
  verdict "LoRA's gradients equal PyTorch's float64 within 1e-3" "$(problem grad)"
elif /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  out=$(/usr/bin/python3 "$root/tests/llama_reference.py" lora-grad "$dir/bp-M1/checkpoint.h5" \
        "$dir/grad/checkpoint.h5" "$dir/window.bin" 1000 2>&1)
  err=$(echo "$out" | grep -o "max_rel_err [0-9.e+-]*" | cut -d' ' -f2)
  awk -v e="${err:-1}" 'BEGIN { exit !(e < 1e-3) }' && [ "$(echo "$out" | wc -l)" -eq 1 ] &&
    verdict "LoRA's gradients equal PyTorch's float64 within 1e-3 ($out)" "" ||
    verdict "LoRA's gradients equal PyTorch's float64 within 1e-3" "$out"
else
  verdict "LoRA's gradients equal PyTorch's float64 within 1e-3" "python3-torch is missing"
fi

# Export: merged, W + (alpha/r) B A, evaluates to the adapter model's loss; export-lora writes
# PEFT's names, shapes and config.
head -c 20000 "$dir/val.bin" >"$dir/eval.bin"
ck=$dir/bp-M1/checkpoint.h5
"$convert" export "$ck" "$dir/merged" 2>"$dir/conv.err" &&
  "$convert" import "$dir/merged" "$dir/merged.h5" --ctx 32 2>>"$dir/conv.err" &&
  "$fgpipe" eval --checkpoint "$ck" --tokens "$dir/eval.bin" --summary-json "$dir/e_lora.json" >/dev/null 2>&1 &&
  "$fgpipe" eval --checkpoint "$dir/merged.h5" --tokens "$dir/eval.bin" --summary-json "$dir/e_merged.json" \
    >/dev/null 2>&1
verdict "the merged export evaluates to the adapter model's loss within 1e-5" "$(py_check "$dir/e_lora.json" "$dir/e_merged.json" "$dir/basemodel/checkpoint.h5" "$dir/eval.bin" <<'PY'
import json, sys
a, b = (json.load(open(p))["loss"] for p in sys.argv[1:3])
print("" if abs(a - b) <= 1e-5 * abs(a) else f"adapters {a}, merged {b}")
PY
)$(tail -n 1 "$dir/conv.err")"
"$convert" export-lora "$ck" "$dir/peft" 2>"$dir/conv.err"
verdict "export-lora: PEFT's adapter_model.safetensors and adapter_config.json" "$(py_check "$dir/peft" "$ck" "$root/tools" <<'PY'
import sys, json, h5py, numpy as np
sys.path.insert(0, sys.argv[3])
import fgpipe_safetensors
t = fgpipe_safetensors.read(f"{sys.argv[1]}/adapter_model.safetensors")
cfg = json.load(open(f"{sys.argv[1]}/adapter_config.json"))
p = h5py.File(sys.argv[2], "r")["params"]
out = []
if (cfg["peft_type"], cfg["task_type"], cfg["r"], cfg["lora_alpha"]) != ("LORA", "CAUSAL_LM", 2, 4.0):
    out.append(f"config {cfg}")
if sorted(cfg["target_modules"]) != sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]):
    out.append(f"target_modules {cfg['target_modules']}")
if len(t) != 2 * 2 * 7: out.append(f"{len(t)} tensors, not 28")
A = t.get("base_model.model.model.layers.1.self_attn.k_proj.lora_A.weight")
B = t.get("base_model.model.model.layers.0.mlp.down_proj.lora_B.weight")
if A is None or A.shape != (2, 32) or not np.array_equal(A, p["layers.1.self_attn.k_proj.lora_A/weight"][...]):
    out.append("k_proj's lora_A is not the checkpoint's [2, 32]")
if B is None or B.shape != (32, 2) or not np.array_equal(B, p["layers.0.mlp.down_proj.lora_B/weight"][...]):
    out.append("down_proj's lora_B is not the checkpoint's [32, 2]")
print("; ".join(out))
PY
)$(tail -n 1 "$dir/conv.err")"

# Refused by name, exit 2.
refused() {  # refused LABEL WANT KEY=VALUE...
  local label=$1 want=$2; shift 2
  local sets=(); for kv in "$@"; do sets+=(--set "$kv"); done
  "$fgpipe" train --config "$config" "${base[@]}" --set steps=1 "${sets[@]}" --no-checkpoint >/dev/null 2>"$dir/bad.err"
  local rc=$?
  [ $rc -eq 2 ] && grep -q "$want" "$dir/bad.err" && verdict "$label: refused by name, exit 2" "" ||
    verdict "$label: refused by name, exit 2" "exit $rc: $(cat "$dir/bad.err")"
}
# Continuing a LoRA checkpoint with other adapters: refused by the key that differs.
train_on other 1 steps=1 lora_rank=2 lora_alpha=8 lora_targets=q,k,v,o,gate,up,down -- --init-from "$dir/bp-M1/checkpoint.h5"
grep -q "it has lora_alpha = 4, the config lora_alpha = 8" "$dir/other.log" &&
  verdict "a LoRA checkpoint under another lora_alpha: refused by name" "" ||
  verdict "a LoRA checkpoint under another lora_alpha: refused by name" "$(tail -n 3 "$dir/other.log")"
refused "LoRA on the GPT" "for model = llama only" model=gpt lora_rank=2
refused "a bad target" "'qkv' is not one of" lora_rank=2 lora_targets=q,qkv
refused "dropout" "lora_dropout = 0.1: only 0" lora_rank=2 lora_dropout=0.1
refused "activity perturbation" "perturb = weight" lora_rank=2 mode=fg perturb=activity
"$convert" export-lora "$dir/basemodel/checkpoint.h5" "$dir/nolora" 2>"$dir/bad.err"
rc=$?
[ $rc -eq 2 ] && grep -q "no LoRA adapters" "$dir/bad.err" && verdict "export-lora of a base: refused by name" "" ||
  verdict "export-lora of a base: refused by name" "exit $rc: $(cat "$dir/bad.err")"
finish
