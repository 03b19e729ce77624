// OpenAI's official Node client against a running `troupe serve`: completions and chat,
// streaming and not, plus an error. Exits non-zero (with the reason) on any mismatch.
// Usage: node client_test.mjs BASE_URL MODEL
import OpenAI from "openai";
import assert from "node:assert/strict";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: "unused", maxRetries: 0 });

const models = await client.models.list();
assert.equal(models.data[0].id, model);

const c = await client.completions.create({ model, prompt: "The actor model", max_tokens: 8, temperature: 0 });
assert.equal(c.object, "text_completion");
assert.ok(c.usage.completion_tokens >= 1 && c.usage.completion_tokens <= 8);
if (c.choices[0].finish_reason === "length") assert.equal(c.usage.completion_tokens, 8);
assert.ok(typeof c.choices[0].text === "string");

let streamed = "";
let finish = null;
const cs = await client.completions.create({ model, prompt: "The actor model", max_tokens: 8, temperature: 0, stream: true });
for await (const chunk of cs) {
  streamed += chunk.choices[0]?.text ?? "";
  finish = chunk.choices[0]?.finish_reason ?? finish;
}
assert.equal(streamed, c.choices[0].text, "a stream joins to the non-streamed text");
assert.equal(finish, c.choices[0].finish_reason);

const messages = [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello there" }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0, seed: 7 });
assert.equal(chat.object, "chat.completion");
assert.equal(chat.choices[0].message.role, "assistant");

let chatStreamed = "";
let usage = null;
const st = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0, seed: 7, stream: true,
                                                  stream_options: { include_usage: true } });
for await (const chunk of st) {
  chatStreamed += chunk.choices[0]?.delta?.content ?? "";
  if (chunk.usage) usage = chunk.usage;
}
assert.equal(chatStreamed, chat.choices[0].message.content);
assert.equal(usage.completion_tokens, chat.usage.completion_tokens);
assert.equal(usage.prompt_tokens, chat.usage.prompt_tokens);

await assert.rejects(client.completions.create({ model, prompt: "x", temperature: "hot" }), (e) => {
  assert.equal(e.status, 400);
  assert.equal(e.error?.param ?? e.param, "temperature");
  return true;
});

console.log(`openai client ok: completion ${JSON.stringify(c.choices[0].text)}, chat ${JSON.stringify(chat.choices[0].message.content)}`);
