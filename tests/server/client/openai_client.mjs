// Drives `deltabit serve` with the official OpenAI JavaScript client (tests/server/test_server_openai.cpp
// starts the server and runs this with its base URL). Greedy replies from a random-weight model: the
// checks compare the server with itself across endpoints and turns, never with fixed text.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: process.argv[2], apiKey: process.argv[3] || 'none' });
const model = 'model';
const greedy = { model, temperature: 0, max_tokens: 8 };

// Chat, not streamed.
const hello = [{ role: 'user', content: 'Hello' }];
const whole = await client.chat.completions.create({ ...greedy, messages: hello });
assert.equal(whole.object, 'chat.completion');
assert.equal(whole.choices[0].finish_reason, 'length');
assert.equal(whole.usage.completion_tokens, 8);
assert.equal(whole.usage.prompt_tokens, 'user<Hello>assistant<'.length);

// Streamed: the deltas add up to the same reply; usage comes last.
const stream = await client.chat.completions.create({ ...greedy, messages: hello, stream: true,
                                                      stream_options: { include_usage: true } });
let streamed = '', usage = null, finish = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  const choice = chunk.choices[0];
  if (choice?.delta?.content) streamed += choice.delta.content;
  if (choice?.finish_reason) finish = choice.finish_reason;
}
assert.equal(streamed, whole.choices[0].message.content);
assert.equal(finish, 'length');
assert.equal(usage.completion_tokens, 8);

// Logprobs: one entry per token, the chosen token first among its alternatives (greedy).
const scored = await client.chat.completions.create({ ...greedy, messages: hello, logprobs: true, top_logprobs: 3 });
const entries = scored.choices[0].logprobs.content;
assert.equal(entries.length, 8);
for (const e of entries) {
  assert.equal(e.top_logprobs.length, 3);
  assert.ok(e.logprob <= 0);
  assert.equal(e.top_logprobs[0].logprob, e.logprob);
}

// A follow-up turn reuses the first: cached_tokens reported, more than the first prompt.
const followUp = await client.chat.completions.create({ ...greedy, messages: [
  ...hello, { role: 'assistant', content: whole.choices[0].message.content }, { role: 'user', content: 'More' }] });
// At least the first prompt; more where the reply's text re-renders as the tokens it came from (random
// weights write bytes that are not UTF-8, which come back as U+FFFD and differ from there).
assert.ok(followUp.usage.prompt_tokens_details.cached_tokens >= 'user<Hello>assistant<'.length,
          JSON.stringify(followUp.usage));

// Tools round trip: the client's tool call and the tool's answer go back through the template; a
// named tool_choice starts the call, which random weights leave malformed: reported as text.
const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
  properties: { city: { type: 'string' } } } } }];
const withTool = await client.chat.completions.create({ ...greedy, tools, tool_choice: { type: 'function',
  function: { name: 'get_weather' } }, messages: [
  { role: 'user', content: 'Weather in Oslo?' },
  { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function',
    function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
  { role: 'tool', tool_call_id: 'c1', content: 'sunny' }] });
assert.equal(withTool.choices[0].finish_reason, 'malformed_tool_call');
assert.ok(withTool.choices[0].message.content.startsWith('<tool_call>'));

// Completions with echo and logprobs, max_tokens 0: lm-evaluation-harness's loglikelihood request.
const echo = await client.completions.create({ model, prompt: 'The sky is', max_tokens: 0, echo: true, logprobs: 1 });
assert.equal(echo.choices[0].text, 'The sky is');
assert.equal(echo.choices[0].logprobs.token_logprobs.length, 'The sky is'.length);
assert.equal(echo.choices[0].logprobs.token_logprobs[0], null);
assert.ok(echo.choices[0].logprobs.token_logprobs.slice(1).every((x) => x <= 0));

// Errors come back as the client's typed errors.
await assert.rejects(client.chat.completions.create({ ...greedy, messages: hello, temperature: 7 }),
                     (e) => e.status === 400 && e.param === 'temperature');

const models = await client.models.list();
assert.equal(models.data[0].id, model);
console.log('openai client: all checks passed');
