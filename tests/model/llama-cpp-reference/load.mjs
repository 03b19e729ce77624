// The GGUF file as node-llama-cpp's prebuilt CPU build loads it, for logprobs.mjs and
// tokenize.mjs: the file's path from the command line (usage printed, exit 2, without it), and
// exit 3 when llama.cpp refuses the file (its log says why on stderr).
import {getLlama} from "node-llama-cpp";

// The command line's arguments (the model's path first), `count` of them, or the usage and exit 2.
export function args(count, usage) {
  const a = process.argv.slice(2);
  if (a.length < count) {
    console.error(usage);
    process.exit(2);
  }
  return a;
}

export async function loadModel(modelPath, options) {
  const llama = await getLlama({gpu: false, build: "never", logLevel: "error", progressLogs: false});
  try {
    return await llama.loadModel({modelPath, ...options});
  } catch (e) {
    console.error(String(e));
    process.exit(3);
  }
}
