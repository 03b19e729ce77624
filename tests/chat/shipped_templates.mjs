// The chat templates that real GGUF files carry (`tokenizer.chat_template`), as the npm package
// @huggingface/ollama-utils ships them beside Ollama's own templates (src/chat-template-automap.ts:
// one entry per Ollama library model, about a hundred families: Phi-3/4, Granite 3/4, DeepSeek
// R1/V2.5/V3, Mistral v3/v7, Command R, OLMo2, SmolLM2, Llama 4, ...). For chat_template_test.
//
// usage: node shipped_templates.mjs OUT.json
//   OUT.json: {"<model>": "<template>"}, each distinct template once (the first model carrying it).
import fs from "node:fs";
import path from "node:path";
import {fileURLToPath} from "node:url";

const [out] = process.argv.slice(2);
if (!out) {
  console.error("usage: node shipped_templates.mjs OUT.json");
  process.exit(2);
}
const here = path.dirname(fileURLToPath(import.meta.url));
const source = path.join(here, "../tokenizer/reference/node_modules/@huggingface/ollama-utils/src/chat-template-automap.ts");
const text = fs.readFileSync(source, "utf8");
// The file is one array literal after a typed declaration; the literal itself is plain JavaScript.
const marker = "OLLAMA_CHAT_TEMPLATE_MAPPING: OllamaChatTemplateMapEntry[] =";
const at = text.indexOf(marker);
if (at < 0) {
  console.error(`${source}: no ${marker}`);
  process.exit(3);
}
const entries = new Function(`return ${text.slice(at + marker.length).trim().replace(/;\s*$/, "")}`)();
const seen = new Set();
const templates = {};
for (const e of entries) {
  if (typeof e.gguf !== "string" || seen.has(e.gguf)) continue;
  seen.add(e.gguf);
  templates[e.model.replace(/^library\//, "")] = e.gguf;
}
fs.writeFileSync(out, JSON.stringify(templates));
