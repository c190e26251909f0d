#!/usr/bin/env bash
# fgpipe plan: from a run's summary.json (--costs) it rebuilds that run's timetable exactly
# (the same ops at the same planned times as the run's trace.json, the same step), for fg+bp's
# auto timetable, the one fg+bp chose with c alone, and for bp-zb; without one it plans every schedule for more stages than this
# machine has cores; bad costs files are refused with a message naming the problem.
# usage: plan.sh FGPIPE CONFIG
. "$(dirname "$0")/lib.sh" "$@"
model=784-256-256-256-10
sets=(--set model=$model --set stages=2 --set micro_batches=4)

# run_and_plan NAME SETS...: a 10-step run on 2 stages, then fgpipe plan --costs of its summary.
run_and_plan() {
  local name=$1; shift
  local extra=() kv
  for kv in "$@"; do extra+=(--set "$kv"); done
  timeout 120 mpirun -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train \
    --config "$config" "${sets[@]}" "${extra[@]}" --set steps=10 --no-checkpoint \
    --summary-json "$dir/$name.json" --trace "$dir/$name.trace.json" >"$dir/$name.log" 2>&1 &&
    "$fgpipe" plan --config "$config" "${sets[@]}" "${extra[@]}" --costs "$dir/$name.json" \
      --json "$dir/$name.plan.json" >"$dir/$name.plan.txt" 2>&1
}

# same_timetable NAME SCHEDULE: the plan's SCHEDULE entry is the run's planned timeline.
same_timetable() {
  py_check "$dir/$1.plan.json" "$dir/$1.trace.json" "$2" <<'PY'
import json, sys
plan, trace, name = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
s = [x for x in plan["schedules"] if x["schedule"] == name][0]
events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["pid"] == 0]
T = s["step_seconds"]
def of_plan(o):
    kind, stage, mb, lag, phase, start, end = o
    return ("U" if kind == "U" else f"{kind}{mb}" + "'" * lag, stage, phase, (start + phase * T) * 1e6, (end - start) * 1e6)
planned = sorted(of_plan(o) for o in s["ops"])
ran = sorted((e["name"], e["tid"], e["args"]["phase"], e["ts"], e["dur"]) for e in events)
problems = []
if trace["otherData"]["mode"] not in (name, name.split("-")[0], s["timetable"]):
    problems.append(f"the trace is of {trace['otherData']['mode']}")
if len(planned) != len(ran):
    problems.append(f"{len(planned)} ops planned, the run's timetable has {len(ran)}")
for a, b in zip(planned, ran):
    if a[:3] != b[:3] or abs(a[3] - b[3]) > 0.002 or abs(a[4] - b[4]) > 0.002:
        problems.append(f"op {a} is {b} in the run's timetable")
        break
makespan = max(e["ts"] + e["dur"] for e in events if e["args"]["phase"] == 0) * 1e-6
if abs(makespan - T) > 1e-8 * max(T, 1e-6) + 2e-9:
    problems.append(f"step {T} s, the run's {makespan} s")
print("; ".join(problems))
PY
}

run_and_plan fgbp mode=fg+bp perturb=weight shrink=0.5
verdict "fg+bp (auto) on 2 stages: plan --costs rebuilds the run's timetable" "$(same_timetable fgbp fg+bp)"
run_and_plan fgbp0 mode=fg+bp perturb=activity estimator=mix shrink=0
verdict "fg+bp with c alone: plan --costs rebuilds the timetable the run chose" "$(same_timetable fgbp0 fg+bp)"
ran=$(grep -o 'timetable chosen by c alone: .*' "$dir/fgbp0.log" | sed 's/.*: //')
planned=$(grep -o '(c alone: .*)' "$dir/fgbp0.plan.txt" | sed 's/.*: //; s/)$//')
verdict "fg+bp with c alone: the run and its plan name the same choice" \
  "$([ -n "$ran" ] && [ "$ran" = "$planned" ] || echo "run chose '$ran', plan '$planned'")"
run_and_plan zb mode=bp schedule=zb
verdict "bp-zb on 2 stages: plan --costs rebuilds the run's timetable" "$(same_timetable zb bp-zb)"
grep -qF "fg+bp op costs (as planned in $dir/fgbp.json)" "$dir/fgbp.plan.txt" &&
  grep -q "bp op costs (timed here" "$dir/fgbp.plan.txt"
