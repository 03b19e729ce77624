// Encodes and decodes texts with @huggingface/tokenizers, an implementation independent of
// Troupe's, for tests/tokenizer/tokenizer_reference_test.cpp.
// usage: node encode.mjs TOKENIZER_JSON TOKENIZER_CONFIG_JSON|- TEXTS_JSON OUT_JSON
// Each text's ids without special tokens and its decoded text; with them (the post-processor's
// tokens around the same ids) for every 10th text, null for the others.
import { readFileSync, writeFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [tokPath, cfgPath, textsPath, outPath] = process.argv.slice(2);
const tokJson = JSON.parse(readFileSync(tokPath, "utf8"));
const cfgJson = cfgPath === "-" ? {} : JSON.parse(readFileSync(cfgPath, "utf8"));
const tok = new Tokenizer(tokJson, cfgJson);
const texts = JSON.parse(readFileSync(textsPath, "utf8"));
const out = texts.map((text, i) => {
  const plain = tok.encode(text, { add_special_tokens: false }).ids;
  const special = i % 10 === 0 ? tok.encode(text, { add_special_tokens: true }).ids.map(Number) : null;
  return {
    ids: plain.map(Number),
    ids_with_special: special,
    decoded: plain.length ? tok.decode(plain, { skip_special_tokens: false }) : "",  // the library refuses to decode no ids
  };
});
writeFileSync(outPath, JSON.stringify(out));
