// Structured output from a running `troupe serve`, checked by tools that share no code with
// Troupe: every completed output of every schema in tests/structured/corpus/schemas.json (greedy;
// sampled for every other one) validates with ajv (draft 2020-12, ajv-formats); regex and GBNF outputs match
// JavaScript regular expressions; choices are one of the choices; OpenAI's Node client parses
// (chat.completions.parse, streamed and not); unsupported keywords and bombs are 400s naming
// the field. Exits non-zero with the reason on any failure.
// Usage: node structured_test.mjs BASE_URL MODEL SCHEMAS_JSON
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import OpenAI from "openai";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

const [baseURL, model, corpusPath] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: "unused", maxRetries: 0, timeout: 600000 });
const corpus = JSON.parse(readFileSync(corpusPath, "utf8"));
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

// At most `width` promises at once, in order of `jobs`.
async function pool(jobs, width) {
  const out = new Array(jobs.length);
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < jobs.length) {
      const i = next++;
      out[i] = await jobs[i]();
    }
  }));
  return out;
}

// ---- the corpus, greedy and sampled ----
const messages = (name) => [{ role: "user", content: `Write the ${name} as JSON.` }];
const jobs = [];
corpus.forEach((entry, i) => {
  for (const sampled of i % 2 ? [false, true] : [false]) {  // greedy for all, sampled for every other
    jobs.push(async () => {
      const r = await client.chat.completions.create({
        model, messages: messages(entry.name), max_tokens: 192,
        ...(sampled ? { temperature: 0.8, top_p: 0.95, seed: i } : { temperature: 0 }),
        response_format: { type: "json_schema", json_schema: { name: `s${i}`, strict: true, schema: entry.schema } },
      });
      return { entry, sampled, text: r.choices[0].message.content, finish: r.choices[0].finish_reason };
    });
  }
});
const results = await pool(jobs, 8);
let stopped = 0, cut = 0;
for (const { entry, sampled, text, finish } of results) {
  const what = `${entry.name} (${sampled ? "sampled" : "greedy"}): ${JSON.stringify(text)}`;
  if (finish === "length") { ++cut; continue; }
  assert.equal(finish, "stop", what);
  let value;
  try { value = JSON.parse(text); } catch (e) { assert.fail(`${what}: not JSON: ${e.message}`); }
  const validate = ajv.compile(entry.schema);
  assert.ok(validate(value), `${what}: ${ajv.errorsText(validate.errors)}`);
  ++stopped;
}
assert.ok(stopped >= results.length * 0.6, `only ${stopped} of ${results.length} outputs completed within 192 tokens`);

// ---- regex, GBNF and choices, on /v1/completions ----
const prompt = "And the LORD spake unto Moses, saying,";
const pattern = "[A-Z][a-z]{1,8} (son|daughter) of [A-Z][a-z]{1,8}\\.";
const gbnf = 'root ::= verse ("; " verse){0,2} "."\nverse ::= [A-Z] [a-z]{0,6} (" " [a-z]{1,6}){1,4}';
const gbnfAsRegex = /^[A-Z][a-z]{0,6}( [a-z]{1,6}){1,4}(; [A-Z][a-z]{0,6}( [a-z]{1,6}){1,4}){0,2}\.$/u;
for (let seed = 0; seed < 6; ++seed) {
  const sampling = { temperature: 0.9, seed, max_tokens: 80 };
  const re = await client.completions.create({ model, prompt, ...sampling, guided_regex: pattern });
  if (re.choices[0].finish_reason === "stop") assert.match(re.choices[0].text, new RegExp(`^(?:${pattern})$`, "u"));
  const g = await client.completions.create({ model, prompt, ...sampling, structured_outputs: { grammar: gbnf } });
  if (g.choices[0].finish_reason === "stop") assert.match(g.choices[0].text, gbnfAsRegex);
  const c = await client.completions.create({ model, prompt, ...sampling, guided_choice: ["yea", "nay", "it is written"] });
  assert.ok(["yea", "nay", "it is written"].includes(c.choices[0].text), c.choices[0].text);
}

// ---- the client's structured-output helper, streamed and not ----
const person = {
  type: "object", additionalProperties: false, required: ["name", "age"],
  properties: { name: { type: "string", maxLength: 16 }, age: { type: "integer", minimum: 0, maximum: 120 } },
};
const response_format = { type: "json_schema", json_schema: { name: "person", strict: true, schema: person } };
const parsed = await client.chat.completions.parse({ model, messages: messages("person"), max_tokens: 64, temperature: 0,
                                                     response_format });
const msg = parsed.choices[0].message;
assert.equal(parsed.choices[0].finish_reason, "stop");
assert.deepEqual(msg.parsed, JSON.parse(msg.content));
assert.ok(ajv.validate(person, msg.parsed), ajv.errorsText());
const stream = client.chat.completions.stream({ model, messages: messages("person"), max_tokens: 64, temperature: 0,
                                                response_format });
const final = await stream.finalChatCompletion();
// (The stream helper fills `parsed` only for its own zod formats; a plain JSON Schema's content
// is parsed here.)
assert.deepEqual(JSON.parse(final.choices[0].message.content), msg.parsed, "a stream parses to the non-streamed object");

// ---- refusals ----
const refused = async (body, param) => {
  await assert.rejects(client.chat.completions.create({ model, messages: messages("x"), max_tokens: 8, ...body }), (e) => {
    assert.equal(e.status, 400, JSON.stringify(e.error));
    assert.equal(e.error?.param ?? e.param, param);
    return true;
  });
};
const schemaFormat = (schema) => ({ response_format: { type: "json_schema", json_schema: { name: "x", schema } } });
await refused(schemaFormat({ type: "object", properties: { a: { type: "string", contentMediaType: "x" } } }),
              "response_format.json_schema.schema");
await refused(schemaFormat({ type: "string", maxLength: 900000 }), "response_format.json_schema.schema");  // a bomb
await refused(schemaFormat({ enum: Array.from({ length: 100000 }, (_, i) => `value number ${i}`) }),
              "response_format.json_schema.schema");
await refused({ guided_regex: "(a|b|c|d)*a(a|b|c|d){40}" }, "guided_regex");  // the DFA would explode
await refused({ guided_grammar: "root ::= root \"a\" | \"a\"" }, "guided_grammar");  // left recursion

console.log(`structured output ok: ${stopped} outputs validated by ajv, ${cut} cut by max_tokens, of ${results.length}`);
