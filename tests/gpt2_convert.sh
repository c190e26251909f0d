#!/usr/bin/env bash
# tools/fgpipe-convert at GPT-2's real vocabulary (50257 tokens), checked against PyTorch: a
# randomly initialised GPT-2 in Hugging Face's layout (tests/gpt2_reference.py: "transformer."
# prefix, Conv1D weights [in, out], mask buffers, no lm_head) imports with its token table
# padded to 50304 zero rows, `fgpipe eval` gives PyTorch's loss and logits on the same windows,
# export gives the tensors back (and a second round trip the same bytes), and bad files and
# options are refused by name with exit 2. Needs python3-torch: without it the test fails.
#
# usage: gpt2_convert.sh FGPIPE CONFIG   (CONFIG: any config in launch/configs/, for the root)
. "$(dirname "$0")/lib.sh" "$@"
root=$(dirname "$config")/../..
convert=$root/tools/fgpipe-convert
V=50257 Vp=50304 C=64 H=4 T=32 windows=4

if ! /usr/bin/python3 -c 'import torch' 2>"$dir/torch.err"; then
  verdict "PyTorch for the reference (apt-get install python3-torch)" "$(tail -n 1 "$dir/torch.err")"
  finish
fi
if ! /usr/bin/python3 "$root/tests/gpt2_reference.py" "$dir" --n-layer 2 --n-embd $C --n-head $H \
     --ctx $T --vocab $V --windows $windows 2>"$dir/ref.err"; then
  verdict "the PyTorch reference runs" "$(tail -n 1 "$dir/ref.err")"
  finish
fi

# A safetensors reader for the checks below (not the converter's: the test should not trust it).
cat >"$dir/st.py" <<'PY'
import json, struct, numpy as np
def read(path):  # {name: float32 array}, without the "transformer." prefix and the mask buffers
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    out = {}
    for k, v in json.loads(blob[8:8 + n]).items():
        if k == "__metadata__" or v["dtype"] != "F32":
            continue
        b, e = v["data_offsets"]
        out[k.removeprefix("transformer.")] = np.frombuffer(blob[8 + n + b:8 + n + e], "<f4").reshape(v["shape"])
    return out
PY
export PYTHONPATH=$dir

"$convert" import "$dir/model.safetensors" "$dir/gpt2.h5" --n-head $H 2>"$dir/conv.err"
verdict "import: the Hugging Face-layout GPT-2 (vocab $V) imports" "$(tail -n 1 "$dir/conv.err")"
verdict "import: wte and lm_head padded to $Vp rows of zeros, vocab attrs and config lines" "$(py_check "$dir/gpt2.h5" "$dir/model.safetensors" $V $Vp <<'PY'
import sys, h5py, numpy as np, st
f = h5py.File(sys.argv[1], "r")
hf, V, Vp = st.read(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
bad = []
for name in ("wte/weight", "lm_head/weight"):
    w = f["params"][name][...]
    if w.shape != (Vp, hf["wte.weight"].shape[1]):
        bad.append(f"{name} is {list(w.shape)}")
    elif w[V:].any() or not np.array_equal(w[:V], hf["wte.weight"]):
        bad.append(f"{name}: pad rows not zero or real rows not wte's")
if (f.attrs.get("vocab"), f.attrs.get("padded_vocab")) != (V, Vp):
    bad.append(f"attrs vocab {f.attrs.get('vocab')}, padded_vocab {f.attrs.get('padded_vocab')}")
config = f.attrs["config"].decode().splitlines()
bad += [f"config has no line '{l}'" for l in (f"vocab = {V}", "pad_vocab = 64", "data = tokens") if l not in config]
print("; ".join(bad))
PY
)"

