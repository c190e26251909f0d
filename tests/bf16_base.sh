#!/usr/bin/env bash
# A frozen base kept in BF16 (issue 53; docs/out-of-core.md, "A frozen base in BF16"): a tiny
# Llama exported to a Hugging Face directory in BF16 and imported again keeps its tensors BF16
# in the checkpoint (2-byte floats); LoRA from it streams the base from a store of BF16 slots
# (2 bytes a value on flash) and trains bitwise as in memory, and as from the same weights
# imported in F32 (the values are the same), while a step reads half the base's bytes; the
# run's checkpoint keeps the base BF16; a BF16 store that a run would train is refused by name.
#
# usage: bf16_base.sh FGPIPE CONFIG   (CONFIG: launch/configs/llama-tiny.conf)
. "$(dirname "$0")/lib.sh" "$@"
convert=$(dirname "$config")/../../tools/fgpipe-convert
kjv_tokens 60000 50000
base=(--set data=tokens --set train_tokens="$dir/train.bin" --set val_tokens="$dir/val.bin"
      --set n_embd=96 --set intermediate_size=256 --set ctx=16 --set micro_batch=1
      --set micro_batches=2 --set warmup_steps=0 --set eval_every=0 --set print_every=1000000
      --set mem_runtime=0)
lora=(--set lora_rank=2 --set lora_alpha=4 --set lora_targets=q,k,v,o,gate,up,down --set steps=6)

run() {  # run NAME BUDGET ARGS...: one stage (BUDGET -: in memory) into NAME/, NAME.bin
  local name=$1 budget=$2; shift 2
  local extra=()
  [ "$budget" != - ] && extra+=(--mem-budget "$budget" --weights-dir "$dir/$name.w") && mkdir -p "$dir/$name.w"
  timeout 120 "$fgpipe" train --config "$config" "${base[@]}" "$@" "${extra[@]}" --out "$dir/$name" \
    --save-params "$dir/$name.bin" >"$dir/$name.log" 2>&1
}

run trained - --set steps=10
"$convert" export "$dir/trained/checkpoint.h5" "$dir/hf16" --dtype bf16 >/dev/null 2>&1 &&
  "$convert" import "$dir/hf16" "$dir/b16.h5" >/dev/null 2>"$dir/import.err" &&
  "$convert" export "$dir/b16.h5" "$dir/hf32" --dtype f32 >/dev/null 2>&1 &&
  "$convert" import "$dir/hf32" "$dir/f32.h5" >/dev/null 2>>"$dir/import.err"
verdict "a BF16 directory imports into BF16 datasets, an F32 one into float32" "$(py_check "$dir" <<'PY'
import sys, h5py
d = sys.argv[1]
def sizes(p):
    out = set()
    with h5py.File(p) as f:
        f["params"].visititems(lambda n, o: out.add(o.id.get_type().get_size()) if isinstance(o, h5py.Dataset) else None)
    return out
if sizes(f"{d}/b16.h5") != {2}: print("b16.h5 holds", sizes(f"{d}/b16.h5"))
if sizes(f"{d}/f32.h5") != {4}: print("f32.h5 holds", sizes(f"{d}/f32.h5"))
PY
)"

# The trained checkpoint's weights rounded to BF16, as BF16 datasets (b16.h5) and as float32
# (f32.h5): the converter's files carry its own config (data = text), these the run's.
cp "$dir/trained/checkpoint.h5" "$dir/b16.h5" && cp "$dir/trained/checkpoint.h5" "$dir/f32.h5"
verdict "the trained weights rounded to BF16, stored as BF16 and as float32" "$(py_check "$dir" "$(dirname "$convert")" <<'PY'
import sys, h5py, numpy as np
sys.path.insert(0, sys.argv[2])
import fgpipe_stream as stream
for name, bf16 in (("b16", True), ("f32", False)):
    with h5py.File(f"{sys.argv[1]}/{name}.h5", "r+") as f:
        keys = []
        f["params"].visititems(lambda n, o: keys.append(n) if isinstance(o, h5py.Dataset) else None)
        for k in keys:
            a = f["params"][k][()]
            r = (stream.bf16_bits(a).astype(np.uint32) << 16).view(np.float32)  # truncated: BF16 values
            del f["params"][k]
            stream.write_dataset(f, f"params/{k}", a.shape, lambda r0, r1, r=r: r[r0:r1] if r.ndim else r, bf16)
