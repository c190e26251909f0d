#!/usr/bin/env bash
# tools/fgpipe-convert's memory and time on a Llama of a real shape (issue 53; docs/results/convert.md):
# a random-weight Hugging Face directory of CONFIG's shape (config.json, BF16 safetensors shards
# and model.safetensors.index.json, written tensor by tensor in blocks, never whole in memory) is
# imported, then the checkpoint exported (--dtype bf16), each under /usr/bin/time -v: printed for
# each, the peak RSS and the seconds. Then a round trip checked on tensors read from the files
# by byte range: layer 0's q_proj and the last layer's down_proj come back from the export byte
# for byte, and rows of the token table (the first, the last real one and the pad rows) are in
# the checkpoint widened exactly.
#
# usage: bench/bench_convert.sh [CONFIG [SHARDS]]
#   defaults: launch/configs/llama-3.2-1b.conf 3; DIR=/tmp/convert-bench (the directory, the
#   checkpoint and the export: about 4x the BF16 bytes: 10 GB for 1B, 64 GB for 8B, checked
#   against the free space first). CONVERT=path runs another converter (an older commit's:
#   `git archive HEAD~N tools | tar -x -C /tmp/old`, CONVERT=/tmp/old/tools/fgpipe-convert) on
#   the same directory, which is kept between runs (same CONFIG and SHARDS: not rewritten).
#   EXPORT=0 skips the export and the round trip; CLEAN=1 removes DIR's files at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-launch/configs/llama-3.2-1b.conf} shards=${2:-3}
dir=${DIR:-/tmp/convert-bench}
convert=${CONVERT:-tools/fgpipe-convert}
export_too=${EXPORT:-1}
[ -f "$config" ] || { echo "no $config" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (Debian: apt-get install time)" >&2; exit 2; }
name=$(basename "$config" .conf)
hf=$dir/$name-$shards
mkdir -p "$dir"

# The directory: config.json from CONFIG's keys, then the shards.
/usr/bin/python3 - "$config" "$hf" "$shards" "$export_too" <<'PY'
import json, os, shutil, struct, sys
import numpy as np
conf, out, shards, export_too = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
c = {}
for line in open(conf):
    line = line.split("#", 1)[0]
    if "=" in line:
        k, v = (x.strip() for x in line.split("=", 1))
        c[k] = v
L, C, H, KV = (int(c[k]) for k in ("n_layer", "n_embd", "n_head", "n_kv_head"))
d = int(c.get("head_dim", C // H)); I = int(c["intermediate_size"]); V = int(c["vocab"])
tie = c.get("tie_embeddings", "1") == "1"
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
       "hidden_size": C, "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": H,
       "num_key_value_heads": KV, "head_dim": d, "rms_norm_eps": float(c.get("rms_norm_eps", 1e-5)),
       "rope_theta": float(c.get("rope_theta", 10000)), "max_position_embeddings": 131072,
       "vocab_size": V, "tie_word_embeddings": tie, "attention_bias": False, "mlp_bias": False,
       "torch_dtype": "bfloat16", "rope_scaling": None}
if float(c.get("rope_scaling_factor", 0)) > 0:
    cfg["rope_scaling"] = {"rope_type": "llama3", "factor": float(c["rope_scaling_factor"]),
                           "low_freq_factor": float(c["rope_scaling_low_freq_factor"]),
                           "high_freq_factor": float(c["rope_scaling_high_freq_factor"]),
                           "original_max_position_embeddings": int(c["rope_scaling_original_max_position_embeddings"])}
tensors = [("model.embed_tokens.weight", (V, C))]
for i in range(L):
    p = f"model.layers.{i}."
    tensors += [(p + "input_layernorm.weight", (C,)), (p + "self_attn.q_proj.weight", (H * d, C)),
                (p + "self_attn.k_proj.weight", (KV * d, C)), (p + "self_attn.v_proj.weight", (KV * d, C)),
                (p + "self_attn.o_proj.weight", (C, H * d)), (p + "post_attention_layernorm.weight", (C,)),
                (p + "mlp.gate_proj.weight", (I, C)), (p + "mlp.up_proj.weight", (I, C)),
                (p + "mlp.down_proj.weight", (C, I))]
tensors.append(("model.norm.weight", (C,)))
if not tie:
    tensors.append(("lm_head.weight", (V, C)))
nbytes = lambda s: 2 * int(np.prod(s))
total = sum(nbytes(s) for _, s in tensors)
stamp = os.path.join(out, "complete")
if os.path.exists(stamp) and json.load(open(stamp)) == {"config": cfg, "shards": shards}:
    print(f"directory: {out} ({total} bytes of BF16 in {shards} shards, kept from an earlier run)")
    sys.exit(0)
shutil.rmtree(out, ignore_errors=True)
# The room: this directory, the float32 checkpoint and (EXPORT=1) the BF16 export.
need = total + 2 * total + (total if export_too else 0)
free = shutil.disk_usage(os.path.dirname(out)).free
if need > free:
    sys.exit(f"bench_convert: {out} and its conversions need {need} bytes, {free} free: nothing written")
os.makedirs(out)
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
groups, acc = [[]], 0  # tensors in order, a new shard past each 1/shards of the bytes
for t in tensors:
    if acc >= total * len(groups) / shards and len(groups) < shards:
        groups.append([])
    groups[-1].append(t)
    acc += nbytes(t[1])
rng = np.random.default_rng(0)
weight_map = {}
BLOCK = 16 << 20  # BF16 values per write
for k, group in enumerate(groups):
    fname = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for n, s in group:
        header[n] = {"dtype": "BF16", "shape": list(s), "data_offsets": [off, off + nbytes(s)]}
        off += nbytes(s)
        weight_map[n] = fname
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(out, fname), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for n, s in group:
            left = int(np.prod(s))
            while left:
                m = min(left, BLOCK)
                if n.endswith("norm.weight"):
                    bits = np.full(m, 0x3F80, dtype="<u2")  # 1.0
                else:  # sign, 2 exponent bits and the mantissa random: |w| in [2^-11, 2^-7)
                    bits = (rng.integers(0, 1 << 16, m, dtype=np.uint16) & 0x81FF) | 0x3A00
                f.write(bits.astype("<u2").tobytes())
                left -= m
json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
          open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)
json.dump({"config": cfg, "shards": shards}, open(stamp, "w"))
print(f"directory: {out} ({total} bytes of BF16 in {len(groups)} shards, {len(tensors)} tensors)")
PY

# measured LABEL CMD...: runs CMD under /usr/bin/time -v; prints the peak RSS and the seconds.
measured() {
  local label=$1; shift
  if ! /usr/bin/time -v -o "$dir/time.txt" "$@" 2>"$dir/err.txt"; then
    echo "$label: failed: $(tail -n 3 "$dir/err.txt")"; cat "$dir/time.txt" >&2; exit 1
  fi
  awk -v label="$label" -F': ' '
    /Maximum resident set size/ { rss = $2 }
    /Elapsed \(wall clock\)/ { n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i] }
    /User time/ { u = $2 } /System time/ { y = $2 }
    END { printf "%s: peak RSS %.3f GB (%d KiB), %.1f s wall (%.1f s user, %.1f s system)\n", label, rss * 1024 / 1e9, rss, s, u, y }' "$dir/time.txt"
}

