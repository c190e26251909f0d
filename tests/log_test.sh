#!/usr/bin/env bash
# The per-step HDF5 log: one row per step, values equal to the progress (loss.csv), readable
# with h5py and h5dump, and kept up to its last flush when the job is killed.
# usage: log_test.sh FGPIPE CONFIG
. "$(dirname "$0")/lib.sh" "$@"
run=(mpirun -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$fgpipe" train --config "$config"
     --set model=784-64-32-16-10 --set warmup_steps=0 --set stages=2 --set mode=fg+bp --set perturb=weight --set select=2
     --set optimizer=sgd --set lr=0.0001 --set print_every=1000000)

"${run[@]}" --set steps=37 --out "$dir/a" --log "$dir/a.h5" >"$dir/a.log" 2>&1
verdict "a 37-step run with --log succeeds" "$([ $? -eq 0 ] || tail -n 3 "$dir/a.log")"
check=$(py_check "$dir/a.h5" "$dir/a/loss.csv" <<'PY'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
csv = np.genfromtxt(sys.argv[2], delimiter=",", names=True)
s = f["steps"]
problems = []
if len(s["loss"]) != 37: problems.append(f"{len(s['loss'])} rows")
if not np.array_equal(s["step"][:], np.arange(37)): problems.append("step column")
if not np.allclose(s["loss"][:], csv["loss"], rtol=0, atol=5e-7): problems.append("loss differs from loss.csv")
if not np.allclose(s["lr"][:], csv["lr"], rtol=1e-5): problems.append("lr differs")
if not (np.isfinite(s["cos_estimate_exact"][:]).all() and (np.abs(s["cos_estimate_exact"][:]) <= 1).all()):
    problems.append("cos_estimate_exact not a cosine")
if f["stages/busy_seconds"].shape != (37, 2, 3): problems.append(f"busy_seconds {f['stages/busy_seconds'].shape}")
if f.attrs["schema_version"] != 1: problems.append("schema_version")
# The plan per stage: select=2 at lag 0 backpropagates micro-batches 0 and 1 on both stages.
st = f["stages"]
lay = list(st["layout"][:])  # 7 layers; stage 1 starts at a linear layer (an even index)
if len(lay) != 3 or lay[0] != 0 or lay[2] != 7 or lay[1] % 2: problems.append(f"layout {lay}")
if list(st["n_corr"][:]) != [2, 2] or list(st["lag"][:]) != [0, 0]: problems.append(f"n_corr {st['n_corr'][:]} lag {st['lag'][:]}")
if not (st["work_ms"][:] > 0).all(): problems.append(f"work_ms {st['work_ms'][:]}")
if f.attrs["layout_by"] not in (b"measured work", b"parameters"): problems.append(f"layout_by {f.attrs['layout_by']}")
if not 0.999 < f.attrs["makespan_vs_fg"] < 2: problems.append(f"makespan_vs_fg {f.attrs['makespan_vs_fg']}")
planned, used = st["bubble_used_by_b_planned"][:], st["bubble_used_by_b"][:]
if planned.shape != (2,) or not ((planned > 0) & (planned <= 1)).all(): problems.append(f"planned bubble use {planned}")
if used.shape != (37, 2) or not ((used >= 0) & (used <= 1)).all(): problems.append(f"measured bubble use {used.shape}")
print("; ".join(problems))
PY
)
verdict "log rows match the progress (loss.csv) step by step" "$check"
verdict "h5dump reads it" "$(h5dump -H "$dir/a.h5" >/dev/null 2>&1 || echo 'h5dump failed')"

# Killed mid-run: the log keeps the rows up to its last flush (every 10 steps).
"${run[@]}" --set steps=1000000 --out "$dir/b" --log "$dir/b.h5" >"$dir/b.log" 2>&1 &
pid=$!
for _ in $(seq 400); do
  [ -f "$dir/b/loss.csv" ] && [ "$(wc -l <"$dir/b/loss.csv")" -gt 40 ] && break
  sleep 0.05
done
pkill -KILL -f -- "--out $dir/b( |$)"; wait "$pid" 2>/dev/null  # mpirun and its ranks
for _ in $(seq 100); do pgrep -f -- "--out $dir/b( |$)" >/dev/null || break; sleep 0.05; done
rows=$(/usr/bin/python3 -c "import h5py,sys; print(len(h5py.File(sys.argv[1],'r')['steps/loss']))" "$dir/b.h5" 2>&1)
verdict "a killed run's log is readable with its flushed rows ($rows)" "$([[ "$rows" =~ ^[0-9]+$ ]] && [ "$rows" -ge 30 ] || echo "$rows")"

finish
