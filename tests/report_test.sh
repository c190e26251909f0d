#!/usr/bin/env bash
# tools/fgpipe-report: plots and summary.md from two logs (fg+bp and fg) and a trace; bad inputs
# exit 2 with a message naming the file. With an fgpipe that has --log the logs come from two
# short real training runs; otherwise from a synthetic log of the same schema (docs/log.md).
# usage: report_test.sh FGPIPE CONFIG
. "$(dirname "$0")/lib.sh" "$@"
here=$(cd "$(dirname "$0")" && pwd)
report=$here/../tools/fgpipe-report
py=/usr/bin/python3  # Debian's, with h5py (the python3 first on PATH may lack it)
export MPLCONFIGDIR=$dir/mpl  # matplotlib's cache: no writable HOME needed

# Two logs (fg+bp, fg) and a trace of the fg+bp run.
if "$fgpipe" train --help 2>&1 | grep -q -- --log; then
  echo "# real runs: $fgpipe train --log"
  train() {  # train NAME MODE EXTRA...
    local name=$1 mode=$2; shift 2
    mpirun -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train --config "$config" \
      --set model=784-64-32-16-10 --set steps=30 --set stages=2 --set mode="$mode" --set select=2 \
      --set optimizer=sgd --set lr=0.0001 --log "$dir/$name.h5" "$@" >"$dir/$name.log" 2>&1
  }
  train run fg+bp --set perturb=weight --trace "$dir/trace.json"; rc=$?  # cv: variance_reduction
  verdict "fg+bp training with --log and --trace" "$([ "$rc" -eq 0 ] || tail -n 3 "$dir/run.log")"
  train fg fg; rc=$?
  verdict "fg training with --log" "$([ "$rc" -eq 0 ] || tail -n 3 "$dir/fg.log")"
else
  echo "# $fgpipe has no --log: synthetic logs"
  out=$("$py" - "$dir" <<'PY' 2>&1
import sys, json, numpy as np, h5py
d = sys.argv[1]
rng = np.random.default_rng(1)

def log(path, mode, estimator, n=200, M=2, N=4, K=1):
    with h5py.File(path, "w") as f:
        f.attrs["schema_version"] = np.int64(1)
        for k, v in (("mode", mode), ("estimator", estimator), ("config", f"mode = {mode}\n")):
            f.attrs[k] = np.bytes_(v)  # fixed-length strings, as the C writer's
        for k, v in (("stages", M), ("micro_batches", N), ("tangents", K)):
            f.attrs[k] = np.int64(v)
        has_c = mode == "fg+bp"
        step = np.arange(n)
        nan = np.full(n, np.nan)
        cols = {
            "loss": 2.4 * np.exp(-step / 150) + 0.5 + 0.1 * rng.standard_normal(n),
            "lr": np.minimum(1, (step + 1) / 20) * 1e-4,
            "estimate_norm": 500 + 100 * rng.random(n),
            "exact_norm": 8 + rng.random(n) if has_c else nan,
            "cos_estimate_exact": 0.02 + 0.01 * rng.standard_normal(n) if has_c else nan,
            "cos_fg_exact": 0.005 + 0.003 * rng.standard_normal(n) if has_c else nan,
            "variance_reduction": np.exp(0.8 * rng.standard_normal(n)) if has_c else nan,
            "step_seconds": 0.004 + 0.001 * rng.random(n),
            "makespan": 0.004 + 0.001 * rng.random(n),
            "bubble": 0.25 + 0.05 * rng.random(n),
            "bubble_used_by_b": 0.05 + 0.02 * rng.random(n) if has_c else np.zeros(n),
        }
        g = f.create_group("steps")
        g.create_dataset("step", data=step.astype(np.int64), maxshape=(None,), chunks=(256,))
        for k, v in cols.items():
            g.create_dataset(k, data=v, maxshape=(None,), chunks=(256,))
        f.create_dataset("stages/busy_seconds", data=rng.random((n, M, 3)) * 1e-3,
                         maxshape=(None, M, 3), chunks=(64, M, 3))

log(f"{d}/run.h5", "fg+bp", "cv")
log(f"{d}/fg.h5", "fg", "fg")
ev = [{"name": "process_name", "ph": "M", "pid": p, "args": {"name": n}}
      for p, n in ((0, "planned"), (1, "measured"))]
for pid in (0, 1):
    for s in range(2):
        ev.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": s, "args": {"name": f"stage {s}"}})
        t = 300.0 * s
        for b in range(4):
            ev.append({"name": f"F{b}", "ph": "X", "pid": pid, "tid": s, "ts": t, "dur": 300.0})
            t += 300.0
        for b in range(2):  # as fg+bp writes them: Bi and Bw of micro-batch b at lag 1 and 2
            for name in (f"Bi{b}'", f"Bw{b}''"):
                ev.append({"name": name, "ph": "X", "pid": pid, "tid": s, "ts": t, "dur": 75.0})
                t += 75.0
        ev.append({"name": "U", "ph": "X", "pid": pid, "tid": s, "ts": 2000.0, "dur": 100.0 * pid})
with open(f"{d}/trace.json", "w") as fh:
    json.dump({"traceEvents": ev, "otherData": {"mode": "fg+bp", "stages": 2, "microbatches": 4,
                                                "n_sel": 2, "lag": 0}}, fh)
PY
)
  verdict "synthetic logs and trace written" "$([ -f "$dir/run.h5" ] && [ -f "$dir/fg.h5" ] || echo "$out")"
