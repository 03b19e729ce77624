// Structured output from a running `troupe serve`, checked by tools that share no code with
// Troupe: every completed output of every schema in tests/structured/corpus/schemas.json (greedy;
// sampled for every third one) validates with ajv (draft 2020-12, ajv-formats); regex and GBNF outputs match
// JavaScript regular expressions; choices are one of the choices; OpenAI's Node client parses
// (chat.completions.parse, streamed and not); unsupported keywords and bombs are 400s naming
// the field; forced tool calls parse with the client (parse, stream helper, raw deltas), their
// arguments validate, and a tool result sent back gets an answer. Exits non-zero with the reason on any failure.
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
  for (const sampled of i % 3 === 1 ? [false, true] : [false]) {  // greedy for all, sampled for every third
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

// ---- tool calls: forced, parsed by the client, streamed and not; the result sent back ----
const weather = {
  type: "object", additionalProperties: false, required: ["city", "days"],
  properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer", minimum: 1, maximum: 7 } },
};
const clock = { type: "object", additionalProperties: false, required: ["zone"], properties: { zone: { enum: ["UTC", "CET"] } } };
const schemas = { get_weather: weather, get_time: clock };
const tools = Object.entries(schemas).map(([name, parameters]) => ({
  type: "function", function: { name, description: `the ${name.slice(4)}`, parameters, strict: true } }));
const ask = [{ role: "user", content: "What is the weather in Paris this week?" }];
const named = { type: "function", function: { name: "get_weather" } };
let calls = 0;
for (const tool_choice of ["required", named]) {
  // One call: models/kjv, knowing nothing of tools, would otherwise go on calling to max_tokens.
  const body = { model, messages: ask, tools, tool_choice, parallel_tool_calls: false, max_tokens: 96, temperature: 0 };
  // The client's helper parses strict tools' arguments itself.
  const whole = await client.chat.completions.parse(body);
  const m = whole.choices[0].message;
  assert.equal(whole.choices[0].finish_reason, "tool_calls", JSON.stringify(whole));
  assert.equal(m.content, null);
  assert.ok(m.tool_calls.length >= 1);
  assert.equal(m.tool_calls.length, 1);
  if (tool_choice === named) assert.equal(m.tool_calls[0].function.name, "get_weather");
  for (const c of m.tool_calls) {
    assert.equal(c.type, "function");
    assert.match(c.id, /^call_/);
    assert.deepEqual(c.function.parsed_arguments, JSON.parse(c.function.arguments));
    assert.ok(ajv.validate(schemas[c.function.name], c.function.parsed_arguments), `${c.function.arguments}: ${ajv.errorsText()}`);
    ++calls;
  }
  // Streamed: the deltas as OpenAI sends them (id, type and name first, then argument
  // fragments), reassembled by hand and by the client's stream helper, give the same calls.
  const chunks = await client.chat.completions.create({ ...body, stream: true });
  const byHand = [];
  let finish = null;
  for await (const chunk of chunks) {
    const choice = chunk.choices[0];
    if (choice?.finish_reason) finish = choice.finish_reason;
    for (const d of choice?.delta?.tool_calls ?? []) {
      if (d.id !== undefined) {
        assert.equal(d.index, byHand.length);
        assert.equal(d.type, "function");
        assert.equal(d.function.arguments, "");
        byHand.push({ name: d.function.name, arguments: "" });
      } else {
        assert.equal(d.function.name, undefined);
        byHand[d.index].arguments += d.function.arguments;
      }
    }
  }
  assert.equal(finish, "tool_calls");
  assert.deepEqual(byHand, m.tool_calls.map((c) => ({ name: c.function.name, arguments: c.function.arguments })));
  const helper = await client.chat.completions.stream(body).finalChatCompletion();
  assert.deepEqual(helper.choices[0].message.tool_calls.map((c) => [c.function.name, c.function.arguments]),
                   m.tool_calls.map((c) => [c.function.name, c.function.arguments]));
  // The round trip: the calls and their results go back, and the model answers (in text: with
  // "auto" its answer is parsed for calls in its template's format, and it makes none).
  const results = m.tool_calls.map((c) => ({ role: "tool", tool_call_id: c.id, content: JSON.stringify({ ok: c.function.name }) }));
  const assistant = { role: "assistant", content: null,
                      tool_calls: m.tool_calls.map(({ id, type, function: f }) => ({ id, type, function: { name: f.name, arguments: f.arguments } })) };
  const loose = tools.map((t) => ({ ...t, function: { ...t.function, strict: false } }));
  for (const next of [{ tool_choice: "none" }, { tools: loose, tool_choice: "auto" }]) {
    const answer = await client.chat.completions.create({ model, messages: [...ask, assistant, ...results], tools, max_tokens: 16,
                                                          temperature: 0, ...next });
    assert.equal(typeof answer.choices[0].message.content, "string", JSON.stringify(answer));
    assert.ok(["stop", "length"].includes(answer.choices[0].finish_reason));
    assert.ok(answer.usage.prompt_tokens > 40, "the prompt holds the tools, the call and its result");
  }
}
// Strict tools under "auto": models/kjv writes Hermes calls, so a free answer's calls are
// constrained; whatever it writes, every call it makes validates.
for (let seed = 0; seed < 4; ++seed) {
  const free = await client.chat.completions.create({ model, messages: ask, tools, max_tokens: 64, temperature: 1.0, seed });
  for (const c of free.choices[0].message.tool_calls ?? []) {
    if (free.choices[0].finish_reason === "length") break;
    assert.ok(ajv.validate(schemas[c.function.name], JSON.parse(c.function.arguments)), c.function.arguments);
    ++calls;
  }
}

// Parallel calls allowed: every call but one cut by max_tokens validates.
const many = await client.chat.completions.create({ model, messages: ask, tools, tool_choice: "required", max_tokens: 64, temperature: 0 });
const manyCalls = many.choices[0].message.tool_calls;
assert.ok(manyCalls.length >= 1);
manyCalls.forEach((c, i) => {
  if (i === manyCalls.length - 1 && many.choices[0].finish_reason === "length") return;
  assert.ok(ajv.validate(schemas[c.function.name], JSON.parse(c.function.arguments)), c.function.arguments);
  ++calls;
});

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
await refused({ tools, tool_choice: { type: "function", function: { name: "nope" } } }, "tool_choice.function.name");
await refused({ tools: [{ type: "function", function: { name: "bad name" } }] }, "tools[0].function.name");
await refused({ tools, tool_choice: "required", ...schemaFormat(person) }, "tool_choice");

console.log(`structured output ok: ${stopped} outputs validated by ajv, ${cut} cut by max_tokens, of ${results.length}; ` +
            `${calls} tool calls validated`);