verdict "the plan says where each mode's costs come from" "$([ $? -eq 0 ] || echo "$(head -n 12 "$dir/fgbp.plan.txt")")"

"$fgpipe" plan --config "$config" "${sets[@]}" --set mode=bp --set schedule=zb --costs "$dir/zb.json" \
  --measured --json "$dir/zb.measured.json" >"$dir/zb.measured.txt" 2>&1
rc=$?
verdict "plan --costs --measured: bp-zb timed with the run's op times" "$(py_check "$dir/zb.measured.json" "$dir/zb.json" "$rc" <<'PY'
import json, sys
if sys.argv[3] != "0": print(f"exit {sys.argv[3]}"); sys.exit()
plan, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
bp = [c for c in plan["cost_sets"] if c["mode"] == "bp"][0]
m = run["op_costs"]["measured"]
problems = []
if not bp["source"].startswith("as its ops ran in"): problems.append(f"source {bp['source']}")
if bp["f"] != m["f"] or bp["bi"] != m["bi"]: problems.append("not the summary's measured costs")
if not all(x > 0 for x in m["f"] + m["bi"] + m["bw"]): problems.append(f"measured costs {m}")
print("; ".join(problems))
PY
)"

# 8 stages on this machine: every schedule planned, zb's step no longer than 1f1b's, bp's schedules
# backpropagate every micro-batch on every stage.
"$fgpipe" plan --config "$config" --set model=784-128-128-128-128-128-128-128-128-10 --set stages=8 \
  --set micro_batches=16 --json "$dir/m8.json" >"$dir/m8.txt" 2>&1
rc=$?
verdict "plan of 8 stages: the five schedules" "$(py_check "$dir/m8.json" "$rc" <<'PY'
import json, sys
if sys.argv[2] != "0": print(f"exit {sys.argv[2]}"); sys.exit()
plan = json.load(open(sys.argv[1]))
by = {s["schedule"]: s for s in plan["schedules"]}
problems = []
if sorted(by) != sorted(["bp-gpipe", "bp-1f1b", "bp-zb", "fg", "fg+bp"]): problems.append(f"schedules {sorted(by)}")
elif by["bp-zb"]["step_seconds"] > by["bp-1f1b"]["step_seconds"] * (1 + 1e-12): problems.append(f"zb's step {by['bp-zb']['step_seconds']} longer than 1f1b's {by['bp-1f1b']['step_seconds']}")
for name in ("bp-gpipe", "bp-1f1b", "bp-zb"):
    if name in by and by[name]["b_ops"] != [16] * 8: problems.append(f"{name} B ops {by[name]['b_ops']}")
if plan["stages"] != 8 or any(len(s["sent_bytes"]) != 8 for s in plan["schedules"]): problems.append("not 8 stages")
print("; ".join(problems))
PY
)"

# Bad costs files.
refused() {  # refused LABEL NEEDLE ARGS...: exit 2 and NEEDLE on stderr
  local label=$1 needle=$2; shift 2
  "$fgpipe" plan --config "$config" "${sets[@]}" "$@" >"$dir/refused.out" 2>&1
  local rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$needle" "$dir/refused.out"; then
    verdict "$label" "exit $rc: $(tail -n 1 "$dir/refused.out")"
  else verdict "$label" ""; fi
}
refused "a missing costs file is refused" "No such file" --costs "$dir/none.json"
echo '{"mode": "bp", "stages": 2}' >"$dir/old.json"
# plan --batches: against the micro-batch, memory grows and the bandwidth needed falls; each
# mode names its choice; a slow disk makes bp flash-bound at every size within the budget
# (mem_runtime=0: the stages' own bytes, not the process's measured runtime besides).
mkdir -p "$dir/flash"
"$fgpipe" plan --config "$config" --set model=784-256-256-256-10 --set stages=2 --set mem_runtime=0 --batches \
  --mem-budget 8M --weights-dir "$dir/flash" >"$dir/batches.txt" 2>&1
rc=$?
"$fgpipe" plan --config "$config" --set model=784-256-256-256-10 --set stages=2 --set mem_runtime=0 --batches \
  --mem-budget 8M --weights-dir "$dir/flash" --disk-bw 0.001 >"$dir/slow.txt" 2>&1