fi

# The report on both.
"$report" "$dir/run.h5" "$dir/fg.h5" --out "$dir/report" --trace "$dir/trace.json" >"$dir/report.log" 2>&1
rc=$?
verdict "fgpipe-report on two logs with --trace exits 0" "$([ "$rc" -eq 0 ] || echo "exit $rc: $(tail -n 3 "$dir/report.log")")"
for png in loss cosine variance_reduction bubble timeline; do
  f=$dir/report/$png.png
  why=
  if [ ! -f "$f" ]; then why="missing"
  elif [ "$(stat -c %s "$f")" -le 5120 ]; then why="only $(stat -c %s "$f") bytes"
  elif [ "$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')" != "89504e470d0a1a0a" ]; then why="not a PNG"
  fi
  verdict "$png.png is a PNG of more than 5 KB" "$why"
done
summary=$dir/report/summary.md
# the first table's rows: its lines starting with '|', minus the header and the separator
rows=$(awk '/^\|/ {t = 1; print; next} t {exit}' "$summary" 2>/dev/null | tail -n +3)
modes=$(printf '%s\n' "$rows" | awk -F' *\\| *' 'NF > 2 {print $3}' | paste -sd, -)
verdict "summary.md has one row per run with its mode (fg+bp, fg)" \
  "$([ "$(printf '%s\n' "$rows" | grep -c '^|')" -eq 2 ] && [ "$modes" = "fg+bp,fg" ] || echo "rows: $(printf '%s' "$rows" | tr '\n' ' ')")"
verdict "the timeline draws the split backward (summary: ops F, Bi, Bw, U)" \
  "$(grep -q 'timeline.png.*(ops F, Bi, Bw, U)' "$summary" || grep -m1 'timeline.png' "$summary")"
verdict "summary.md lists the plots" \
  "$(for p in loss cosine variance_reduction bubble timeline; do grep -q "($p.png)" "$summary" || echo -n "$p.png "; done)"
ops=$(sed -n '/^## Ops of the traced step/,/^## /p' "$summary" 2>/dev/null)
verdict "summary.md tabulates the traced step's ops, planned against measured (stage 0 F, U)" \
  "$(for k in F U; do printf '%s\n' "$ops" | grep -Eq "^\| 0 \| $k \| [1-9][0-9]* \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$" || echo -n "no stage 0 $k row "; done)"
verdict "summary.md notes that the fg run has no exact gradient" \
  "$(grep -q 'cosine.png skips runs without an exact gradient' "$summary" || echo 'no note')"