# fgpipe eval against PyTorch. fgpipe computes in float32 (its own GEMM and reduction orders),
# the reference in float64 on the same float32 weights: float32 round-off through two blocks and
# a 50257-way log-sum-exp is about 1e-6 relative, so the bounds leave a wide margin, yet a
# transposed c_proj, swapped q and k or LayerNorm weight and bias move logits by 6 to 9, a GELU
# without its cubic term by 0.09, and the 47 pad columns wrongly in the softmax move the loss by
# 0.037 nats (3e-3 relative; the reference's logits sit near -4, the pads' at 0). Measured with
# a numpy forward on the imported checkpoint, 2026-11-25.
loss_tol=1e-4 logits_tol=1e-3
timeout 120 "$fgpipe" eval --checkpoint "$dir/gpt2.h5" --tokens "$dir/tokens.bin" \
  --summary-json "$dir/eval.json" --logits "$dir/eval_logits.bin" >"$dir/eval.log" 2>&1 ||
  echo "fgpipe eval exited with $?: $(grep -m1 "error:" "$dir/eval.log" || tail -n 1 "$dir/eval.log")" >"$dir/eval.problem"
check_eval() {  # check_eval SUMMARY LOGITS: "measured: ..." or the problems
  py_check "$1" "$2" "$dir/reference.json" "$dir/logits.bin" $V $T $loss_tol $logits_tol <<'PY'
import sys, json, numpy as np
got, ref = json.load(open(sys.argv[1])), json.load(open(sys.argv[3]))
V, T, loss_tol, logits_tol = int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7]), float(sys.argv[8])
bad = []
rel = abs(got["loss"] - ref["loss"]) / ref["loss"]
if not rel < loss_tol:
    bad.append(f"loss {got['loss']:.6f}, PyTorch's {ref['loss']:.6f} (relative {rel:.2g})")
if got.get("windows") != ref["windows"]:
    bad.append(f"{got.get('windows')} windows, not {ref['windows']}")
a = np.fromfile(sys.argv[2], "<f4")
if a.size != T * V:
    bad.append(f"logits: {a.size} floats, not {T} x {V}")
else:
    diff = np.abs(a - np.fromfile(sys.argv[4], "<f4")).max()
    if not diff < logits_tol:
        bad.append(f"logits differ by up to {diff:.3g}")
print("; ".join(bad) if bad else f"measured: loss {got['loss']:.6f} vs {ref['loss']:.6f}, relative {rel:.2g}; logits max |diff| {diff:.2g}")
PY
}
eval_verdict() {  # eval_verdict LABEL SUMMARY LOGITS PROBLEM_FILE
  local out
  if [ -f "$4" ]; then verdict "$1" "$(cat "$4")"; return; fi
  out=$(check_eval "$2" "$3")
  case $out in measured:*) verdict "$1 (${out#measured: })" "" ;; *) verdict "$1" "$out" ;; esac
}
eval_verdict "eval: loss within $loss_tol relative and logits within $logits_tol of PyTorch's, $windows windows" \
  "$dir/eval.json" "$dir/eval_logits.bin" "$dir/eval.problem"

# Without padding (--pad-vocab 1) the same model evaluates alike.
"$convert" import "$dir/model.safetensors" "$dir/nopad.h5" --n-head $H --pad-vocab 1 2>"$dir/conv.err" &&
  timeout 120 "$fgpipe" eval --checkpoint "$dir/nopad.h5" --tokens "$dir/tokens.bin" \
    --summary-json "$dir/nopad.json" --logits "$dir/nopad_logits.bin" >"$dir/nopad.log" 2>&1 ||
  echo "import or eval failed: $(tail -n 1 "$dir/conv.err") $(grep -m1 "error:" "$dir/nopad.log")" >"$dir/nopad.problem"
eval_verdict "eval, --pad-vocab 1 ($V rows): the same bounds" "$dir/nopad.json" "$dir/nopad_logits.bin" "$dir/nopad.problem"

