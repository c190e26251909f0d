#!/usr/bin/env bash
# Faults a careless or unlucky run meets (issue 19): a diverging run stops with exit 2 and never
# publishes a checkpoint with NaN or Inf; after SIGKILL, loss.csv still holds every step up to
# the last checkpoint, and a resume completes it without gaps.
# usage: robustness.sh FGPIPE CONFIG   (CONFIG: launch/configs/fashion-mnist-mlp.conf)
. "$(dirname "$0")/lib.sh" "$@"
small=(--set model=784-64-10 --set stages=1 --set micro_batch=16 --set micro_batches=2
       --set print_every=1000000 --set eval_every=0)

train() {  # train NAME ARGS...: one rank, output in $dir/NAME/, exit status in $dir/NAME.rc
  local name=$1; shift
  timeout 120 "$fgpipe" train --config "$config" "${small[@]}" "$@" --out "$dir/$name" \
    >"$dir/$name.log" 2>&1
  echo $? >"$dir/$name.rc"
}

expect_exit2() {  # expect_exit2 NAME NEEDLE
  local rc; rc=$(cat "$dir/$1.rc")
  [ "$rc" -eq 2 ] && grep -qF -- "$2" "$dir/$1.log" || echo "exit $rc, $(grep -m1 error "$dir/$1.log")"
}

all_finite() {  # all_finite CHECKPOINT: problems, if any
  py_check "$1" <<'PY'
import sys, h5py, numpy as np
bad = []
with h5py.File(sys.argv[1], "r") as f:
    f.visititems(lambda n, o: bad.append(n) if isinstance(o, h5py.Dataset) and o.dtype.kind == "f"
                 and not np.isfinite(o[()]).all() else None)
if bad: print("non-finite values in", ", ".join(bad))
PY
}

# A finite loss that explodes (SGD at lr 10): stopped at once, the last checkpoint kept.
train diverge --set mode=fg --set optimizer=sgd --set lr=10 --set warmup_steps=0 --set steps=200 \
  --checkpoint-every 1
why=$(expect_exit2 diverge "the run diverged")
[ -f "$dir/diverge/checkpoint.h5" ] || why="$why; no checkpoint kept"
[ -z "$why" ] && why=$(all_finite "$dir/diverge/checkpoint.h5")
last=$(tail -n 1 "$dir/diverge/loss.csv" | cut -d, -f1)
[ "$last" -lt 5 ] || why="$why; ran to step $last before stopping"
verdict "a diverging loss (SGD lr 10) stops with exit 2 after step $last" "$why"

# State that turns non-finite while the loss is still finite (a NaN planted in a checkpoint's
# momentum, so the first update spoils the weights): no checkpoint is written over the last one.
train planted --set mode=bp --set optimizer=sgd --set steps=10
why=$(py_check "$dir/planted/checkpoint.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    f["optimizer/velocity/fc1/weight"][0, 0] = float("nan")
PY
)
train spoiled --set mode=bp --set optimizer=sgd --set steps=20 --resume "$dir/planted" --checkpoint-every 1
why="$why$(expect_exit2 spoiled "NaN or Inf")"
[ -f "$dir/spoiled/checkpoint.h5" ] && why="$why; a checkpoint was written: $(all_finite "$dir/spoiled/checkpoint.h5")"
verdict "non-finite weights are never published as a checkpoint" "${why#; }"

# A checkpoint of another model, or with tensors of another type, is refused by name (#7).
train base --set mode=bp --set optimizer=sgd --set steps=4
train other_activation --set mode=bp --set optimizer=sgd --set steps=8 --set activation=gelu \
  --resume "$dir/base/checkpoint.h5"
verdict "--resume of a relu model into a gelu config is refused" \
  "$(expect_exit2 other_activation "it has activation = relu, the config activation = gelu")"
cp "$dir/base/checkpoint.h5" "$dir/ints.h5"
cp "$dir/base/checkpoint.h5" "$dir/missing.h5"
why=$(py_check "$dir/ints.h5" "$dir/missing.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    w = f["params/fc1/bias"][()]
    del f["params/fc1/bias"]
    f["params/fc1/bias"] = np.round(w * 1000).astype(np.int32)
with h5py.File(sys.argv[2], "r+") as f:
    del f["params/fc2/weight"]
PY
)
train int_tensor --set mode=bp --set optimizer=sgd --set steps=8 --resume "$dir/ints.h5"
verdict "a checkpoint tensor of int32 is refused" \
  "$why$(expect_exit2 int_tensor "params/fc1/bias holds 4-byte integers")"
train missing_tensor --set mode=bp --set optimizer=sgd --set steps=8 --resume "$dir/missing.h5"
verdict "a checkpoint without a tensor is refused" \
  "$why$(expect_exit2 missing_tensor "has no params/fc2/weight")"

# SIGKILL mid-run: every step before the checkpoint's is in loss.csv; the resume fills the rest.
train straight --set steps=300
"$fgpipe" train --config "$config" "${small[@]}" --set steps=300 --checkpoint-every 7 \
  --out "$dir/killed" >"$dir/killed.log" 2>&1 &
