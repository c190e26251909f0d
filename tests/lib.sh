# Shared by the end-to-end test scripts, sourced first: `. "$(dirname "$0")/lib.sh" "$@"`.
# Takes the two arguments every one of them gets (FGPIPE CONFIG, made absolute), lets Open MPI
# run as root, pins one OpenMP thread per rank, makes the scratch directory $dir (removed at
# exit; a script with its own EXIT trap removes it there) and keeps the PASS/FAIL count.
set -u
if [ $# -ne 2 ]; then echo "usage: $0 FGPIPE CONFIG" >&2; exit 2; fi
fgpipe=$(realpath "$1") config=$(realpath "$2")
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMP_NUM_THREADS=1
# A rank waiting in MPI yields its core (Open MPI spins otherwise): the ranks of a job, and of
# two tests run at once, share 2 cores
export OMPI_MCA_mpi_yield_when_idle=1
# One host: shared memory only, and a singleton (a test's `fgpipe` without mpirun) starts no
# daemon: Open MPI's start-up scans its network transports (ofi, openib, UCX) at every process
# start otherwise, 0.4 of a tiny run's 0.5 s. tests/multihost.sh names TCP on its command line.
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_ess_singleton_isolated=1
dir=$(mktemp -d "${TMPDIR:-/tmp}/fgpipe-$(basename "$0" .sh).XXXXXX") || exit 1
trap '[ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM
passed=0 failed=0
# A test's `timeout N CMD` prints CMD's stacks when it hangs (a rare hang in CI then says where)
tests_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
timeout() { "$tests_dir/timeout-stacks.sh" "$@"; }
# FGPIPE_TIER: a script's cases fall in up to three tiers, each run by its own ctest test:
# quick (its *_quick test, ctest -L quick), rest (the test of the script's name, in the full
# suite) and long (its *_long test, ctest -L long: the heavy sweeps); so no case runs twice
# (but the reference runs several tiers compare with). Unset, a script runs every case.
tier=${FGPIPE_TIER:-all}
in_tier() { [ "$tier" = all ] || [ "$tier" = "$1" ]; }  # in_tier quick|rest|long

verdict() {  # verdict LABEL [PROBLEM]: PASS when PROBLEM is empty
  if [ -z "${2:-}" ]; then echo "PASS $1"; passed=$((passed + 1)); else echo "FAIL $1: $2"; failed=$((failed + 1)); fi
}

py_check() {  # py_check ARGS... <SCRIPT: what the Python check prints (its problems); a check
  # that fails to run (a missing file, an exception) is a problem too, never a silent pass
  local out
  out=$(/usr/bin/python3 - "$@" 2>"$dir/py_check.err") ||
    { echo "the check failed: $(tail -n 1 "$dir/py_check.err")"; return; }
  echo "$out"
}

loss_diff() {  # loss_diff CSV_A CSV_B: the largest relative difference of two runs' per-step
  # losses (column 2 of their loss.csv), relative to B's
  paste -d, <(cut -d, -f2 "$1") <(cut -d, -f2 "$2") |
    awk -F, 'NR > 1 { e = ($1 - $2) / ($2 < 0 ? -$2 : $2); e = e < 0 ? -e : e; if (e > w) w = e }
             END { printf "%.3g", w }'
}

train_on() {  # train_on NAME M KEY=VALUE... [-- ARGS]: `fgpipe train --config $config ${base[@]}`
  # on M stages into $dir/NAME/ and $dir/NAME.bin; a failed run leaves its error in NAME.problem
  local name=$1 M=$2; shift 2
  local sets=() extra=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do sets+=(--set "$1"); shift; done
  [ "${1:-}" = "--" ] && { shift; extra=("$@"); }
  timeout 120 mpirun -np "$M" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    "$fgpipe" train --config "$config" "${base[@]}" --set stages="$M" "${sets[@]}" "${extra[@]}" \
    --out "$dir/$name" --save-params "$dir/$name.bin" >"$dir/$name.log" 2>&1 ||
    echo "mpirun -np $M exited with $?: $(grep -m1 error "$dir/$name.log")" >"$dir/$name.problem"
}

same_runs() {  # same_runs LABEL A B: a verdict that runs A and B have identical step,loss,lr
  # columns and parameters
  local a=$2 b=$3 why=""
  for r in "$a" "$b"; do [ -f "$dir/$r.problem" ] && why="$r: $(cat "$dir/$r.problem")"; done
  if [ -z "$why" ]; then
    cmp -s <(cut -d, -f1-3 "$dir/$a/loss.csv") <(cut -d, -f1-3 "$dir/$b/loss.csv") || why="losses differ"
    cmp -s "$dir/$a.bin" "$dir/$b.bin" ||
      why="$why params differ ($(cmp -l "$dir/$a.bin" "$dir/$b.bin" 2>/dev/null | wc -l) bytes)"
  fi
  verdict "$1" "$why"
}

docs_corpus() {  # docs_corpus: this repository's docs and README in $dir/corpus.txt, the text the
  # byte-level GPTs of the tests train on (no download)
  local root; root=$(dirname "$0")/..
  cat "$root"/docs/*.md "$root"/README.md >"$dir/corpus.txt"
}

small_mnist() {  # small_mnist TRAIN TEST: the first TRAIN training and TEST test samples of the
  # MLP config's Fashion-MNIST in $dir/mnist/ (its data_dir, same format), for runs whose checks
  # compare runs with each other: reading all 70 000 images was most of such a run's start-up
  # (1.4 of a 1-step run's 1.8 CPU seconds)
  local src
  src=$(sed -n 's/^ *data_dir *= *\([^ #]*\).*/\1/p' "$(dirname "$config")/fashion-mnist-mlp.conf")
  mkdir -p "$dir/mnist"
  /usr/bin/python3 - "$src" "$dir/mnist" "$1" "$2" <<'PY'
import gzip, struct, sys
src, dst, counts = sys.argv[1], sys.argv[2], {"train": int(sys.argv[3]), "t10k": int(sys.argv[4])}
for split, n in counts.items():
    for kind, size in (("images-idx3", 784), ("labels-idx1", 1)):
        name = f"{split}-{kind}-ubyte.gz"
        with gzip.open(f"{src}/{name}") as f:
            head = f.read(4)
            dims = struct.unpack(f">{head[3]}I", f.read(4 * head[3]))
            body = f.read(n * size)
        assert dims[0] >= n and len(body) == n * size, f"{name}: fewer than {n} samples"
        with gzip.open(f"{dst}/{name}", "wb", compresslevel=1) as g:
            g.write(head + struct.pack(f">{len(dims)}I", n, *dims[1:]) + body)
PY
  [ $? -eq 0 ] || { echo "FAIL small_mnist: no subset of $src"; exit 1; }
}

kjv_tokens() {  # kjv_tokens BYTES TRAIN: the KJV's first BYTES bytes as uint16 tokens (vocab
  # 256, data = tokens), the first TRAIN in $dir/train.bin, the rest in $dir/val.bin
  local root; root=$(dirname "$config")/../..
  head -c "$1" "$(cd "$root" && launch/text-corpus.sh 2>/dev/null)" >"$dir/kjv.txt"
  /usr/bin/python3 - "$dir" "$2" <<'PY'
import sys, numpy as np
d, n = sys.argv[1], int(sys.argv[2])
b = np.fromfile(f"{d}/kjv.txt", dtype=np.uint8).astype("<u2")
b[:n].tofile(f"{d}/train.bin"); b[n:].tofile(f"{d}/val.bin")
PY
}

wait_steps() {  # wait_steps OUT N: returns once the run writing OUT (print_every 1) has done N
  # steps since it (re)started (its log's "layer stores in ... at step S"), plus 0 to 90 ms
  local from=0
  for _ in $(seq 2400); do
    from=$(grep -o "layer stores in .* at step [0-9]*" "$1.log" 2>/dev/null | grep -o "[0-9]*$" || true)
    grep -q "step $((${from:-0} + $2))/" "$1.log" 2>/dev/null && break
    sleep 0.05
  done
  sleep 0.0$((RANDOM % 10))
}

kill_after() {  # kill_after OUT N: SIGKILLs the run writing OUT N steps after it (re)started
  wait_steps "$1" "$2"
  pkill -KILL -f "fgpipe train .*--out $1( |$)"
}

signal_stop() {  # signal_stop PID SIGNAL RC LIMIT LOG: sends SIGNAL to PID (this shell's child)
  # and waits; $stop_problem: an exit status other than RC (with LOG's end: a rare abort in CI
  # says where), or LIMIT seconds or more to end, empty if neither; $stop_seconds: how long it took
  local pid=$1 signal=$2 want=$3 limit=$4 log=$5 rc t0
  kill "-$signal" "$pid"; t0=$(date +%s.%N)
  wait "$pid"; rc=$?
  stop_seconds=$(echo "$(date +%s.%N) - $t0" | bc)
  stop_problem=""
  [ "$rc" -eq "$want" ] || stop_problem="exit $rc (not $want), the log's end:
$(tail -n 25 "$log")
"
  [ "$(echo "$stop_seconds < $limit" | bc)" = 1 ] || stop_problem="$stop_problem; it took $stop_seconds s to end"
}

finish() {  # the count, and the script's exit status
  echo "# $SECONDS s"
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
}

# runs_differ A B: what differs between runs A and B (losses, --save-params, the checkpoint's
# params and optimizer state), "" when they are the same, bitwise.
runs_differ() {
  local a=$1 b=$2 why=""
  cmp -s <(cut -d, -f1-3 "$dir/$a/loss.csv") <(cut -d, -f1-3 "$dir/$b/loss.csv") || why=" losses differ"
  cmp -s "$dir/$a.bin" "$dir/$b.bin" || why="$why params differ"
  h5diff -q "$dir/$a/checkpoint.h5" "$dir/$b/checkpoint.h5" /params /params >/dev/null 2>&1 &&
    h5diff -q "$dir/$a/checkpoint.h5" "$dir/$b/checkpoint.h5" /optimizer /optimizer >/dev/null 2>&1 ||
    why="$why checkpoints differ"
  echo "$why"
}
