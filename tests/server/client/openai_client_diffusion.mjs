// Drives `deltabit serve` on a block-diffusion model with the official OpenAI JavaScript client
// (tests/server/test_server_openai.cpp starts the server on the DiffusionGemma fixture and runs this with
// its base URL and a JSON file of what `deltabit run` wrote for the same prompt, seed and max_tokens).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: process.argv[2], apiKey: 'none' });
const expected = JSON.parse(readFileSync(process.argv[3], 'utf8'));  // run's --json: text, blocks, tokens
const request = { model: 'model', messages: [{ role: 'user', content: 'hello' }], max_tokens: 20, seed: 11 };

// Chat, not streamed: run's reply, whole blocks counted.
const whole = await client.chat.completions.create(request);
assert.equal(whole.choices[0].message.content, expected.text);
assert.equal(whole.choices[0].finish_reason, 'length');
assert.equal(whole.usage.completion_tokens, expected.tokens.length);
assert.equal(whole.usage.prompt_tokens, expected.prompt_tokens);

// Streamed: one content delta per committed block, the same text, usage last.
const stream = await client.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
let streamed = '', deltas = 0, usage = null, finish = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  const choice = chunk.choices[0];
  if (choice?.delta?.content) streamed += choice.delta.content, ++deltas;
  if (choice?.finish_reason) finish = choice.finish_reason;
}
assert.equal(streamed, expected.text);
assert.equal(deltas, expected.blocks);
assert.equal(finish, 'length');
assert.equal(usage.completion_tokens, expected.tokens.length);

// A sampler setting is refused as the client's typed error, naming it.
await assert.rejects(client.chat.completions.create({ ...request, temperature: 0.7 }),
                     (e) => e.status === 400 && e.param === 'temperature' && e.code === 'unsupported_parameter');

const models = await client.models.list();
assert.equal(models.data[0].decoding, 'block_diffusion');
console.log('openai client (block diffusion): all checks passed');
