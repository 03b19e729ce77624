// Encode and decode throughput of @huggingface/tokenizers on one thread, the reference
// tools/bench/tokenizers.sh holds `troupe bench tokenizer` against: the same corpus, the same
// passes (encode without special tokens; decode keeping them), timed the same way.
// usage: node bench.mjs TOKENIZER_JSON TOKENIZER_CONFIG_JSON|- TEXTS_JSON [SECONDS]
// Prints {"encode_mb_per_s": E, "decode_mb_per_s": D, "bytes": B, "tokens": T}.
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const [tokPath, cfgPath, textsPath, secondsArg] = process.argv.slice(2);
const seconds = Number(secondsArg ?? 2);
const tok = new Tokenizer(JSON.parse(readFileSync(tokPath, "utf8")), cfgPath === "-" ? {} : JSON.parse(readFileSync(cfgPath, "utf8")));
const texts = JSON.parse(readFileSync(textsPath, "utf8"));
const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, "utf8"), 0);
const ids = texts.map((t) => tok.encode(t, { add_special_tokens: false }).ids);
const tokens = ids.reduce((n, x) => n + x.length, 0);

function passesPerSecond(pass) {
  pass();  // warm: the JIT, first-use caches
  let n = 0;
  const t = process.hrtime.bigint();
  let elapsed = 0;
  do {
    pass();
    ++n;
    elapsed = Number(process.hrtime.bigint() - t) / 1e9;
  } while (elapsed < seconds || n < 2);
  return n / elapsed;
}

let sink = 0;
const encode = passesPerSecond(() => { for (const t of texts) sink += tok.encode(t, { add_special_tokens: false }).ids.length; });
const decode = passesPerSecond(() => { for (const x of ids) sink += tok.decode(x, { skip_special_tokens: false }).length; });
console.log(JSON.stringify({ encode_mb_per_s: (encode * bytes) / 1e6, decode_mb_per_s: (decode * bytes) / 1e6, bytes, tokens, checksum: sink }));
