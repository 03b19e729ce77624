// OpenAI's official Node client against `troupe serve` on a reasoning model with tools (a
// Qwen3-shaped one: the family's tokenizer and a template that opens <think> in the generation
// prompt and writes hermes tool calls): streamed reasoning_content joins to the message's, and
// a tool call makes a round trip (the call, the tool's result sent back, an answer).
// Exits non-zero (with the reason) on any mismatch.
// Usage: node reasoning_tools.mjs BASE_URL MODEL END_OF_THINKING_TOKEN_ID
import OpenAI from "openai";
import assert from "node:assert/strict";

const [baseURL, model, endThink] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: "unused", maxRetries: 0 });

// The prompt leaves the reasoning open: a random model's short answer is all reasoning.
const question = [{ role: "user", content: "What is 2+2?" }];
const whole = await client.chat.completions.create({ model, messages: question, max_tokens: 12, temperature: 0 });
const message = whole.choices[0].message;
assert.equal(typeof message.reasoning_content, "string", "message.reasoning_content");
assert.ok(message.reasoning_content.length > 0, "the open reasoning is reasoning_content");
let reasoning = "";
let content = "";
const stream = await client.chat.completions.create({ model, messages: question, max_tokens: 12, temperature: 0, stream: true });
for await (const chunk of stream) {
  reasoning += chunk.choices[0]?.delta?.reasoning_content ?? "";
  content += chunk.choices[0]?.delta?.content ?? "";
}
assert.equal(reasoning, message.reasoning_content, "the streamed reasoning joins to the message's");
assert.equal(content, message.content ?? "");

// A tool call: </think> favoured so that the reasoning ends at once, then the call the grammar
// allows (the city an enum: the bias cannot reach into a string), one call.
const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: { type: "object", properties: { city: { enum: ["Paris", "Rome"] } }, required: ["city"], additionalProperties: false },
  },
}];
const ask = [{ role: "user", content: "What is the weather in Paris?" }];
const called = await client.chat.completions.create({
  model, messages: ask, tools, tool_choice: "required", parallel_tool_calls: false, max_tokens: 40, temperature: 0,
  logit_bias: { [endThink]: 100 },
});
const call = called.choices[0].message.tool_calls?.[0];
assert.ok(call, `a tool call: ${JSON.stringify(called.choices[0])}`);
assert.equal(called.choices[0].finish_reason, "tool_calls", JSON.stringify(called.choices[0]));
assert.equal(call.type, "function");
assert.equal(call.function.name, "get_weather");
const args = JSON.parse(call.function.arguments);
assert.ok(args.city === "Paris" || args.city === "Rome", call.function.arguments);

// The round trip: the assistant's call and the tool's result go back through the template.
const followUp = [...ask, called.choices[0].message, { role: "tool", tool_call_id: call.id, content: "18C and sunny" }];
const answered = await client.chat.completions.create({ model, messages: followUp, tools, max_tokens: 6, temperature: 0 });
assert.equal(answered.object, "chat.completion");
assert.ok(answered.usage.prompt_tokens > called.usage.prompt_tokens + 5, "the call and its result are in the prompt");

console.log(`openai reasoning and tools ok: reasoning ${JSON.stringify(message.reasoning_content)}, call ${call.function.arguments}`);
