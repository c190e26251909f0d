#!/usr/bin/env bash
# tools/fgpipe-convert for Llama and Qwen3, checked against PyTorch: a random-weight model of each
# family in Hugging Face's layout (tests/llama_reference.py: config.json, two shards and their
# index, tensors stored as BF16, F16 and F32 in turn; Llama with GQA and llama3 rope scaling and
# an untied head, Qwen3 with q/k norms and a tied head) imports, `fgpipe eval` gives the float64
# reference's loss within 1e-5 relative and logits within 1e-4, export gives Hugging Face's
# tensors back (F32 exactly, BF16 bit for bit where they were BF16) and a config.json that
# imports again to the same checkpoint, the import fine-tunes on 2 stages, and bad directories
# are refused by name with exit 2 and nothing written. Needs python3-torch: without it the test
# fails.
#
# usage: llama_convert.sh FGPIPE CONFIG   (CONFIG: any config in launch/configs/, for the root)
. "$(dirname "$0")/lib.sh" "$@"
root=$(dirname "$config")/../..
convert=$root/tools/fgpipe-convert
T=16 V=300 windows=4

if ! /usr/bin/python3 -c 'import torch' 2>"$dir/torch.err"; then
  verdict "PyTorch for the reference (apt-get install python3-torch)" "$(tail -n 1 "$dir/torch.err")"
  finish
fi

# A safetensors reader for the checks (not the converter's: the test should not trust it).
cat >"$dir/st.py" <<'PY'
import glob, json, struct, numpy as np
def read(folder, raw=False):  # {name: float32 array} (raw: (dtype, bytes)) over a folder's files
    out = {}
    for path in sorted(glob.glob(folder + "/*.safetensors")):
        blob = open(path, "rb").read()
        (n,) = struct.unpack("<Q", blob[:8])
        for k, v in json.loads(blob[8:8 + n]).items():
            if k == "__metadata__":
                continue
            b, e = v["data_offsets"]
            data = blob[8 + n + b:8 + n + e]
            if raw:
                out[k] = (v["dtype"], data)
            elif v["dtype"] == "BF16":
                out[k] = (np.frombuffer(data, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(v["shape"])
            else:
                out[k] = np.frombuffer(data, {"F32": "<f4", "F16": "<f2"}[v["dtype"]]).astype(np.float32).reshape(v["shape"])
    return out
PY
export PYTHONPATH=$dir

check_eval() {  # check_eval DIR: "measured: ..." or the problems
  py_check "$1/eval.json" "$1/eval_logits.bin" "$1/reference.json" "$1/logits.bin" $V $T <<'PY'
import sys, json, numpy as np
got, ref = json.load(open(sys.argv[1])), json.load(open(sys.argv[3]))
V, T = int(sys.argv[5]), int(sys.argv[6])
bad = []
rel = abs(got["loss"] - ref["loss"]) / ref["loss"]
if not rel < 1e-5:
    bad.append(f"loss {got['loss']:.7f}, PyTorch's {ref['loss']:.7f} (relative {rel:.2g})")
if got.get("windows") != ref["windows"]:
    bad.append(f"{got.get('windows')} windows, not {ref['windows']}")
a = np.fromfile(sys.argv[2], "<f4")
diff = np.abs(a - np.fromfile(sys.argv[4], "<f4")).max() if a.size == T * V else float("inf")
if not diff < 1e-4:
    bad.append(f"logits: {a.size} floats, max |diff| {diff:.3g}")
print("; ".join(bad) if bad else f"measured: loss {got['loss']:.7f} vs {ref['loss']:.7f}, relative {rel:.2g}; logits max |diff| {diff:.2g}")
PY
}

for family in llama qwen3; do
  d=$dir/$family
  if ! /usr/bin/python3 "$root/tests/llama_reference.py" "$d" --family $family --ctx $T --vocab $V \
       --windows $windows 2>"$dir/ref.err"; then
    verdict "$family: the PyTorch reference runs" "$(tail -n 1 "$dir/ref.err")"
    continue
  fi
  "$convert" import "$d/hf" "$d/m.h5" --ctx $T 2>"$dir/conv.err"
  verdict "$family: the Hugging Face directory (2 shards, BF16/F16/F32) imports" "$(tail -n 1 "$dir/conv.err")"
  timeout 120 "$fgpipe" eval --checkpoint "$d/m.h5" --tokens "$d/tokens.bin" --summary-json "$d/eval.json" \
    --logits "$d/eval_logits.bin" >"$d/eval.log" 2>&1
  out=$(check_eval "$d")
  case $out in
    measured:*) verdict "$family: eval within 1e-5 (loss) and 1e-4 (logits) of PyTorch's float64 (${out#measured: })" "" ;;
    *) verdict "$family: eval within 1e-5 (loss) and 1e-4 (logits) of PyTorch's float64" "$out $(grep -m1 error "$d/eval.log")" ;;
  esac

  # Export: Hugging Face's tensors (F32, exactly) and a config that imports to the same checkpoint.
  "$convert" export "$d/m.h5" "$d/out" 2>"$dir/conv.err" &&
    "$convert" import "$d/out" "$d/again.h5" --ctx $T 2>>"$dir/conv.err"
  verdict "$family: export gives the tensors back, and imports again to the same checkpoint" "$(py_check "$d/hf" "$d/out" "$d/m.h5" "$d/again.h5" <<'PY'