# --labels name the runs; without --trace there is no timeline.
"$report" "$dir/run.h5" "$dir/fg.h5" --out "$dir/labelled" --labels "with c,plain" >"$dir/labelled.log" 2>&1
rc=$?
verdict "--labels label the rows; no --trace, no timeline.png" \
  "$([ "$rc" -eq 0 ] && grep -q '^| with c | fg+bp |' "$dir/labelled/summary.md" && grep -q '^| plain | fg |' "$dir/labelled/summary.md" \
     && [ ! -e "$dir/labelled/timeline.png" ] || echo "exit $rc: $(tail -n 2 "$dir/labelled.log")")"

# --curves: two runs, one measured and projected, one projected only: 3 lines against seconds
# (the projected one dashed), 2 against samples; a PNG that is one.
printf '# mode=bp-zb stages=2 time=measured\nstep,samples,seconds,accuracy\n46,6016,3.5,0.80\n93,12032,7.1,0.84\n' >"$dir/zb.measured.csv"
printf '# mode=bp-zb stages=2 time=projected\nstep,samples,seconds,accuracy\n46,6016,3.2,0.80\n93,12032,6.4,0.84\n' >"$dir/zb.projected.csv"
printf '# mode=fg+bp stages=2 time=projected\nstep,samples,seconds,accuracy\n46,6016,4.0,0.75\n93,12032,8.0,0.79\n' >"$dir/fgbp.projected.csv"
"$report" --curves "$dir/zb.measured.csv" "$dir/zb.projected.csv" "$dir/fgbp.projected.csv" \
  --out "$dir/curves" >"$dir/curves.log" 2>&1
rc=$?
verdict "--curves: time_to_accuracy.png with 3 lines against seconds, 2 against samples" \
  "$([ "$rc" -eq 0 ] && grep -q "3 lines against seconds, 2 against samples" "$dir/curves.log" \
     && [ "$(head -c 4 "$dir/curves/time_to_accuracy.png" | tail -c 3)" = PNG ] \
     && [ "$(stat -c %s "$dir/curves/time_to_accuracy.png")" -gt 10000 ] \
     || echo "exit $rc: $(tail -n 2 "$dir/curves.log")")"
echo "step,seconds" >"$dir/nocurve.csv"
"$report" --curves "$dir/nocurve.csv" --out "$dir/curves" >"$dir/curves.log" 2>&1
rc=$?
verdict "--curves: a file that is not a curve is refused, named" \
  "$([ "$rc" -eq 2 ] && grep -qF "$dir/nocurve.csv: not a curve file" "$dir/curves.log" || echo "exit $rc: $(tail -n 1 "$dir/curves.log")")"

# Bad input: exit 2 and a message naming the file.
refuse() {  # refuse LABEL FILE NEEDLE ARGS...
  local label=$1 file=$2 needle=$3; shift 3
  "$report" "$@" --out "$dir/bad" >"$dir/bad.log" 2>&1
  local rc=$?
  verdict "$label: exit 2, message names $(basename "$file")" \
    "$([ "$rc" -eq 2 ] && grep -qF -- "$file" "$dir/bad.log" && grep -qF -- "$needle" "$dir/bad.log" \
       || echo "exit $rc: $(head -n 2 "$dir/bad.log")")"
}
echo "not a log" >"$dir/text.h5"
refuse "a text file" "$dir/text.h5" "not an HDF5 file" "$dir/text.h5"
refuse "a missing file" "$dir/nothing.h5" "no such file" "$dir/run.h5" "$dir/nothing.h5"
"$py" - "$dir" <<'PY'
import sys, numpy as np, h5py
d = sys.argv[1]
with h5py.File(f"{d}/other.h5", "w") as f:
    f["x"] = np.arange(3)
with h5py.File(f"{d}/v9.h5", "w") as f:
    f.attrs["schema_version"] = np.int64(9)
    f["steps/loss"] = np.ones(3)
PY
refuse "an HDF5 file that is not a log" "$dir/other.h5" "not a fgpipe log" "$dir/other.h5"
refuse "an unknown schema_version" "$dir/v9.h5" "unknown schema_version 9" "$dir/v9.h5"
refuse "a trace that is not JSON" "$dir/text.h5" "--trace" "$dir/run.h5" --trace "$dir/text.h5"

finish
