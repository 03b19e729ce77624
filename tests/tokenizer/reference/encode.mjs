// Encodes and decodes texts with @huggingface/tokenizers, an implementation independent of
// Troupe's, for tests/tokenizer/tokenizer_reference_test.cpp.
// usage: node encode.mjs TOKENIZER_JSON TOKENIZER_CONFIG_JSON|- TEXTS_JSON OUT_JSON
import { readFileSync, writeFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [tokPath, cfgPath, textsPath, outPath] = process.argv.slice(2);
const tokJson = JSON.parse(readFileSync(tokPath, "utf8"));
const cfgJson = cfgPath === "-" ? {} : JSON.parse(readFileSync(cfgPath, "utf8"));
const tok = new Tokenizer(tokJson, cfgJson);
const texts = JSON.parse(readFileSync(textsPath, "utf8"));
const out = texts.map((text) => {
  const plain = tok.encode(text, { add_special_tokens: false }).ids;
  const special = tok.encode(text, { add_special_tokens: true }).ids;
  return {
    ids: plain.map(Number),
    ids_with_special: special.map(Number),
    decoded: tok.decode(plain, { skip_special_tokens: false }),
  };
});
writeFileSync(outPath, JSON.stringify(out));
