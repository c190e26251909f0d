#!/usr/bin/env bash
# Prints the paths of the fine-tuning corpus's token files, making them on first use: the
# fortunes of Debian's `fortunes` package (its plain-text files in dpkg's order, not the *.dat
# indexes nor the *.u8 links: 2.3 MB of quotations, jokes and verse, far from the KJV the small
# GPTs pretrain on). Every 10th fortune (with its "%" line) validates, the rest train: the files
# are grouped by topic, so a cut at 90% of the bytes would validate on other topics. Tokenized
# with GPT-2's BPE (fgpipe tokenize) into data/fortunes-train.bin and data/fortunes-val.bin
# (data/ is in .gitignore).
#   build/fgpipe train ... --set train_tokens=$(launch/fortunes-corpus.sh | head -n 1)
# With --text it prints the text files instead (data/fortunes-train.txt, fortunes-val.txt), for
# another tokenizer (launch/finetune.sh), and makes only them: no GPT-2 vocabulary, no tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
train=data/fortunes-train.bin val=data/fortunes-val.bin
fail() { echo "fortunes-corpus: $*" >&2; exit 1; }
if [ ! -s data/fortunes-train.txt ] || [ ! -s data/fortunes-val.txt ]; then
  dpkg -L fortunes >/dev/null 2>&1 || fail "needs Debian's fortunes: sudo apt-get install fortunes (launch/install-deps.sh does)"
  files=()
  while read -r f; do
    case $f in *.dat|*.u8) continue ;; /usr/share/games/fortunes/*) [ -f "$f" ] && [ ! -L "$f" ] && files+=("$f") ;; esac
  done < <(dpkg -L fortunes)
  [ ${#files[@]} -gt 0 ] || fail "no fortune files in dpkg -L fortunes"
  mkdir -p data
  tmp=$(mktemp -d data/fortunes.XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
  /usr/bin/python3 - "$tmp/train.txt" "$tmp/val.txt" "${files[@]}" <<'PY' >&2
import sys
train_path, val_path, files = sys.argv[1], sys.argv[2], sys.argv[3:]
data = b"".join(open(f, "rb").read() for f in files)
pieces = data.split(b"\n%\n")
pieces = [p + b"\n%\n" for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
train = b"".join(p for i, p in enumerate(pieces) if i % 10 != 9)
val = b"".join(p for i, p in enumerate(pieces) if i % 10 == 9)
assert len(train) + len(val) == len(data)
open(train_path, "wb").write(train)
open(val_path, "wb").write(val)
print(f"fortunes-corpus: {len(files)} files, {len(pieces)} fortunes, {len(data)} bytes: "
      f"{len(train)} train, {len(val)} validate")
PY
  mv "$tmp/train.txt" data/fortunes-train.txt
  mv "$tmp/val.txt" data/fortunes-val.txt
  rm -rf "$tmp"
  trap - EXIT
fi
if [ "${1:-}" = --text ]; then
  echo data/fortunes-train.txt
  echo data/fortunes-val.txt
  exit 0
fi
if [ ! -s "$train" ] || [ ! -s "$val" ]; then
  [ -x build/fgpipe ] || fail "build/fgpipe is missing: run launch/build.sh"
  vocab=$(launch/gpt2-vocab.sh)
  tmp=$(mktemp -d data/fortunes.XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
  for s in train val; do
    build/fgpipe tokenize --vocab "$vocab" --in "data/fortunes-$s.txt" --out "$tmp/$s.bin" >&2
  done
  mv "$tmp/train.bin" "$train"
  mv "$tmp/val.bin" "$val"
fi
echo "$train"
echo "$val"
