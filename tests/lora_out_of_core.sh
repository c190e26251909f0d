#!/usr/bin/env bash
# LoRA out of core (docs/out-of-core.md, "Training out of core": frozen layers; docs/gpt.md,
# "LoRA"): the adapters of tests/lora.sh on the tiny Llama, with every stage streaming its
# layers from a layer store at its floor (the budget a 1-byte budget's refusal names), train
# byte for byte like in memory (losses, parameters, the checkpoint's parameters and optimizer
# state) in bp, fg and fg+bp on 1 and 2 stages, and bp with 2 replicas sharing the store. The
# frozen base streams read-only: its layers hold their parameters alone in the store (no
# optimizer state), their newest version is the one --init-from wrote, with the base's tensors
# bit for bit, and a step writes the adapters' bytes only, while it reads the base (fg: once).
# --resume-weights: a run of 4 steps resumed to 8 (bp, fg, fg+bp at lag 0) and a run SIGKILLed
# twice end as the uninterrupted run, bitwise, with the base's bytes on flash untouched; with
# --init-from beside it, refused by name. The base's one copy on flash, on a tmpfs (root).
# LoRA on CUDA: tests/test_cuda_lora.c (the GPU's adapter and tail against the CPU's; skipped without a GPU).
# FGPIPE_TIER=rest: each mode once against memory (bp on 1 stage, fg on 1, fg+bp on 2), the
# replicas, the stores, one resume (fg+bp on 2 stages), the kills, the tmpfs and the refusals;
# long: each mode on the other stage count, and the bp and fg resumes.
#
# usage: lora_out_of_core.sh FGPIPE CONFIG   (CONFIG: launch/configs/llama-tiny.conf)
. "$(dirname "$0")/lib.sh" "$@"
kjv_tokens 60000 50000
# n_embd 96, one sample of 16 tokens per micro-batch: the weights, not the activations, are
# what does not fit (a streamed stage keeps a wave's activations), on 1 and on 2 stages.
# mem_runtime=0: the budgets here are the stage's own bytes, not the process's: the floor a
# measured runtime's refusal names has a 2 MiB margin, in which a small stage fits in memory
# (docs/out-of-core.md, "The runtime")
base=(--set data=tokens --set train_tokens="$dir/train.bin" --set val_tokens="$dir/val.bin"
      --set n_embd=96 --set intermediate_size=256 --set ctx=16 --set micro_batch=1
      --set micro_batches=2 --set warmup_steps=0 --set eval_every=0 --set print_every=1000000
      --set mem_runtime=0)
lora=(lora_rank=2 lora_alpha=4 lora_targets=q,k,v,o,gate,up,down)