pid=$!
for _ in $(seq 1200); do grep -q "checkpoint at step 2[0-9]" "$dir/killed.log" && break; sleep 0.05; done
kill -9 "$pid"; wait "$pid" 2>/dev/null
why=$(py_check "$dir/killed" <<'PY'
import sys, h5py
d = sys.argv[1]
step = int(h5py.File(d + "/checkpoint.h5", "r").attrs["step"])
rows = [int(l.split(",")[0]) for l in open(d + "/loss.csv").read().splitlines()[1:] if l]
missing = sorted(set(range(step)) - set(rows))
if missing: print(f"checkpoint at step {step}, loss.csv lacks steps {missing[:5]}...")
PY
)
train killed --set steps=300 --resume "$dir/killed"
[ "$(cat "$dir/killed.rc")" -eq 0 ] ||
  why="$why; the resume exited $(cat "$dir/killed.rc"), its output's end:
$(tail -n 60 "$dir/killed.log")"
cmp -s <(cut -d, -f1-2 "$dir/straight/loss.csv") <(cut -d, -f1-2 "$dir/killed/loss.csv") ||
  why="$why; loss.csv after the resume differs from the uninterrupted run's"
verdict "after SIGKILL and --resume, loss.csv has every step once, as an uninterrupted run" "${why#; }"

# Open MPI's MPI-IO (OMPIO) opens every file with a shared file pointer whose lock is a named
# semaphore for the file's base name alone (sharedfp/sm: /dev/shm/sem.OMPIO_checkpoint.h5.tmp);
# a rank killed while it held it left it held, and every later checkpoint on the machine waited
# on it (CI, 2026-11-29). planted ENV...: a run that finds it held (a semaphore file of zeros),
# its exit status (124 after 5 s) in $dir/planted.rc; the semaphore removed after.
held=/dev/shm/sem.OMPIO_checkpoint.h5.tmp
planted() {
  head -c 32 /dev/zero >"$held"
  env "$@" timeout 5 "$fgpipe" train --config "$config" "${small[@]}" --set steps=3 --out "$dir/planted" \
    >"$dir/planted.log" 2>&1
  echo $? >"$dir/planted.rc"
  rm -f "$held"
}
if [ -e "$held" ]; then
  echo "SKIP a held MPI-IO semaphore: $held exists (another run's): not counted as passed"
else
  planted OMPI_MCA_sharedfp=sm  # Open MPI's own choice, which fgpipe replaces: it waits
  if [ "$(cat "$dir/planted.rc")" -ne 124 ]; then
    echo "SKIP a held MPI-IO semaphore: a run that uses it did not wait on the planted one (exit" \
      "$(cat "$dir/planted.rc")): not Open MPI 4's OMPIO here; not counted as passed"
  else
    planted
    verdict "a held MPI-IO semaphore (a killed run's) does not stop a checkpoint" \
      "$([ "$(cat "$dir/planted.rc")" -eq 0 ] || echo "exit $(cat "$dir/planted.rc"): $(tail -n 3 "$dir/planted.log")")"
  fi
fi

# A full disk (a 2 MiB tmpfs; needs root): two ranks agree on the failed checkpoint, exit 2
# naming the full disk within the timeout (no hang), keep the last checkpoint and leave no
# .tmp; a --log that fills the disk ends the same way, and stays readable (#1, #8, #12).
full=$dir/full
mkdir -p "$full"
if [ "$(id -u)" -ne 0 ] || ! mount -t tmpfs -o size=2M tmpfs "$full" 2>/dev/null; then
  echo "SKIP full-disk cases: mounting a tmpfs needs root (uid $(id -u)); not counted as passed"
else
  trap 'umount "$full" 2>/dev/null; rm -rf "$dir"' EXIT
  two=(mpirun --oversubscribe -np 2 --bind-to none timeout 60 "$fgpipe" train --config "$config"
       "${small[@]}" --set stages=2 --set model=784-96-32-10)
  "${two[@]}" --set steps=4 --out "$full/o" >"$dir/full1.log" 2>&1
  free_kib=$(df --output=avail -k "$full" | tail -n 1)
  dd if=/dev/zero of="$full/filler" bs=1k count=$((free_kib - 64)) 2>/dev/null
  "${two[@]}" --set steps=8 --resume "$full/o" --out "$full/o" >"$dir/full2.log" 2>&1
  rc=$?
  why=""
  [ "$rc" -eq 2 ] && grep -q "disk full" "$dir/full2.log" || why="exit $rc, $(grep -m1 error "$dir/full2.log")"
  ls "$full/o"/*.tmp >/dev/null 2>&1 && why="$why; a .tmp was left"
  step=$(py_check "$full/o/checkpoint.h5" <<'PY'
import sys, h5py
print(h5py.File(sys.argv[1], "r").attrs["step"])
PY
)
  [ "$step" = 4 ] || why="$why; the last checkpoint: $step"
  verdict "a checkpoint that does not fit the disk: exit 2 on 2 ranks, the last one kept" "${why#; }"
  rm -f "$full/filler" "$full/o/checkpoint.h5"
  free_kib=$(df --output=avail -k "$full" | tail -n 1)
  dd if=/dev/zero of="$full/filler" bs=1k count=$((free_kib - 128)) 2>/dev/null
  "${two[@]}" --set steps=3000 --no-checkpoint --log "$full/log.h5" >"$dir/full3.log" 2>&1
  rc=$?
  why=""
  [ "$rc" -eq 2 ] && grep -q "log $full/log.h5 failed.*disk full" "$dir/full3.log" ||
    why="exit $rc, $(grep -m1 error "$dir/full3.log")"
  why="$why$(py_check "$full/log.h5" <<'PY'
import sys, h5py
n = len(h5py.File(sys.argv[1], "r")["steps/loss"])
if n == 0: print("; the log has no rows")
PY
)"
  verdict "a --log that fills the disk: exit 2 naming it, the log readable" "${why#; }"
fi

finish
