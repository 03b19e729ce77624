// llama.cpp's next-token distribution at every position of token sequences, through
// node-llama-cpp's prebuilt CPU build: the independent reference Troupe's model families are
// checked against (tests/model/llama_cpp_reference_test.cpp).
//
// usage: node logprobs.mjs MODEL.gguf REQUEST.json OUT.bin
//   REQUEST.json: {"sequences": [[token, ...], ...], "context": N, "vocab": V, "every": K}
//   OUT.bin: for each sequence, for each of its positions whose index is a multiple of K (every
//   one when K is left out), the log-probabilities of the whole vocabulary as float32
//   (little-endian), position after position. (node-llama-cpp sorts each distribution it gives:
//   with a vocabulary of 262,144, a third of a second a position.)
// Prints {"positions": P, "fewest": F} when done: F, the fewest tokens any distribution gave
// (V when every one was whole). Exits 3 if the model does not load (llama.cpp
// refused it; its log says why on stderr).
import fs from "node:fs";
import {args, loadModel} from "./load.mjs";

const [modelPath, requestPath, outPath] = args(3, "usage: node logprobs.mjs MODEL.gguf REQUEST.json OUT.bin");
const request = JSON.parse(fs.readFileSync(requestPath, "utf8"));
const model = await loadModel(modelPath, {useMmap: true});
const vocab = request.vocab, every = request.every ?? 1;
// F32 keys and values and no flash attention: llama.cpp rounds nothing Troupe keeps in float.
const context = await model.createContext({contextSize: request.context, batchSize: 512, sequences: 1, threads: 2,
  flashAttention: false, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
const out = fs.openSync(outPath, "w");
let positions = 0, fewest = vocab;
for (const tokens of request.sequences) {
  const sequence = context.getSequence();
  // temperature 1 and no top-k/top-p/min-p: the softmax of the logits, every token kept.
  const items = tokens.map((t, i) =>
    i % every === 0 ? [t, {generateNext: {probabilities: true, options: {temperature: 1, topK: 0, topP: 1, minP: 0}}}] : t);
  const results = await sequence.controlledEvaluate(items);
  for (const r of results) {
    if (r?.next?.probabilities === undefined) continue;
    const p = r.next.probabilities;
    fewest = Math.min(fewest, p.size);
    const row = new Float32Array(vocab).fill(-Infinity);
    for (const [token, prob] of p) row[token] = Math.log(prob);
    fs.writeSync(out, Buffer.from(row.buffer));
    ++positions;
  }
  await sequence.clearHistory();
  sequence.dispose();
}
fs.closeSync(out);
console.log(JSON.stringify({positions, fewest}));
await context.dispose();
await model.dispose();