PY
)"
run probe 1 "${lora[@]}" --init-from "$dir/b16.h5"
floor=$(grep -oE "at least [0-9]* bytes" "$dir/probe.log" | grep -oE "[0-9]+" | sort -n | tail -n 1)
run mem - "${lora[@]}" --init-from "$dir/b16.h5"
run ooc16 "${floor:-1}" "${lora[@]}" --init-from "$dir/b16.h5"
run ooc32 "${floor:-1}" "${lora[@]}" --init-from "$dir/f32.h5"
same() {  # same A B: "" when runs A and B have the same losses and parameters, bitwise
  cmp -s <(cut -d, -f1-3 "$dir/$1/loss.csv") <(cut -d, -f1-3 "$dir/$2/loss.csv") || echo "losses differ"
  cmp -s "$dir/$1.bin" "$dir/$2.bin" || echo "params differ"
}
problem() { grep -h -m1 error "$dir/$1.log"; }
verdict "LoRA on the BF16 base streamed at its floor ($floor bytes) equals in memory, bitwise" \
  "$(problem ooc16)$(problem mem)$(same mem ooc16)"
verdict "... and equals the same base imported in F32, streamed" "$(problem ooc32)$(same ooc16 ooc32)"
read16=$(grep -oE "a step read [0-9.]+ GB" "$dir/ooc16.log" | grep -oE "[0-9.]+")
read32=$(grep -oE "a step read [0-9.]+ GB" "$dir/ooc32.log" | grep -oE "[0-9.]+")
verdict "a step reads about half the base's bytes from BF16 slots ($read16 GB against $read32 GB)" \
  "$(/usr/bin/python3 -c "import sys; a, b = float(sys.argv[1] or 0), float(sys.argv[2] or 0)
print('' if b > 0 and 0.45 < a / b < 0.6 else 'ratio not about 1/2')" "$read16" "$read32")"
verdict "the store keeps the base's slots as 2-byte values, the adapters as float32" "$(py_check "$dir" <<'PY'
import sys, glob, h5py
(p,) = glob.glob(f"{sys.argv[1]}/ooc16.w/stage-*.h5")
with h5py.File(p) as f:
    sizes = {n: f["slot0"][n].dtype.itemsize for n in f["slot0"]}
base = {n: s for n, s in sizes.items() if "lora" not in n and not n.split(".", 1)[1].startswith("lora")}
if set(f for n, f in sizes.items() if "lora" in n) != {4}: print("adapters", sizes)
if 2 not in base.values(): print("no BF16 slot", sizes)
PY
)"
verdict "the run's checkpoint keeps the base in BF16 and loads back" "$(py_check "$dir" <<'PY'
import sys, h5py
with h5py.File(f"{sys.argv[1]}/ooc16/checkpoint.h5") as f:
    t = f["params/layers.0.self_attn.q_proj/weight"].id.get_type().get_size()
if t != 2: print("the base's q_proj is", t, "bytes a value")
PY
)"
run again - "${lora[@]}" --init-from "$dir/ooc16/checkpoint.h5"
verdict "... (a run from it starts)" "$(problem again)"
# Llama's weights hold no position table: a shorter ctx loads them, a longer one is refused.
run ctx8 - "${lora[@]}" --set ctx=8 --init-from "$dir/b16.h5"
run ctx32 - "${lora[@]}" --set ctx=32 --init-from "$dir/b16.h5"
verdict "Llama's checkpoint of ctx 16 loads at ctx 8 and is refused at ctx 32, naming ctx" \
  "$(problem ctx8)$(grep -q "it has ctx = 16, the config ctx = 32" "$dir/ctx32.log" || tail -n 1 "$dir/ctx32.log")"
# A store made with the base's block 0 frozen (BF16 on flash), its settings record gone (an older
# store's): a run that would train block 0 is refused by the BF16 layer's name, the store kept.
run frozen0 64M --set stream=1 --set steps=2 --set freeze=h.0 --init-from "$dir/b16.h5"
rm -f "$dir"/frozen0.w/*.conf && sum0=$(md5sum "$dir"/frozen0.w/*.h5)
timeout 120 "$fgpipe" train --config "$config" "${base[@]}" --set steps=4 --set stream=1 --mem-budget 64M \
  --weights-dir "$dir/frozen0.w" --resume-weights --out "$dir/refused" >"$dir/refused.log" 2>&1
rc=$?
verdict "a BF16 store that a run would train is refused by name (exit $rc), the store unchanged" \
  "$(problem frozen0)$([ "$rc" -eq 2 ] && grep -q "in BF16" "$dir/refused.log" || tail -n 1 "$dir/refused.log")$(
     [ "$sum0" = "$(md5sum "$dir"/frozen0.w/*.h5)" ] || echo " the store changed")"
finish
