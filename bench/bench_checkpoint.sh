#!/usr/bin/env bash
# Checkpoint bandwidth: the parallel HDF5 checkpoint (params + Adam state) of a model of ~1.1 GB
# of parameters written and read by M ranks (default 4, one stage each), against dd writing and
# reading the very same bytes (a copy of the checkpoint, from memory) sequentially on the same
# disk. dd uses conv=fsync, like the checkpoint's fsync before it is published; the page cache
# is dropped before every read when run as root.
# Shared virtual disks drift by 4x within a minute, so each round times the checkpoint and dd
# back to back; the table gives the best of each and the median of the per-round ratios. The
# first write of a process from its fresh memory is 3-6x slower on this kind of virtual machine
# (a plain C pwrite loop shows the same), so it gets its own row; later checkpoints of a run
# are the "checkpoint write" row.
# Not /dev/zero: this machine's virtual disk writes zeros ~3x faster than real data.
# usage: bench/bench_checkpoint.sh [DIR] [M] [MODEL] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-out/bench-checkpoint} M=${2:-4} model=${3:-784-8192-8192-8192-8192-8192-10} rounds=${4:-5}
bench=build/fgpipe-bench-checkpoint
[ -x "$bench" ] || { echo "bench_checkpoint: build first (launch/build.sh)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$dir"
src=/dev/shm/fgpipe-bench-checkpoint.$$
trap 'rm -f "$dir/dd.bin" "$dir/bench-checkpoint.h5" "$src"' EXIT

drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }
dd_seconds() { dd "$@" 2>&1 | awk '/copied/ {for (i = 1; i <= NF; i++) if ($i ~ /^s,?$/) print $(i-1)}'; }
rows=
for round in $(seq "$rounds"); do
  res=$(mpirun -np "$M" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$bench" "$model" "$dir" 2)
  get() { awk -v k="$1" '$1 == k {print $2}' <<<"$res"; }
  if [ "$round" = 1 ]; then  # dd's source: the checkpoint's own bytes, in memory
    bytes=$(get bytes) params=$(get params) dropped=$(get page_cache_dropped)
    if [ "$(df --output=avail -B1 /dev/shm | tail -1)" -gt $(( ${bytes%.*} + (1 << 30) )) ]; then
      cp "$(get file)" "$src"; source_note="a copy of the checkpoint in /dev/shm"
    else
      src=$(get file); source_note="the checkpoint file itself (no room in /dev/shm)"
    fi
  fi
  [ "$src" = "$(get file)" ] || rm -f "$(get file)"
  drop
  w=$(dd_seconds if="$src" of="$dir/dd.bin" bs=4M conv=fsync)
  drop
  r=$(dd_seconds if="$dir/dd.bin" of=/dev/null bs=4M)
  rm -f "$dir/dd.bin"
  rows+="$(get write_seconds) $(get read_seconds) $w $r $(get first_write_seconds)"$'\n'
  echo "round $round: checkpoint write $(get first_write_seconds) s then $(get write_seconds) s, read $(get read_seconds) s;" \
       "dd write $w s read $r s" >&2
done

awk -v bytes="$bytes" -v M="$M" -v params="$params" -v dropped="$dropped" -v model="$model" \
    -v rounds="$rounds" -v src="$source_note" '
function best(col,   i, b) { b = 1e99; for (i = 1; i <= n; i++) if (t[i, col] < b) b = t[i, col]; return b }
function median_ratio(dd, ck,   i, j, x, k, v) {  # median over rounds of dd time / checkpoint time
  for (i = 1; i <= n; i++) v[i] = t[i, dd] / t[i, ck]
  for (i = 2; i <= n; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
  return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
NF == 5 { n++; for (k = 1; k <= 5; k++) t[n, k] = $k }
END {
  mib = bytes / 1048576
  printf "fgpipe checkpoint bench: model %s (%.0f M params), %d ranks, %.0f MiB per checkpoint (params + Adam m, v), %d rounds\n", model, params / 1e6, M, mib, rounds
  printf "dd source: %s; page cache dropped before reads: %s\n", src, dropped == 1 ? "yes" : "NO (not root): reads may come from memory"
  printf "%-32s %12s %9s %22s\n", "", "best seconds", "MiB/s", "vs dd (median/round)"
  printf "%-32s %12.3f %9.0f %22.2f\n", "checkpoint write (HDF5, MPI-IO)", best(1), mib / best(1), median_ratio(3, 1)
  printf "%-32s %12.3f %9.0f %22.2f\n", "  first one of the process", best(5), mib / best(5), median_ratio(3, 5)
  printf "%-32s %12.3f %9.0f %22s\n", "dd write (bs=4M conv=fsync)", best(3), mib / best(3), "1.00"
  printf "%-32s %12.3f %9.0f %22.2f\n", "checkpoint read (by name)", best(2), mib / best(2), median_ratio(4, 2)
  printf "%-32s %12.3f %9.0f %22s\n", "dd read (bs=4M)", best(4), mib / best(4), "1.00"
}' <<<"$rows"
