# Shared by the benchmark scripts that run one training per table row, sourced after
# `cd` to the repository root. mpi_flags comes from launch/lib.sh.
. launch/lib.sh

# selected NAME [WANT ...]: true when no names are wanted or NAME is one of them.
selected() {
  local name=$1 w; shift
  [ $# -eq 0 ] && return 0
  for w in "$@"; do [ "$w" = "$name" ] && return 0; done
  return 1
}

# warm STEPS: a tenth of STEPS (at least 1), the warm-up of a run of STEPS.
warm() { local w=$(($1 / 10)); [ "$w" -ge 1 ] || w=1; echo "$w"; }

# train NAME STEPS KEY=VALUE... [-- EXTRA ARGS]: one `$fgpipe train ${model[@]}` run into
# $out/NAME/, $out/NAME.json and $out/NAME.log; on failure says why and returns 1.
train() {
  local name=$1 steps=$2; shift 2
  local sets=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do sets+=(--set "$1"); shift; done
  [ $# -gt 0 ] && shift
  rm -rf "${out:?}/$name"
  if ! "$fgpipe" train "${model[@]}" --set steps="$steps" --set warmup_steps="$(warm "$steps")" \
       "${sets[@]}" "$@" --out "$out/$name" --summary-json "$out/$name.json" >"$out/$name.log" 2>&1; then
    echo "$name: failed: $(grep -m1 -i error "$out/$name.log" || tail -n 1 "$out/$name.log")"
    rm -f "$out/$name.json"
    return 1
  fi
}

# llama3_window DIR CTX: DIR/window.bin, one window of CTX + 1 tokens of the fortunes in
# Llama 3's ids (its tokenizer.json; uint32 after the FGTOKU32 header), from DIR/val-llama3.bin,
# all of them. Every step of a streamed benchmark sees the same window: the loss must fall step
# by step, and the end-of-run evaluation scores that one window.
llama3_window() {
  local dir=$1 ctx=$2 text
  text=$(launch/fortunes-corpus.sh --text | tail -n 1)
  build/fgpipe tokenize --tokenizer "$(launch/hf-tokenizer.sh llama3)" --in "$text" --out "$dir/val-llama3.bin"
  /usr/bin/python3 - "$dir/val-llama3.bin" "$dir/window.bin" "$ctx" <<'PY'
import sys
src, out, ctx = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(src, "rb").read()
assert data[:8] == b"FGTOKU32", "expected uint32 tokens"
open(out, "wb").write(data[:8 + 4 * (ctx + 1)])
PY
}
