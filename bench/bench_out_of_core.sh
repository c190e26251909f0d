#!/usr/bin/env bash
# Out-of-core training against the disk and against training in memory (issue 6's benchmark).
#
# A model of HIDDEN layers of WIDTH (default 30 x 8448: 2.08 G parameters, 8.3 GB of weights)
# trains STEPS steps on one stage with a memory budget of two layer slots (about 1.7 GB, so the
# weights are ~4.8x the budget), once with fg (SGD: params + momentum stream) and once with bp.
# Printed, for each: bytes read and written per step, the store's read and write bandwidth
# against dd's direct sequential bandwidth on the same disk (measured in this run), and the
# step time against max(compute, I/O), where compute is the same step in memory (extrapolated
# from models of 8 and 16 hidden layers of the same width: the step grows by a fixed time per
# WIDTH x WIDTH layer; the whole model does not fit in memory) and I/O is read bytes / read
# bandwidth + written bytes / write bandwidth, each the better of dd's and the store's (this
# kind of virtual disk does not overlap reads with writes: docs/out-of-core.md).
#
# usage: bench/bench_out_of_core.sh [DIR [WIDTH [HIDDEN [STEPS]]]]
#   DIR: a directory on the disk to measure (default /var/tmp/fgpipe-ooc); needs ~2.2x the
#   weights free (params + state), and memory for 16 hidden layers in memory (~14 GB).
#   Small trial: bench/bench_out_of_core.sh DIR 1024 8 3
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/var/tmp/fgpipe-ooc} width=${2:-8448} hidden=${3:-30} steps=${4:-4}
# Compute in memory is measured on lo and hi hidden layers (hi fits in memory with its gradient
# and momentum: 3 x 4.6 GB at the default width) and extrapolated to `hidden`.
hi=$(( hidden < 16 ? hidden : 16 )) lo=$(( hidden < 16 ? hidden / 2 : 8 ))
fgpipe=build/fgpipe
[ -x "$fgpipe" ] || { echo "build first: launch/build.sh" >&2; exit 2; }
mkdir -p "$dir"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}

# The timed part is training: evaluation runs on 256 test samples, not 10000 (each evaluation
# wave reads the whole store).
data="$dir/data"
mkdir -p "$data"
src=/usr/share/datasets/fashion-mnist
ln -sf "$src"/train-images-idx3-ubyte.gz "$src"/train-labels-idx1-ubyte.gz "$data"/
/usr/bin/python3 - "$src" "$data" <<'EOF'
import gzip, struct, sys
src, dst = sys.argv[1], sys.argv[2]
for name, per in (("t10k-images-idx3-ubyte", 784), ("t10k-labels-idx1-ubyte", 1)):
    raw = gzip.open(f"{src}/{name}.gz").read()
    hdr = 16 if per > 1 else 8
    head = bytearray(raw[:hdr]); head[4:8] = struct.pack(">I", 256)
    gzip.open(f"{dst}/{name}.gz", "wb", compresslevel=1).write(bytes(head) + raw[hdr:hdr + 256 * per])
EOF

model() { local m=784 i; for ((i = 0; i < $1; i++)); do m+=-$width; done; echo "$m-10"; }
# --no-checkpoint: --out would write one (GBs) at the end of each run.
common=(--config launch/configs/fashion-mnist-mlp.conf --no-checkpoint --set data_dir="$data" --set steps="$steps"
        --set warmup_steps=0 --set print_every=1 --set optimizer=sgd --set lr=0 --set min_lr=0)
# lr 0: every update is computed, applied and written back as usual, but 30 untrained layers
# cannot diverge to a non-finite loss (which ends a run) in the few steps timed.
modes=("fg|--set mode=fg" "bp|--set mode=bp --set schedule=gpipe")

