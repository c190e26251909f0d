// The reference for tests/hf_tokenizer.sh: a Hugging Face tokenizer.json encoded by
// @lenml/tokenizers (transformers.js's tokenizers; launch/hf-tokenizer.sh fetches it), no
// special tokens added (no BOS), written as fgpipe tokenize writes ids: uint16 up to 65536
// tokens, else the header FGTOKU32 and uint32, little-endian.
// usage: node hf_tokenizer_reference.js HF_DIR FAMILY TEXT OUT [TEXT OUT ...] (the tokenizer loads once)
const fs = require('fs');
const path = require('path');
const [hf, family, ...files] = process.argv.slice(2);
const { TokenizerLoader } = require(path.resolve(hf, 'tokenizers', 'main.js'));
const read = (f) => JSON.parse(fs.readFileSync(path.resolve(hf, family, f), 'utf8'));
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: read('tokenizer.json'),
  tokenizerConfig: read('tokenizer_config.json'),
});
const vocab = tokenizer.model.vocab.length;
const wide = vocab > 65536, header = wide ? 8 : 0, width = wide ? 4 : 2;
for (let f = 0; f + 1 < files.length; f += 2) {
  const ids = tokenizer.encode(fs.readFileSync(files[f], 'utf8'), { add_special_tokens: false });
  const buf = Buffer.alloc(header + width * ids.length);
  if (wide) buf.write('FGTOKU32', 0, 'latin1');
  ids.forEach((t, i) => (wide ? buf.writeUInt32LE(t, header + 4 * i) : buf.writeUInt16LE(t, 2 * i)));
  fs.writeFileSync(files[f + 1], buf);
}
