#!/usr/bin/env bash
# Prints the paths of the fine-tuning corpus's token files, making them on first use: the
# fortunes of Debian's `fortunes` package (2.8 MB of quotations, jokes and verse: far from the
# KJV the small GPTs pretrain on), concatenated in file-name order, the first 90% of its lines
# for training and the rest for validation, tokenized with GPT-2's BPE (fgpipe tokenize) into
# data/fortunes-train.bin and data/fortunes-val.bin (data/ is in .gitignore).
#   build/fgpipe train ... --set train_tokens=$(launch/fortunes-corpus.sh | head -n 1)
set -euo pipefail
cd "$(dirname "$0")/.."
train=data/fortunes-train.bin val=data/fortunes-val.bin src=/usr/share/games/fortunes
fail() { echo "fortunes-corpus: $*" >&2; exit 1; }
if [ ! -s "$train" ] || [ ! -s "$val" ]; then
  [ -d "$src" ] || fail "no $src: sudo apt-get install fortunes (launch/install-deps.sh does)"
  [ -x build/fgpipe ] || fail "build/fgpipe is missing: run launch/build.sh"
  vocab=$(launch/gpt2-vocab.sh)
  mkdir -p data
  tmp=$(mktemp -d data/fortunes.XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
  # The plain files: not the .dat indexes, not the .u8 links to the same text.
  find "$src" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort | xargs cat >"$tmp/all.txt"
  lines=$(wc -l <"$tmp/all.txt")
  head -n $((lines * 9 / 10)) "$tmp/all.txt" >"$tmp/train.txt"
  tail -n +$((lines * 9 / 10 + 1)) "$tmp/all.txt" >"$tmp/val.txt"
  for s in train val; do
    build/fgpipe tokenize --vocab "$vocab" --in "$tmp/$s.txt" --out "$tmp/$s.bin" >&2
  done
  mv "$tmp/train.bin" "$train"
  mv "$tmp/val.bin" "$val"
fi
echo "$train"
echo "$val"