# Median seconds of the steps after the first (the first reads only: nothing to update yet).
step_time() { tail -n +3 "$1/loss.csv" | cut -d, -f4 | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# dd in requests of 512 MiB, about the store's (one request per layer slot: 571 MB here); with
# 64 MiB requests this virtual disk measured 0.98 GB/s reading where the store read 2.2. Its
# bandwidth drifts by tens of percent over minutes, so it is measured right before each mode.
disk() {  # sets dd_r and dd_w (GB/s)
  dd if=/dev/zero of="$dir/dd.bin" bs=512M count=8 oflag=direct conv=fsync 2>"$dir/dd-w.log"
  sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
  dd if="$dir/dd.bin" of=/dev/null bs=512M iflag=direct 2>"$dir/dd-r.log"
  rm -f "$dir/dd.bin"
  dd_w=$(awk '/copied/ {print $1 / $(NF-3) / 1e9}' "$dir/dd-w.log")
  dd_r=$(awk '/copied/ {print $1 / $(NF-3) / 1e9}' "$dir/dd-r.log")
}

rows=()
for m in "${modes[@]}"; do
  name=${m%%|*}; read -r -a sets <<<"${m#*|}"
  echo "# $name: disk (dd), then in memory, $lo and $hi hidden layers of $width" >&2
  disk
  for h in $lo $hi; do
    "$fgpipe" train "${common[@]}" "${sets[@]}" --set model="$(model $h)" --out "$dir/$name-mem$h" \
      >"$dir/$name-mem$h.log" 2>&1
  done
  t_lo=$(step_time "$dir/$name-mem$lo") t_hi=$(step_time "$dir/$name-mem$hi")
  compute=$(awk -v a="$t_lo" -v b="$t_hi" -v h="$hidden" -v lo="$lo" -v hi="$hi" \
              'BEGIN {print a + (h - lo) * (b - a) / (hi - lo)}')
  echo "# $name: out of core, $hidden hidden layers of $width" >&2
  rm -rf "$dir/w" && mkdir -p "$dir/w"
  budget=$("$fgpipe" train "${common[@]}" "${sets[@]}" --set model="$(model "$hidden")" \
             --mem-budget 1 --weights-dir "$dir/w" 2>&1 | grep -o "at least [0-9]*" | grep -o "[0-9]*" || true)
  [ -n "$budget" ] || { echo "could not learn the smallest budget: see $dir/$name-ooc.log" >&2; exit 1; }
  "$fgpipe" train "${common[@]}" "${sets[@]}" --set model="$(model "$hidden")" --mem-budget "$budget" \
    --weights-dir "$dir/w" --out "$dir/$name-ooc" --summary-json "$dir/$name-ooc.json" \
    >"$dir/$name-ooc.log" 2>&1
  rm -rf "$dir/w"
  params=$(grep -o '"params": [0-9]*' "$dir/$name-ooc.json" | grep -o "[0-9]*$")
  rss=$(grep -o '"peak_rss_bytes": [0-9]*' "$dir/$name-ooc.json" | grep -o "[0-9]*$")
  io=$(grep "layer I/O" "$dir/$name-ooc.log")
  read_gbs=$(echo "$io" | sed 's/.*read [0-9.]* GB in [0-9.]* s (\([0-9.]*\) GB\/s).*/\1/')
  write_gbs=$(echo "$io" | sed 's/.*wrote [0-9.]* GB in [0-9.]* s (\([0-9.]*\) GB\/s).*/\1/')
  # CPU seconds of the I/O thread per GB moved (the kernel's work for direct I/O).
  cpu_per_gb=$(echo "$io" | sed 's/.*read \([0-9.]*\) GB.*wrote \([0-9.]*\) GB.*CPU \([0-9.]*\) s.*/\3 \1 \2/' |
               awk '{print $1 / ($2 + $3)}')
  # Bytes per step: params + momentum (2 buffers); fg reads and writes each once, bp reads
  # twice (forward wave, backward wave: a layer still in a slot is not read again) and writes once.
  state=$(awk -v p="$params" 'BEGIN {print 2 * p * 4 / 1e9}')
  reads=$([ "$name" = fg ] && echo 1 || echo 2)
  t=$(step_time "$dir/$name-ooc")
  rows+=("$(awk -v n="$name" -v w="$(awk -v p="$params" 'BEGIN {print p * 4 / 1e9}')" -v b="$budget" \
    -v s="$state" -v r="$reads" -v rg="$read_gbs" -v wg="$write_gbs" -v dr="$dd_r" -v dw="$dd_w" \
    -v t="$t" -v c="$compute" -v rss="$rss" -v cg="$cpu_per_gb" 'BEGIN {
      # I/O time at the better of dd and the store: the shortest the disk allows.
      io = r * s / (rg > dr ? rg : dr) + s / (wg > dw ? wg : dw); bound = c > io ? c : io
      printf "%-3s %6.2f %5.2f %6.1f %6.1f | %5.2f %5.2f %5.2f | %5.2f %5.2f %5.2f | %7.1f %7.1f %7.1f %7.1f %5.2f | %7.1f | %6.2f",
        n, w, b / 1e9, r * s, s, rg, dr, rg / dr, wg, dw, wg / dw, t, c, io, bound, t / bound,
        cg * (r * s + s), rss / 1e9 }')")
done
echo
echo "mode weights budget read/step write/step | read GB/s  dd  ratio | write GB/s dd  ratio | step s  compute  io s  max   ratio | I/O CPU | peak RSS"
echo "     GB      GB     GB       GB        |                     |                     |  (out of core, in memory, disk)      | s/step  | GB"
printf '%s\n' "${rows[@]}"