import sys, h5py, numpy as np, st
a, b = st.read(sys.argv[1]), st.read(sys.argv[2])
bad = sorted(set(a) ^ set(b)) + [k for k in a if k in b and not np.array_equal(a[k], b[k])]
f, g = (h5py.File(p, "r") for p in sys.argv[3:5])
names = []
f["params"].visit(lambda n: names.append(n) if isinstance(f["params"][n], h5py.Dataset) else None)
bad += [n for n in names if not np.array_equal(f["params"][n][...], g["params"][n][...])]
bad += [k for k in ("config", "layout", "vocab", "padded_vocab") if not np.array_equal(f.attrs[k], g.attrs[k])]
print(f"{len(bad)} differ: {bad[:3]}" if bad else "")
PY
)"
  "$convert" export "$d/m.h5" "$d/bf16" --dtype bf16 2>"$dir/conv.err"
  verdict "$family: export --dtype bf16: every tensor BF16, the BF16 ones bit for bit" "$(py_check "$d/hf" "$d/bf16" <<'PY'
import sys, json, st
a, b = st.read(sys.argv[1], raw=True), st.read(sys.argv[2], raw=True)
bad = [k for k in b if b[k][0] != "BF16"] + [k for k in a if a[k][0] == "BF16" and a[k] != b.get(k)]
cfg = json.load(open(sys.argv[2] + "/config.json"))
bad += [] if cfg.get("torch_dtype") == "bfloat16" else ["torch_dtype"]
print(f"{len(bad)} wrong: {bad[:3]}" if bad else "")
PY
)"
done

# The imported Llama fine-tunes on 2 stages (--init-from, with the config the import wrote; its
# tokens train and validate).
if [ -f "$dir/llama/m.h5" ]; then
  /usr/bin/python3 -c 'import sys, h5py; print(h5py.File(sys.argv[1], "r").attrs["config"].decode())' \
    "$dir/llama/m.h5" >"$dir/llama.conf"
  timeout 120 mpirun -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
    --config "$dir/llama.conf" --set train_tokens="$dir/llama/tokens.bin" \
    --set val_tokens="$dir/llama/tokens.bin" --set stages=2 --set steps=3 --set micro_batch=1 \
    --set micro_batches=2 --set warmup_steps=0 --set eval_every=0 --init-from "$dir/llama/m.h5" \
    --no-checkpoint >"$dir/ft.log" 2>&1
  grep -q "weights from" "$dir/ft.log" && grep -q "^result: 3 steps" "$dir/ft.log" &&
    verdict "the imported Llama fine-tunes on 2 stages (--init-from)" "" ||
    verdict "the imported Llama fine-tunes on 2 stages (--init-from)" "$(grep -m1 -E 'error' "$dir/ft.log")"
fi

# Bad directories: exit 2, the problem named, no checkpoint written.
bad_cases=(
  "sliding window|use_sliding_window is true|bad_sliding"
  "experts|num_experts 8: mixtures of experts|bad_moe"
  "another architecture|MistralForCausalLM|bad_arch"
  "yarn rope scaling|rope_scaling of type 'yarn'|bad_rope"
  "a bias|model.layers.0.self_attn.q_proj.bias: the family has no biases|bad_bias"
  "a wrong shape|model.layers.1.mlp.up_proj.weight is \[47, 32\], not \[48, 32\]|bad_shape"
  "a missing shard|names shards that are missing: model-00002-of-00002|bad_shard"
  "an index naming a missing tensor|maps model.layers.0.mlp.extra.weight to|bad_index"
  "no config.json|config.json: not a JSON object|llama"
)
for c in "${bad_cases[@]}"; do
  IFS='|' read -r label want folder <<<"$c"
  rm -f "$dir/bad.h5"
  src=$dir/qwen3/$folder
  [ "$folder" = llama ] && src=$dir/llama
  "$convert" import "$src" "$dir/bad.h5" 2>"$dir/bad.err"
  rc=$?
  [ $rc -eq 2 ] && grep -q -- "$want" "$dir/bad.err" && [ ! -e "$dir/bad.h5" ] &&
    verdict "import refuses $label by name, exit 2" "" ||
    verdict "import refuses $label by name, exit 2" "exit $rc: $(cat "$dir/bad.err")"
done

finish
