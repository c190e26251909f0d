"""Trains a small byte-level BPE on a text and writes it as a Hugging Face tokenizer.json that
`fgpipe tokenize --tokenizer` reads (a ByteLevel pre-tokenizer with GPT-2's regex, "a b"
merges, no added tokens): bench/bench_lora.sh's tokenizer, because Llama 3's 128256-row table
would be most of a small model's parameters and its softmax most of its step.

usage: bpe_train.py TEXT VOCAB_SIZE OUT.json

Words are split by an approximation of GPT-2's pattern (Python's re has no \\p{L}: letters
are [^\\W\\d_]); the split only chooses which merges are learned: fgpipe encodes with the
real pattern, and every merge's result is in the vocabulary, so any text encodes. Merges
are learned greedily (most frequent pair first, ties by first appearance), counts updated
incrementally over the words holding the merged pair."""
import collections
import json
import re
import sys

PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():  # GPT-2's printable alphabet for the 256 bytes
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    return dict(zip(bs, map(chr, cs)))


def train(text, vocab_size):
    counts = collections.Counter(PAT.findall(text))
    words = [list(w.encode("utf-8")) for w in counts]
    freq = list(counts.values())
    pairs, where = collections.Counter(), collections.defaultdict(set)
    for i, w in enumerate(words):
        for p in zip(w, w[1:]):
            pairs[p] += freq[i]; where[p].add(i)
    symbols = [bytes([b]) for b in range(256)]
    merges = []
    while len(symbols) < vocab_size and pairs:
        best = max(pairs, key=pairs.get)
        if pairs[best] < 2:
            break
        new = len(symbols)
        symbols.append(symbols[best[0]] + symbols[best[1]])
        merges.append(best)
        for i in list(where[best]):
            w, f = words[i], freq[i]
            for p in zip(w, w[1:]):
                pairs[p] -= f
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and (w[j], w[j + 1]) == best:
                    out.append(new); j += 2
                else:
                    out.append(w[j]); j += 1
            words[i] = out
            for p in zip(out, out[1:]):
                pairs[p] += f; where[p].add(i)
        for p in [p for p, c in pairs.items() if c <= 0]:
            del pairs[p]; where.pop(p, None)
    return symbols, merges


def main():
    text_path, vocab_size, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    symbols, merges = train(open(text_path, encoding="utf-8").read(), vocab_size)
    b2u = bytes_to_unicode()
    name = ["".join(b2u[b] for b in s) for s in symbols]
    tok = {"version": "1.0", "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                     "end_of_word_suffix": "", "fuse_unk": False,
                     "vocab": {n: i for i, n in enumerate(name)},
                     "merges": [f"{name[a]} {name[b]}" for a, b in merges]}}
    json.dump(tok, open(out_path, "w", encoding="utf-8"), ensure_ascii=False)
    print(f"bpe_train: {len(symbols)} tokens ({len(merges)} merges) from {text_path}")


if __name__ == "__main__":
    main()
