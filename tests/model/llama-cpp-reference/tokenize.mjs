// llama.cpp's tokenizer on a GGUF file's vocabulary, through node-llama-cpp's prebuilt CPU build
// (vocabulary only, no weights): the ids of each text, special tokens in the text parsed as
// such, nothing added. For tests/model/llama_cpp_reference_test.cpp.
//
// usage: node tokenize.mjs MODEL.gguf TEXTS.json OUT.json
//   TEXTS.json: a list of strings; OUT.json: a list of id lists, one per text.
// Exits 3 if the vocabulary does not load (llama.cpp refused it; its log says why on stderr).
import fs from "node:fs";
import {args, loadModel} from "./load.mjs";

const [modelPath, textsPath, outPath] = args(3, "usage: node tokenize.mjs MODEL.gguf TEXTS.json OUT.json");
const texts = JSON.parse(fs.readFileSync(textsPath, "utf8"));
const model = await loadModel(modelPath, {vocabOnly: true});
fs.writeFileSync(outPath, JSON.stringify(texts.map((t) => Array.from(model.tokenize(t, true), Number))));
await model.dispose();