# --ctx 16 keeps wpe's first 16 rows: that model on windows of 16 scores as the full one does
# on windows of 16 (fgpipe eval --ctx 16 pads the rest, which causal attention ignores).
"$convert" import "$dir/model.safetensors" "$dir/ctx16.h5" --n-head $H --ctx 16 2>"$dir/conv.err" &&
  timeout 120 "$fgpipe" eval --checkpoint "$dir/ctx16.h5" --tokens "$dir/tokens.bin" --summary-json "$dir/ctx16.json" >"$dir/ctx16.log" 2>&1 &&
  timeout 120 "$fgpipe" eval --checkpoint "$dir/gpt2.h5" --tokens "$dir/tokens.bin" --ctx 16 --summary-json "$dir/full16.json" >>"$dir/ctx16.log" 2>&1
verdict "import --ctx 16: the truncated model scores windows of 16 as the full one" "$(py_check "$dir/ctx16.json" "$dir/full16.json" <<'PY2'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ok = a["ctx"] == b["ctx"] == 16 and a["windows"] == b["windows"] and abs(a["loss"] - b["loss"]) <= 1e-6 * b["loss"]
print("" if ok else f"ctx16 {a}, full --ctx 16 {b}")
PY2
)"
"$convert" import "$dir/model.safetensors" "$dir/ctx99.h5" --n-head $H --ctx 99 2>"$dir/conv.err"
[ $? -eq 2 ] && grep -q "ctx 99: must be 1 to the" "$dir/conv.err" && verdict "import --ctx beyond wpe is refused" "" ||
  verdict "import --ctx beyond wpe is refused" "$(tail -n 1 "$dir/conv.err")"

# Export: the tensors back under GPT-2's names (no prefix, no pad rows); that file imports and
# exports again to the same bytes (sorted keys, no prefix: the round trip is exact).
"$convert" export "$dir/gpt2.h5" "$dir/back.safetensors" 2>"$dir/conv.err" &&
  "$convert" import "$dir/back.safetensors" "$dir/again.h5" --n-head $H 2>>"$dir/conv.err" &&
  "$convert" export "$dir/again.h5" "$dir/back2.safetensors" 2>>"$dir/conv.err"
verdict "export: Hugging Face's tensors back, wte without the pad rows" "$(py_check "$dir/model.safetensors" "$dir/back.safetensors" <<'PY'
import sys, numpy as np, st
a, b = st.read(sys.argv[1]), st.read(sys.argv[2])
bad = sorted(set(a) ^ set(b)) + [k for k in a if k in b and not np.array_equal(a[k], b[k])]
print(f"{len(bad)} of {len(a)} tensors missing or different: {bad[:3]}" if bad else "")
PY
)"
cmp -s "$dir/back.safetensors" "$dir/back2.safetensors" &&
  verdict "export -> import -> export: byte for byte" "" ||
  verdict "export -> import -> export: byte for byte" "the files differ: $(tail -n 1 "$dir/conv.err")"

# Bad input: exit 2, the problem named, no checkpoint written.
bad_cases=(
  "no ln_f.weight|ln_f.weight|no_ln_f.safetensors|"
  "h.1's c_attn [C, 2C]|h.1.attn.c_attn.weight is \[64, 128\], not \[64, 192\]|bad_c_attn.safetensors|"
  "--pad-vocab 0|--pad-vocab 0|model.safetensors|--pad-vocab 0"
)
for c in "${bad_cases[@]}"; do
  IFS='|' read -r label want file opts <<<"$c"
  read -r -a opts <<<"$opts"
  rm -f "$dir/bad.h5"
  "$convert" import "$dir/$file" "$dir/bad.h5" --n-head $H "${opts[@]}" 2>"$dir/bad.err"
  rc=$?
  [ $rc -eq 2 ] && grep -q -- "$want" "$dir/bad.err" && [ ! -e "$dir/bad.h5" ] &&
    verdict "import refuses $label by name, exit 2" "" ||
    verdict "import refuses $label by name, exit 2" "exit $rc: $(cat "$dir/bad.err")"
done

finish