verdict "plan --batches: memory up and bandwidth down with the batch, one choice per mode" "$(py_check "$dir/batches.txt" "$rc" "$dir/slow.txt" <<'PY'
import sys
if sys.argv[2] != "0": print(f"exit {sys.argv[2]}: {open(sys.argv[1]).read()[-300:]}"); sys.exit()
text = open(sys.argv[1]).read().splitlines()
rows = {}
for line in text:
    f = line.split()
    if len(f) >= 10 and f[0] in ("bp-zb", "fg", "fg+bp") and f[1].isdigit():
        rows.setdefault(f[0], []).append((int(f[1]), float(f[3]), float(f[7])))
problems = [] if sorted(rows) == ["bp-zb", "fg", "fg+bp"] else [f"modes {sorted(rows)}"]
for mode, r in rows.items():
    if any(b[1] < a[1] or b[2] > a[2] for a, b in zip(r, r[1:])): problems.append(f"{mode}: {r}")
if sum("-> micro_batch" in l or "-> none fits" in l for l in text) != 3: problems.append("not 3 choices")
slow = open(sys.argv[3]).read()
if "bp-zb" not in slow or "flash-bound at every size that fits" not in slow: problems.append("slow disk: no flash-bound choice")
print("; ".join(problems))
PY
)"
# A budget no micro-batch fits: each mode names what micro_batch 1 needs.
"$fgpipe" plan --config "$config" --set model=784-256-256-256-10 --set stages=2 --set mem_runtime=0 --batches \
  --mem-budget 64K --weights-dir "$dir/flash" --disk-bw 1 >"$dir/tiny.txt" 2>&1
n=$(grep -c -- "-> none fits mem_budget: micro_batch 1 needs [0-9.]* GB per stage" "$dir/tiny.txt")
verdict "plan --batches under a budget nothing fits: each of the 3 modes names micro_batch 1's need" \
  "$([ "$n" -eq 3 ] || echo "$n of 3 modes: $(grep -m1 -E 'none|error' "$dir/tiny.txt")")"
# The runtime a run counts against mem_budget (mem_runtime; here set, 64 MiB): plan names it and
# counts it in --batches' memory, every row 0.067 GB more than with mem_runtime = 0.
"$fgpipe" plan --config "$config" --set model=784-256-256-256-10 --set stages=2 --set mem_runtime=67108864 \
  --batches --mem-budget 64K --weights-dir "$dir/flash" --disk-bw 1 >"$dir/runtime.txt" 2>&1
verdict "plan counts mem_runtime: named, and 64 MiB more in --batches' memory" "$(py_check "$dir/tiny.txt" "$dir/runtime.txt" <<'PY'
import sys
def rows(path):
    text = open(path).read()
    out = {(f[0], f[1]): float(f[3]) for f in (l.split() for l in text.splitlines())
           if len(f) >= 10 and f[0] in ("bp-zb", "fg", "fg+bp") and f[1].isdigit()}
    return text, out
_, base = rows(sys.argv[1])
text, more = rows(sys.argv[2])
problems = [] if "runtime 64.0 MiB per stage's process" in text else ["no runtime line"]
if not base or sorted(base) != sorted(more): problems.append(f"rows {len(base)} and {len(more)}")
bad = [k for k in base if k in more and abs(more[k] - base[k] - 0.067) > 0.0015]
if bad: problems.append(f"memory not 0.067 GB more: {bad[:3]}")
print("; ".join(problems))
PY
)"

# plan --batches with R replicas on one node sharing one store, at a fixed disk: the bytes moved
# per step (so the I/O time) are the same for R = 1, 2 and 4; the node's tokens/s at a
# micro-batch flash-bound for every R are R times R = 1's; the micro-batch from which the step is
# compute-bound is where one replica's compute meets that unchanged I/O, so it falls as that
# compute grows with R: fg's U regenerates the tangents of all R x N micro-batches (checked on
# its timed cost: comparing crossovers of separately timed runs would test this machine's noise);
# a store per replica would move R times the bytes and turn compute-bound at R times the batch.
for R in 1 2 4; do
  "$fgpipe" plan --config "$config" --set model=784-256-256-256-10 --set stages=2 --set mem_runtime=0 --set replicas=$R \
    --batches --mem-budget 8M --weights-dir "$dir/flash" --disk-bw 0.1 >"$dir/r$R.txt" 2>&1 ||
    echo "exit $?" >>"$dir/r$R.txt"
