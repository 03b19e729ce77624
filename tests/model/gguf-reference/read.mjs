// Prints what Hugging Face's GGUF reader (@huggingface/gguf) finds in a file, as JSON on one
// line: its metadata and its tensor table (names, dimensions innermost first, ggml types,
// absolute data offsets). tests/model/gguf_reference_test.cpp compares Troupe's reader with it.
import { gguf } from "@huggingface/gguf";
import { resolve } from "node:path";

const file = process.argv[2];
if (!file) {
  console.error("usage: node read.mjs FILE.gguf");
  process.exit(2);
}
const { metadata, tensorInfos, tensorDataOffset } = await gguf(resolve(file), { allowLocalFile: true });
const big = (_, v) => (typeof v === "bigint" ? Number(v) : v);
const tensors = tensorInfos.map((t) => ({
  name: t.name,
  ne: t.shape.map(Number),
  type: t.dtype,
  offset: Number(tensorDataOffset + t.offset),
}));
process.stdout.write(JSON.stringify({ metadata, tensors }, big) + "\n");