h5=$dir/$name.h5 back=$dir/$name-export
rm -rf "$h5" "$back"
echo "converter: $convert; $(du -sb "$hf" | cut -f1) bytes in $hf"
measured "import $name ($shards shards)" "$convert" import "$hf" "$h5"
ls -l "$h5" | awk '{print "checkpoint: " $5 " bytes"}'
if [ "$export_too" = 1 ]; then
  measured "export $name --dtype bf16" "$convert" export "$h5" "$back" --dtype bf16
  /usr/bin/python3 - "$hf" "$back" "$h5" <<'PY'
import json, os, struct, sys
import h5py, numpy as np
hf, back, h5 = sys.argv[1:4]
def locate(folder, name):  # (path, offset, dtype, shape) of a tensor, from the headers only
    idx = f"{folder}/model.safetensors.index.json"
    shard = json.load(open(idx))["weight_map"][name] if os.path.exists(idx) else "model.safetensors"
    path = f"{folder}/{shard}"
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8)); h = json.loads(f.read(n))
    e = h[name]
    return path, 8 + n + e["data_offsets"][0], e["dtype"], e["shape"]
def raw(folder, name, r0=0, r1=None):  # the tensor's rows r0..r1 as uint16 (BF16), read by range
    path, off, dtype, shape = locate(folder, name)
    assert dtype == "BF16", dtype
    inner = int(np.prod(shape[1:]))
    r1 = shape[0] if r1 is None else r1
    return np.fromfile(path, "<u2", count=(r1 - r0) * inner, offset=off + 2 * r0 * inner).reshape(r1 - r0, *shape[1:])
cfg = json.load(open(f"{hf}/config.json"))
L, V = cfg["num_hidden_layers"], cfg["vocab_size"]
bad = []
for name in ("model.layers.0.self_attn.q_proj.weight", f"model.layers.{L - 1}.mlp.down_proj.weight"):
    if not np.array_equal(raw(hf, name), raw(back, name)):
        bad.append(name)
f = h5py.File(h5, "r")
table = f["params/embed_tokens/weight"]
for r0, r1 in ((0, 4), (V - 4, V)):
    want = (raw(hf, "model.embed_tokens.weight", r0, r1).astype(np.uint32) << 16).view(np.float32)
    if not np.array_equal(table[r0:r1], want):
        bad.append(f"embed_tokens rows {r0}..{r1}")
if table.shape[0] > V and np.any(table[V:]):
    bad.append("pad rows not zero")
print("round trip: " + (f"DIFFERS: {', '.join(bad)}" if bad else
      "layer 0 q_proj and the last down_proj byte for byte (source BF16 -> checkpoint -> export), "
      "token table rows widened exactly, pad rows zero"))
sys.exit(1 if bad else 0)
PY
fi
if [ "${CLEAN:-0}" = 1 ]; then rm -rf "$hf" "$h5" "$back" "$dir/time.txt" "$dir/err.txt"; fi