run() {  # run NAME M BUDGET KEY=VALUE... [-- ARGS]: M stages (BUDGET -: in memory) into NAME/, NAME.bin
  local name=$1 M=$2 budget=$3; shift 3
  local sets=() extra=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do sets+=(--set "$1"); shift; done
  [ "${1:-}" = "--" ] && { shift; extra=("$@"); }
  [ "$budget" != - ] && extra+=(--mem-budget "$budget" --weights-dir "$dir/$name.w") && mkdir -p "$dir/$name.w"
  local mpi=() np=$M kv
  for kv in "${sets[@]}"; do [[ $kv == replicas=* ]] && np=$((M * ${kv#replicas=})); done
  [ "$np" -gt 1 ] && mpi=(mpirun -np "$np" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
  timeout 120 "${mpi[@]}" "$fgpipe" train --config "$config" "${base[@]}" --set stages="$M" "${sets[@]}" \
    "${extra[@]}" --out "$dir/$name" --save-params "$dir/$name.bin" >"$dir/$name.log" 2>&1
}

run basemodel 1 - steps=20
[ -f "$dir/basemodel/checkpoint.h5" ] && verdict "the base model trains" "" ||
  verdict "the base model trains" "$(grep -m1 error "$dir/basemodel.log")"
from=(-- --init-from "$dir/basemodel/checkpoint.h5")

# The floor: the largest "at least N bytes" over the stages of a 1-byte budget's refusal.
floor_budget() {  # floor_budget M KEY=VALUE...
  run probe "$1" 1 "${@:2}"
  grep -oE "at least [0-9]* bytes" "$dir/probe.log" | grep -oE "[0-9]+" | sort -n | tail -n 1
}

compare() {  # compare NAME M KEY=VALUE... [-- ARGS]: in memory (NAME-mem) against the floor (NAME-ooc)
  local name=$1 M=$2; shift 2
  local budget why="" a=$name-mem b=$name-ooc
  budget=$(floor_budget "$M" "$@")
  run "$a" "$M" - "$@"; local rc_mem=$?
  run "$b" "$M" "${budget:-1}" "$@"; local rc_ooc=$?
  if [ -z "$budget" ]; then why="no budget from the probe: $(grep -m1 error "$dir/probe.log")"
  elif [ "$rc_mem" -ne 0 ] || [ "$rc_ooc" -ne 0 ]; then
    why="exit $rc_mem / $rc_ooc: $(grep -h -m1 error "$dir/$a.log" "$dir/$b.log" | head -n 1)"
  elif [ "$(grep -c "streams its layers" "$dir/$b.log")" -lt "$M" ]; then why="not every stage streamed"
  else
    why=$(runs_differ "$a" "$b")
  fi
  verdict "$name: LoRA streamed at the floor ($budget bytes) equals in memory, bitwise" "$why"
}

cases=(
  "bp|mode=bp"
  "fg|mode=fg optimizer=sgd lr=0.001"
  "fgbp|mode=fg+bp estimator=cv select=1 lag=1 optimizer=sgd lr=0.001"
)
rest_cases=" bp-M1 fg-M1 fgbp-M2 "  # the full suite's; the long tier's are the others
tier_of() { [[ $rest_cases == *" $1 "* ]] && echo rest || echo long; }
for c in "${cases[@]}"; do
  IFS='|' read -r name sets_text <<<"$c"
  read -r -a sets <<<"$sets_text"
  for M in 1 2; do
    in_tier "$(tier_of "$name-M$M")" && compare "$name-M$M" "$M" steps=8 "${lora[@]}" "${sets[@]}" "${from[@]}"
  done
done
if in_tier rest; then
  # Two replicas of one stage share its store on the node (docs/out-of-core.md, "Replicas").
  compare bp-R2 1 steps=8 replicas=2 "${lora[@]}" mode=bp "${from[@]}"

  # stream = 1: a stage that fits the budget in memory streams all the same, with the same bytes;
  # without a budget it is refused by name.
  run fg-forced 1 1G steps=8 stream=1 "${lora[@]}" mode=fg optimizer=sgd lr=0.001 "${from[@]}"
  why=$(grep -q "streams its layers" "$dir/fg-forced.log" || echo "it did not stream: $(grep -m1 error "$dir/fg-forced.log")")
  cmp -s "$dir/fg-forced.bin" "$dir/fg-M1-mem.bin" || why="$why params differ from in memory"
  verdict "stream = 1 streams a stage that fits mem_budget, bitwise as in memory" "$why"
  run no-budget 1 - steps=1 stream=1
  grep -q "stream = 1 needs mem_budget" "$dir/no-budget.log" && verdict "stream = 1 without mem_budget: refused by name" "" ||
    verdict "stream = 1 without mem_budget: refused by name" "$(tail -n 1 "$dir/no-budget.log")"
fi

# The stores on flash: a frozen layer holds its parameters alone in one copy (slot0; an
# adapter has two, docs/out-of-core.md "Consistency"), its newest stamp is version 1
# (the --init-from load; version 0 is the seed's) and that slot holds what the in-memory run
# saved for it (its base tensor, unchanged there: tests/lora.sh) bit for bit; every adapter was
# written by each of the 8 steps (version 9). And a step's I/O (the stage's "out of core" line,
# steps 1-3, in units of 1 kB): it wrote its adapters' weights slots once and their step slots
# (fg+bp's kept gradient and lag's weights: after the B wave and again at the update) at most
# twice, nothing of the base; it read the base, and fg exactly once (one wave: base + adapters).
store_check() {  # store_check WEIGHTS_DIR PARAMS.bin LOG NAME: the problems, or nothing
  py_check "$@" <<'PY'
import sys, glob, re, struct, h5py, numpy as np
wdir, saved, log, run = sys.argv[1:5]  # run: not `name`, which the loops below reuse
params = np.fromfile(saved, dtype=np.float32)
out, stages = [], {}  # (first, last) -> [weights store, step store]
for path in glob.glob(f"{wdir}/*.h5"):
    first, last = map(int, re.search(r"-(\d+)-(\d+)\.h5$", path).groups())
    stages.setdefault((first, last), [None, None])[path.split("/")[-1].startswith("step-")] = path
at, W, S, F = 0, {}, {}, {}  # by stage: adapters' weights and step slots, the base's
for (first, last), (wpath, spath) in sorted(stages.items()):
    for path in (wpath, spath):
        if path is None: continue
        f = h5py.File(path, "r")
        hdr = f["headers"][...].tobytes()
        n = int(f.attrs["n_layers"])
        rec = len(hdr) // (2 * n + 2)
        frozen = f["index_frozen"][...] if "index_frozen" in f else np.zeros(n, int)
        if path == wpath and not frozen.any(): out.append(f"{path}: no frozen layer")
        for i, (l, name, count) in enumerate(zip(f["index_layer"][...], f["index_name"][...], f["index_count"][...])):
            name = name.decode()
            stamps = []
            for k in range(2):
                magic, kind, idx, slot, nb, cnt, ver = struct.unpack_from("<8s4IQq", hdr, (2 * i + k) * rec)
                stamps.append(ver if magic == b"FGSTORE1" else -1)
            k = int(np.argmax(stamps))
            data = f[f"slot{k}/{l}.{name}"]
            if path == spath:
                S[first] = S.get(first, 0) + data.size * 4
                continue
            if frozen[i]:
                F[first] = F.get(first, 0) + data.size * 4
                if data.shape[0] != 1: out.append(f"frozen {name}: {data.shape[0]} buffers")
                if k != 0 or f"slot1/{l}.{name}" in f: out.append(f"frozen {name}: a second copy")
                if max(stamps) != 1: out.append(f"frozen {name}: version {max(stamps)}, not 1")
                if not np.array_equal(data[0, :int(count)].view(np.uint32), params[at:at + int(count)].view(np.uint32)):
                    out.append(f"frozen {name}: not the saved parameters")
            else:
                W[first] = W.get(first, 0) + data.size * 4
                if f"slot{1 - k}/{l}.{name}" not in f: out.append(f"adapter {name}: one copy")
                if max(stamps) != 9: out.append(f"adapter {name}: version {max(stamps)}, not 9")
            at += int(count)
# bp on a stage holding both copies of a tied table keeps it once: the head reads the embedding's
tail = params.size - at
once = "the tied copies kept once" in open(log).read() and 0 < tail <= at and \
    np.array_equal(params[-tail:].view(np.uint32), params[:tail].view(np.uint32))
if at != params.size and not once: out.append(f"the stores hold {at} parameters, the run saved {params.size}")
lines = re.findall(r"stage (\d) out of core: .* a step read ([0-9.]+) GB and wrote ([0-9.]+) GB", open(log).read())
if len(lines) != len(stages): out.append(f"{len(lines)} out-of-core lines for {len(stages)} stages")
firsts = sorted(stages)
for s, read, wrote in lines:
    first = firsts[int(s)][0]
    w, st, f = W.get(first, 0), S.get(first, 0), F.get(first, 0)
    read, wrote = float(read) * 1e9, float(wrote) * 1e9
    if not any(abs(wrote - (w + k * st)) <= 1000 for k in range(3)):
        out.append(f"stage {s} wrote {wrote:.0f} bytes per step; its adapters' slots are {w} + {st} (step)")
    if read < f - 1000: out.append(f"stage {s} read {read:.0f} bytes per step, less than its base ({f})")
    if run.startswith("fg-") and abs(read - (f + w + st)) > 1000:
        out.append(f"fg: stage {s} read {read:.0f} bytes per step, not the base and adapters once ({f + w + st})")
print("; ".join(out))
PY
}
for name in bp-M1 fg-M1 fg-M2 fgbp-M2; do
  in_tier "$(tier_of "$name")" || continue
  verdict "$name: the base streams read-only (stamps, bytes on flash, bytes moved per step)" \
    "$(store_check "$dir/$name-ooc.w" "$dir/$name-mem.bin" "$dir/$name-ooc.log" "$name")"
done

# --resume-weights with frozen layers: a streamed run stopped after 4 steps (a run of 4 steps;
# lr_schedule constant, so that its first 4 steps are the 8-step run's), then resumed from its
# weights stores to step 8, ends byte for byte as the uninterrupted streamed run (losses,
# parameters, checkpoint); the stores then pass store_check (the base at the load's version 1,
# the adapters at 9), and the frozen layers' bytes on flash (both slots' data and stamps) are
# those the stopped run left: resuming reads the base and writes none of it.
frozen_digest() {  # frozen_digest WEIGHTS_DIR: one SHA-256 over the frozen layers' slots and stamps
  py_check "$1" <<'PY'
import sys, glob, hashlib, h5py, numpy as np
h, n_frozen = hashlib.sha256(), 0
for path in sorted(glob.glob(f"{sys.argv[1]}/*.h5")):
    if path.split("/")[-1].startswith("step-"): continue
    f = h5py.File(path, "r")
    n, hdr = int(f.attrs["n_layers"]), f["headers"][...].tobytes()
    rec = len(hdr) // (2 * n + 2)
    for i, (frozen, l, name) in enumerate(zip(f["index_frozen"][...], f["index_layer"][...], f["index_name"][...])):
        if not frozen: continue
        n_frozen += 1
        h.update(hdr[2 * i * rec:(2 * i + 2) * rec])
        for k in range(2):
            key = f"slot{k}/{l}.{name.decode()}"
            if key in f: h.update(f[key][...].tobytes())
print(f"{n_frozen} frozen layers {h.hexdigest()}" if n_frozen else "no frozen layer")
PY
}
resume_case() {  # resume_case NAME M KEY=VALUE...: stopped at 4 and resumed against 8 straight
  local name=$1 M=$2; shift 2
  local budget why="" a=$name-straight b=$name-stop
  budget=$(floor_budget "$M" steps=8 "$@" "${from[@]}")
  run "$a" "$M" "${budget:-1}" steps=8 "$@" "${from[@]}" || why="straight: exit $?: $(grep -m1 error "$dir/$a.log")"
  run "$b" "$M" "${budget:-1}" steps=4 "$@" "${from[@]}" || why="$why stop: exit $?: $(grep -m1 error "$dir/$b.log")"
  local before; before=$(frozen_digest "$dir/$b.w")
  cp "$dir/$b.log" "$dir/$b-first.log"
  run "$b" "$M" "${budget:-1}" steps=8 "$@" -- --resume-weights || why="$why resume: exit $?: $(grep -m1 error "$dir/$b.log")"
  grep -q "resumed from the layer stores .* at step 4$" "$dir/$b.log" || why="$why not resumed at step 4"
  why="$why$(runs_differ "$a" "$b")"
  verdict "$name: streamed LoRA stopped at step 4, --resume-weights to 8: the uninterrupted run, bitwise" "$why"
  local after; after=$(frozen_digest "$dir/$b.w")
  verdict "$name: resuming leaves the frozen base's bytes on flash as they were ($before)" \
    "$([[ $before == *" frozen layers "* ]] && [ "$before" = "$after" ] || echo "before: $before; after: $after")"
  verdict "$name: the resumed stores hold the base read-only and the adapters at version 9" \
    "$(store_check "$dir/$b.w" "$dir/$b.bin" "$dir/$b.log" "$name")"
}
constant=(lr_schedule=constant "${lora[@]}")
if in_tier long; then
  resume_case bp-resume-M1 1 "${constant[@]}" mode=bp
  resume_case fg-resume-M2 2 "${constant[@]}" mode=fg optimizer=sgd lr=0.001
fi
in_tier rest || finish  # the rest is the full suite's
resume_case fgbp-resume-M2 2 "${constant[@]}" mode=fg+bp estimator=cv select=1 lag=0 optimizer=sgd lr=0.001

# SIGKILL mid-run (after the 3rd step since the run (re)started, plus up to 0.09 s), then
# --resume-weights, twice, on 2 stages in fg: the crash leaves the adapters at a whole version
# beside the base's load (its version 1 stands for every later one), and the end is the
# uninterrupted 200-step run's, bitwise, with the base's bytes on flash as the load wrote them.
killed=(steps=200 print_every=1 "${constant[@]}" mode=fg optimizer=sgd lr=0.001)
budget=$(floor_budget 2 "${killed[@]}" "${from[@]}")
run killed-straight 2 "$budget" "${killed[@]}" "${from[@]}"
resumed=() rc=0
for round in 1 2 3; do
  if [ "$round" -eq 1 ]; then args=("${from[@]}"); else args=(-- --resume-weights); fi
  rm -f "$dir/killed.log"  # kill_after must not read the last round's log
  run killed 2 "$budget" "${killed[@]}" "${args[@]}" &
  pid=$!
  [ "$round" -lt 3 ] && kill_after "$dir/killed" 3
  wait "$pid"; rc=$?
  [ "$round" -eq 1 ] && digest=$(frozen_digest "$dir/killed.w")
  [ "$round" -gt 1 ] && resumed+=("$(grep -o "resumed from the layer stores .* at step [0-9]*" "$dir/killed.log" | grep -o "[0-9]*$" || echo none)")
done
verdict "SIGKILL twice, --resume-weights (at steps ${resumed[*]}): exit 0, the uninterrupted run's weights, bitwise" \
  "$([ "$rc" -eq 0 ] || echo "exit $rc: $(grep -m1 error "$dir/killed.log")")$(cmp -s "$dir/killed.bin" "$dir/killed-straight.bin" || echo " weights differ")$([ "${resumed[0]}" != none ] && [ "${resumed[1]}" != none ] && [ "${resumed[1]}" -lt 200 ] || echo " a run was not resumed mid-run")"
verdict "after the kills, the frozen base's bytes on flash are the load's" \
  "$([[ $digest == *" frozen layers "* ]] && [ "$digest" = "$(frozen_digest "$dir/killed.w")" ] && [ "$digest" = "$(frozen_digest "$dir/killed-straight.w")" ] || echo "$digest, then $(frozen_digest "$dir/killed.w"), straight $(frozen_digest "$dir/killed-straight.w")")"

# The base's one copy on flash (docs/out-of-core.md, "Consistency"), measured on a wider model
# (n_embd 512, 4 blocks, MLP 1536, rank 8 on all seven projections; fg with SGD momentum, one
# stage, no --init-from): a 1 MiB tmpfs is refused naming what the store needs, the frozen
# layers' parameters once and the adapters' two slots of params and momentum (computed here
# from the store's index); a 140 MiB tmpfs holds the store (two copies of the base took 178.8
# MB, docs/out-of-core.md), and the run trains.
wide=(steps=1 n_embd=512 n_head=8 n_kv_head=4 head_dim=64 n_layer=4 intermediate_size=1536
      lora_rank=8 lora_alpha=16 lora_targets=q,k,v,o,gate,up,down mode=fg optimizer=sgd lr=0.001 stream=1)
tmp="$dir/tmpfs"
mkdir -p "$tmp"
if mount -t tmpfs -o size=1m tmpfs "$tmp" 2>/dev/null; then
  timeout 120 "$fgpipe" train --config "$config" "${base[@]}" $(printf -- '--set %s ' "${wide[@]}") \
    --mem-budget 1G --weights-dir "$tmp" --out "$dir/tiny-disk" >"$dir/tiny-disk.log" 2>&1
  need=$(grep -o "need [0-9.]* GB there" "$dir/tiny-disk.log" | grep -o "[0-9.]*")
  umount "$tmp"
  mount -t tmpfs -o size=140m tmpfs "$tmp"
  timeout 300 "$fgpipe" train --config "$config" "${base[@]}" $(printf -- '--set %s ' "${wide[@]}") \
    --mem-budget 1G --weights-dir "$tmp" --out "$dir/wide-disk" >"$dir/wide-disk.log" 2>&1
  rc=$?
  check=$(py_check "$tmp" "${need:-none}" <<'PY'
import sys, glob, os, h5py
tmp, need = sys.argv[1], sys.argv[2]
path = glob.glob(f"{tmp}/stage-*.h5")[0]
f = h5py.File(path, "r")
pad = lambda n: (n * 4 + 4095) // 4096 * 4096
frozen = sum(pad(int(c)) for c, z in zip(f["index_count"][...], f["index_frozen"][...]) if z)
trained = sum(pad(int(c)) for c, z in zip(f["index_count"][...], f["index_frozen"][...]) if not z)
want = frozen + 2 * 2 * trained  # one copy of the base; two slots of the adapters' params and momentum
print(f"# wide LoRA store: {os.path.getsize(path)} bytes on flash; base {frozen} bytes, adapters "
      f"{trained}; the 1 MiB tmpfs's refusal needs {need} GB, the base once: {want / 1e9:.3f} GB, "
      f"twice: {(want + frozen) / 1e9:.3f} GB", file=sys.stderr)
if need != f"{want / 1e9:.3f}": print(f"the refusal needs {need} GB, not {want / 1e9:.3f}")
PY
)
  umount "$tmp"
  grep -h "^# wide" "$dir/py_check.err"
  verdict "the base once on flash: the free-space check needs it once, a 140 MiB tmpfs holds the store and trains" \
    "$check$([ "$rc" -eq 0 ] || echo " 140 MiB: exit $rc: $(grep -m1 error "$dir/wide-disk.log")")"
else
  echo "SKIP the base's one copy on a tmpfs: cannot mount one here (needs root); not counted"
fi

# The command line of a LoRA run with --resume-weights added keeps its --init-from: refused by
# name (either flag alone would be obeyed and the other dropped; --init-from would restart the
# adapters from step 0 over the stores).
run both 1 1G steps=8 "${constant[@]}" mode=bp stream=1 "${from[@]}" --resume-weights
rc=$?
verdict "--resume-weights with --init-from: refused by name (exit 2)" \
  "$([ "$rc" -eq 2 ] && grep -q "resume-weights continues from the layer stores; --init-from" "$dir/both.log" ||
     echo "exit $rc: $(tail -n 1 "$dir/both.log")")"

finish
