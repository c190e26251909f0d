#!/usr/bin/env bash
# Prints the path of the default text corpus for model = gpt, making it on first use: the King
# James Bible (4.3 MB of plain text) as printed by the `bible` program of Debian's bible-kjv
# package, cached as data/kjv.txt under the repository root (data/ is in .gitignore). The byte
# count goes to stderr, the path alone to stdout:
#   build/fgpipe train --config launch/configs/gpt-kjv.conf --set text_file=$(launch/text-corpus.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
out=data/kjv.txt
min_bytes=4000000  # the whole text is 4,298,239 bytes; less means bible stopped early

fail() { echo "text-corpus: $*" >&2; exit 1; }

install_bible() {
  [ "$(id -u)" -eq 0 ] || fail "needs the bible program: sudo apt-get install bible-kjv"
  echo "text-corpus: installing bible-kjv" >&2
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends bible-kjv >/dev/null; } >&2 ||
    fail "apt-get install bible-kjv failed"
  command -v bible >/dev/null || fail "bible-kjv installed but no bible program on PATH"
}

if [ ! -s "$out" ]; then
  command -v bible >/dev/null || install_bible
  mkdir -p data
  tmp=$(mktemp "$out.XXXXXX")
  trap 'rm -f "$tmp"' EXIT
  # Pretty-printed (the default): "Genesis 1" headings, numbered verses, lines broken between
  # words at 79 columns. -l 79 pins the width, which otherwise follows $COLUMNS; stdin closed
  # so it never waits for interactive input.
  bible -l 79 Gen1:1-Rev22:21 </dev/null >"$tmp" || fail "bible Gen1:1-Rev22:21 failed (exit $?)"
  bytes=$(wc -c <"$tmp")
  [ "$bytes" -ge "$min_bytes" ] ||
    fail "bible Gen1:1-Rev22:21 printed $bytes bytes, expected about 4.3 MB (is bible-kjv-text installed?)"
  chmod 644 "$tmp"
  mv "$tmp" "$out"
  trap - EXIT
  echo "text-corpus: wrote $out" >&2
fi
echo "text-corpus: $out: $(wc -c <"$out") bytes" >&2
echo "$PWD/$out"
