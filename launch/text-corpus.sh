#!/usr/bin/env bash
# Prints the path of the default text corpus for model = gpt, making it on first use: the King
# James Bible (4.3 MB of plain text) as printed by the `bible` program of Debian's bible-kjv
# package, cached as data/kjv.txt under the repository root.
#   build/fgpipe train --config launch/configs/gpt-kjv.conf --set text_file=$(launch/text-corpus.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
out=data/kjv.txt
if [ ! -s "$out" ]; then
  if ! command -v bible >/dev/null; then
    launch/install-deps.sh >&2 || { echo "text-corpus: cannot install bible-kjv" >&2; exit 1; }
  fi
  mkdir -p data
  # Every verse from the first to the last, pretty-printed (chapter headings, numbered
  # verses); stdin closed so it never waits for a terminal.
  if ! bible Gen1:1-Rev22:21 </dev/null >"$out.tmp" || [ ! -s "$out.tmp" ]; then
    rm -f "$out.tmp"
    echo "text-corpus: bible Gen1:1-Rev22:21 printed nothing (is bible-kjv installed?)" >&2
    exit 1
  fi
  mv "$out.tmp" "$out"
  echo "text-corpus: wrote $out ($(wc -c <"$out") bytes)" >&2
fi
echo "$PWD/$out"
