#!/usr/bin/env bash
# fgpipe tokenize is GPT-2's tokenizer: token for token the same as GPT-2's encoder
# (gpt-3-encoder's Encoder.js run by node, tests/bpe_reference.js) on real texts (this
# repository's docs, the King James Bible, a Unicode sample: accents, Greek, Cyrillic, Hebrew,
# CJK, emoji, digits, contractions, runs of spaces and tabs); --decode gives the bytes back;
# bad input is refused by name.
# usage: bpe.sh FGPIPE CONFIG
. "$(dirname "$0")/lib.sh" "$@"
root=$(realpath "$(dirname "$0")/..")
vocab=$(cd "$root" && realpath "$(launch/gpt2-vocab.sh)") || { echo "FAIL: no GPT-2 vocabulary"; exit 1; }
command -v node >/dev/null || { echo "FAIL: node is missing (launch/install-deps.sh installs nodejs)"; exit 1; }

# The reference takes quadratic time (it concatenates its token array per piece): 60 KB each, whole lines.
cat "$root"/README.md "$root"/docs/*.md | head -c 60000 | sed '$d' >"$dir/docs.txt"
head -c 60000 "$(cd "$root" && launch/text-corpus.sh 2>/dev/null)" | sed '$d' >"$dir/kjv.txt"
printf "Grüße, naïve café — 東京は晴れ 🌸🌸; Ελληνικά, русский, עִבְרִית. 123,456.78 ½ 'tis we'll\n" >"$dir/unicode.txt"
printf "they've I'M  two  spaces\t\ttabs   \n\n\n   trailing   \r\nx\u00a0y ...!!! <a href=\"x\">" >>"$dir/unicode.txt"

for t in docs kjv unicode; do
  node "$root/tests/bpe_reference.js" "$vocab" "$dir/$t.txt" "$dir/$t.ref" 2>"$dir/$t.node.err" ||
    { verdict "$t: reference encoder ran" "$(tail -n 1 "$dir/$t.node.err")"; continue; }
  "$fgpipe" tokenize --vocab "$vocab" --in "$dir/$t.txt" --out "$dir/$t.bin" 2>"$dir/$t.err"
  problem=""
  if [ ! -f "$dir/$t.bin" ]; then problem="fgpipe tokenize failed: $(tail -n 1 "$dir/$t.err")"
  elif ! cmp -s "$dir/$t.bin" "$dir/$t.ref"; then
    first=$(cmp "$dir/$t.bin" "$dir/$t.ref" 2>&1 | head -n 1)
    problem="tokens differ from the reference ($(stat -c %s "$dir/$t.bin") against $(stat -c %s "$dir/$t.ref") bytes; $first)"
  fi
  verdict "$t ($(($(stat -c %s "$dir/$t.ref") / 2)) tokens): the same tokens as GPT-2's encoder" "$problem"
  "$fgpipe" tokenize --decode --vocab "$vocab" --in "$dir/$t.bin" --out "$dir/$t.back" 2>/dev/null
  cmp -s "$dir/$t.back" "$dir/$t.txt"
  verdict "$t: --decode gives the text back" "$([ $? -eq 0 ] || echo "the bytes differ")"
done

# expect LABEL PATTERN ARGS...: fgpipe tokenize ARGS fails with PATTERN in its message.
expect() {
  local label=$1 pattern=$2; shift 2
  "$fgpipe" tokenize "$@" >"$dir/err.log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && grep -q -- "$pattern" "$dir/err.log"
  verdict "$label" "$([ $? -eq 0 ] || echo "exit $rc: $(tail -n 1 "$dir/err.log")")"
}
printf 'ok \xff\xfe bad' >"$dir/bad.txt"
expect "invalid UTF-8 is refused at its byte" "not UTF-8 at byte 3" --vocab "$vocab" --in "$dir/bad.txt" --out "$dir/bad.bin"
expect "a missing vocabulary names its file" "nowhere/encoder.json" --vocab "$dir/nowhere" --in "$dir/unicode.txt" --out "$dir/x.bin"
printf 'abc' >"$dir/odd.bin"
expect "tokens of an odd byte count are refused" "not a whole number" --decode --vocab "$vocab" --in "$dir/odd.bin" --out "$dir/x.txt"
printf '\xff\xff' >"$dir/big.bin"
expect "a token outside the vocabulary is refused" "65535, not in the vocabulary" --decode --vocab "$vocab" --in "$dir/big.bin" --out "$dir/x.txt"
[ ! -e "$dir/bad.bin" ] && [ ! -e "$dir/x.txt" ]
verdict "a refused run writes no output" "$([ $? -eq 0 ] || echo "an output file was left behind")"
finish
