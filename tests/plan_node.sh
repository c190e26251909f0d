#!/usr/bin/env bash
# fgpipe plan --node: the design's own example (docs/out-of-core.md, "Choosing the batch"), a
# 1-trillion-parameter transformer on 8 A100s of 312 TFLOP/s and 80 GB sharing one store on
# flash of 25 GB/s, ctx 2048, AdamW. The printed curves are checked against a hand computation
# of the same quantities here: the shape in GPT-3's proportions, the step's compute at the peak,
# the bytes moved, the bandwidth needed and the activations per device; where batch 64 stands;
# a node missing a key, or a key that is not a positive number, is refused by name.
# usage: plan_node.sh FGPIPE CONFIG   (CONFIG: launch/configs/gpt2-124m.conf)
. "$(dirname "$0")/lib.sh" "$@"
node=devices=8,tflops=312,memory=80G,flash=25
"$fgpipe" plan --config "$config" --node "$node" --params 1e12 --set ctx=2048 --set optimizer=adam \
  >"$dir/plan.txt" 2>&1
verdict "plan --node exits 0" "$([ $? -eq 0 ] || tail -n 2 "$dir/plan.txt")"
why=$(py_check "$dir/plan.txt" <<'PY'
import math, re, sys
text = open(sys.argv[1]).read()
N, D, F, T = 1e12, 8, 312e12, 2048
C = round((N * 128 / 12) ** (1 / 3) / 128) * 128        # 12 L C^2 = N with C = 128 L
L = round(N / (12 * C * C)); H = C // 128
problems = []
if f"{L} blocks of width {C}, {H} heads, ctx {T}" not in text:
    problems.append(f"shape: expected {L} blocks of width {C}")
rows = {(m, int(b)): [float(x) for x in rest.split()[:5]] for m, b, rest in
        re.findall(r"^(bp|fg) +(\d+) +(.*)$", text, re.M)}
for mode, waves in (("bp", 2), ("fg", 1)):
    b = 64 / D
    compute = 64 * T * (6 * N + 12 * L * C * T) / (D * F)
    # the stepping wave reads and writes params and Adam's two moments (FP32); bp's other
    # (forward) wave reads the params alone
    moved = 2 * N * 3 * 4 + (N * 4 if waves == 2 else 0)
    act = b * T * L * (34 * C + 5 * H * T) * 2 if mode == "bp" else b * T * 2 * 2 * 4 * C * 4
    want = [act / 1e9, compute, moved / 25e9, moved / 1e9, moved / compute / 1e9]
    got = rows.get((mode, 64))
    if not got: problems.append(f"no {mode} row at batch 64"); continue
    for name, w, g in zip(("activations", "step", "I/O", "moved", "need"), want, got):
        if not math.isclose(w, g, rel_tol=1e-3, abs_tol=0.01):
            problems.append(f"{mode} batch 64 {name}: printed {g}, computed {w:.4g}")
for mode in ("bp", "fg"):
    if not re.search(rf"-> batch 64 \(8 a device\): flash-bound", text.split(f"\n{mode} ")[-1]):
        problems.append(f"{mode}: where batch 64 stands is not said (flash-bound at 25 GB/s)")
print("; ".join(problems))
PY
)
verdict "the curves match the hand computation (1T parameters, 8 x 312 TFLOP/s, 25 GB/s)" "$why"
for bad in "devices=8,tflops=312" "devices=8,tflops=312,memory=80G,flash=0" "devices=8,tflops=x,memory=1G,flash=1" "gpus=8"; do
  "$fgpipe" plan --config "$config" --node "$bad" >"$dir/bad.txt" 2>&1
  rc=$?
  verdict "--node $bad refused by name (exit 2)" \
    "$([ $rc -eq 2 ] && grep -q -- "--node" "$dir/bad.txt" || echo "exit $rc: $(tail -n 1 "$dir/bad.txt")")"
done
finish
