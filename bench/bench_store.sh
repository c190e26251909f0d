#!/bin/sh
# Layer store bandwidth against the disk's own direct sequential bandwidth, in interleaved
# rounds (the disk may be shared and noisy): medians of ROUNDS rounds, one table.
#
#   bench/bench_store.sh [DIR=./bench-store] [STORE_MiB=1024] [LAYER_MiB=32] [ROUNDS=3]
#
# Baselines per round: dd with O_DIRECT of STORE_MiB, 1 MiB blocks (queue depth 1) and 32 MiB
# blocks (one large request, split by the kernel into many in flight); fio too when installed.
set -eu
BIN=${FGPIPE_BENCH_STORE:-$(dirname "$0")/../build/fgpipe-bench-store}
DIR=${1:-./bench-store}; MIB=${2:-1024}; LAYER=${3:-32}; ROUNDS=${4:-3}
mkdir -p "$DIR"
OUT=$(mktemp)
trap 'rm -f "$OUT" "$DIR/dd.bin"' EXIT

dd_rate() {  # dd's "bytes ... copied, S s" line -> GB/s and seconds
    awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "s,") s = $(i-1); printf "%.3f %.3f\n", $1 / s / 1e9, s }'
}

for r in $(seq "$ROUNDS"); do
    for bs in 1 32; do
        echo "dd $bs write $(dd if=/dev/zero of="$DIR/dd.bin" bs=${bs}M count=$((MIB / bs)) oflag=direct conv=fsync 2>&1 | dd_rate)" >> "$OUT"
        echo "dd $bs read $(dd if="$DIR/dd.bin" of=/dev/null bs=${bs}M iflag=direct 2>&1 | dd_rate)" >> "$OUT"
    done
    if command -v fio > /dev/null; then
        for rw in write read; do
            fio --name=seq --filename="$DIR/dd.bin" --size=${MIB}M --direct=1 --rw=$rw --bs=1M \
                --ioengine=io_uring --iodepth=32 --numjobs=1 --output-format=terse 2>/dev/null |
                awk -F';' -v rw=$rw '{ kb = (rw == "read") ? $7 : $48; printf "fio 32 %s %.3f 0\n", rw, kb * 1024 / 1e9 }' >> "$OUT"
        done
    fi
    rm -f "$DIR/dd.bin"
    "$BIN" "$DIR" "$MIB" "$LAYER" >> "$OUT"
done

echo "layer store on $DIR: ${MIB} MiB of layers (${LAYER} MiB each: params + Adam m + v), median of $ROUNDS rounds"
echo "(dd N / fio N: block size in MiB or queue depth; store: one request per layer; stream = read + write-back, GB/s of both)"
awk '
function median(key,   n, i, j, t, a) {
    n = split(vals[key], a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ key = $1 " " $2 " " $3; if (!(key in vals)) order[++nk] = key; vals[key] = vals[key] " " $4; all[key] = all[key] " " $4 }
END {
    printf "%-6s %4s %-7s %10s   %s\n", "what", "N", "op", "GB/s", "rounds"
    for (k = 1; k <= nk; k++) { split(order[k], p, " "); printf "%-6s %4s %-7s %10.2f  %s\n", p[1], p[2], p[3], median(order[k]), all[order[k]] }
}' "$OUT"