done
verdict "plan --batches with R = 1, 2, 4 on one node: same bytes, R x tokens/s flash-bound, crossover at compute = I/O" "$(py_check "$dir/r1.txt" "$dir/r2.txt" "$dir/r4.txt" <<'PY'
import re, sys
modes = ("bp-zb", "fg", "fg+bp")
def parse(path, R):
    text = open(path).read()
    if "exit " in text.splitlines()[-1]: raise SystemExit(print(f"R = {R}: {text[-300:]}"))
    rows = {}
    for f in (l.split() for l in text.splitlines()):
        if len(f) >= 10 and f[0] in modes and f[1].isdigit():
            rows[f[0], int(f[1])] = (float(f[4]), float(f[5]), float(f[6]), float(f[8]), f[9].rstrip(","))
    node = re.findall(r"R = (\d+) replicas?, one store on the node: compute-bound from micro_batch (\d+)", text)
    each = re.findall(r"a store per replica would move ([\d.]+) GB per step: compute-bound from micro_batch (\d+)", text)
    fg_u = re.search(r"^fg op costs.*\n(?:.*\n)*?  U +([\d.]+) ([\d.]+)", text, re.M)
    return rows, [(int(r), int(b)) for r, b in node], [(float(g), int(b)) for g, b in each], fg_u
runs = {R: parse(sys.argv[i + 1], R) for i, R in enumerate((1, 2, 4))}
problems = []
rows1, _, _, u1 = runs[1]
for R, (rows, node, each, u) in runs.items():
    if [r for r, _ in node] != [R] * 3: problems.append(f"R = {R}: node lines {node}"); continue
    if len(each) != (3 if R > 1 else 0): problems.append(f"R = {R}: store-per-replica lines {each}"); continue
    moved = [f"{k}: {rows[k][0]} GB, R = 1 {rows1[k][0]}" for k in sorted(rows1.keys() & rows.keys()) if rows[k][0] != rows1[k][0]]
    if moved: problems.append(f"R = {R} moves more per step: {moved[0]} (and {len(moved) - 1} more)")
    if R == 4 and not (u and u1 and float(u.group(1)) > 2 * float(u1.group(1))):
        problems.append(f"fg's U at R = 4 ({u and u.group(1)} ms) not over twice R = 1's ({u1 and u1.group(1)} ms)")
    for i, mode in enumerate(modes):
        flash = [b for (m, b) in rows1 if m == mode and all(runs[r][0].get((m, b), "flash")[4] == "flash" for r in runs)]
        if not flash: problems.append(f"{mode}: no micro-batch flash-bound at every R"); continue
        b = max(flash)
        ratio = rows[mode, b][3] / rows1[mode, b][3]
        if abs(ratio - R) > 0.02 * R: problems.append(f"{mode} at micro_batch {b}: R = {R} gives {ratio:.3f} x R = 1's tokens/s")
        # The crossover: one replica's compute (the step scales linearly with the batch) equals
        # the I/O, the printed step at the largest row giving the compute per sample.
        crossover = node[i][1]
        top = max(b for (m, b) in rows if m == mode)
        step, io = rows[mode, top][1], rows[mode, top][2]
        if abs(crossover * step / top - io) > 0.04 * io:
            problems.append(f"{mode}, R = {R}: compute-bound from {crossover}, where compute is {crossover * step / top:.4f} s and the I/O {io} s")
        if R > 1:
            moved_each, each_crossover = each[i]
            if abs(moved_each - R * rows[mode, 1][0]) > 0.002 * R: problems.append(f"{mode}: a store each moves {moved_each} GB, one store {rows[mode, 1][0]}")
            if not R * (crossover - 1) < each_crossover <= R * crossover + 1:
                problems.append(f"{mode}: a store each is compute-bound from {each_crossover}, one store from {crossover}, R = {R}")
print("; ".join(problems))
PY
)"
refused "plan --batches without mem_budget is refused" "plan --batches needs mem_budget" --batches

refused "a summary without op_costs is refused" "no \"op_costs\"" --costs "$dir/old.json"
refused "costs of another stage count are refused" "the run had stages = 2, the config 4" \
  --costs "$dir/fgbp.json" --set stages=4
refused "an unknown argument is refused" "unknown or incomplete argument '--cost'" --cost x
finish
