// gmlx serve's Anthropic Messages route through the official `@anthropic-ai/sdk` (node:test):
//  - messages.create, non-stream and through the SDK's .stream() helper (text events and
//    finalMessage()), gives at temperature 0 the text of the OpenAI route for the same
//    conversation and of `gmlx run --system S -p PROMPT --temp 0` (the independent reference);
//    usage.input_tokens / output_tokens equal the OpenAI route's prompt / completion tokens;
//  - content as a string or as text blocks, system as a string or as blocks, earlier turns;
//  - stop_sequences (stop_reason "stop_sequence", stop_sequence named, text cut), max_tokens
//    (stop_reason "max_tokens", the first N tokens of gmlx run -n N);
//  - the raw event stream: event names equal each data's type, in the Messages order;
//  - count_tokens equals the OpenAI route's prompt_tokens and gmlx template + tokenize;
//  - tool definitions and a tool_use / tool_result exchange are accepted;
//  - errors: the Anthropic shape {"type": "error", "error": {"type", "message"}} as the SDK's
//    typed errors (BadRequestError, AuthenticationError).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { URL_MAIN, KEY, MODEL_ID, runRef, chatRef, promptTokens, post, readSSE, isAnthropicError } from './lib.mjs';

const client = new Anthropic({ baseURL: URL_MAIN, apiKey: KEY || 'no-key', maxRetries: 0, timeout: 30000 });
const P_JSON = 'Extract name and city: In Dublin, Paula turned 54.';
const P_ADD = 'Q: 605+877=? A:';
const SYSTEM = 'You are terse.';
const T = { timeout: 60000 };

/** the OpenAI route's answer for the same conversation (raw fetch, temperature 0) */
async function openaiChat(messages, max_tokens, extra = {}) {
  const r = await post('/v1/chat/completions', { messages, temperature: 0, max_tokens, ...extra });
  assert.equal(r.status, 200, r.text);
  return r.json;
}

function textOf(msg) {
  assert.ok(Array.isArray(msg.content), 'content is a list of blocks');
  return msg.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
}

function checkMessage(m) {
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(typeof m.id, 'string');
  assert.ok(m.id.length > 0);
  assert.equal(typeof m.model, 'string');
  assert.ok(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'].includes(m.stop_reason), `stop_reason ${m.stop_reason}`);
  assert.equal(typeof m.usage.input_tokens, 'number');
  assert.equal(typeof m.usage.output_tokens, 'number');
  for (const b of m.content) assert.ok(['text', 'tool_use', 'thinking'].includes(b.type), `block type ${b.type}`);
}

test('create (system + user) equals gmlx run --system and the OpenAI route; usage matches', T, async () => {
  for (const prompt of [P_JSON, P_ADD]) {
    const ref = await runRef(prompt, { n: 48, system: SYSTEM });
    const m = await client.messages.create({ model: MODEL_ID, max_tokens: 48, temperature: 0, system: SYSTEM, messages: [{ role: 'user', content: prompt }] });
    checkMessage(m);
    assert.equal(textOf(m), ref.text);
    assert.equal(m.stop_reason, 'end_turn');
    assert.equal(m.stop_sequence, null);
    const o = await openaiChat([{ role: 'system', content: SYSTEM }, { role: 'user', content: prompt }], 48);
    assert.equal(textOf(m), o.choices[0].message.content);
    assert.equal(m.usage.input_tokens, o.usage.prompt_tokens);
    assert.equal(m.usage.output_tokens, o.usage.completion_tokens);
    assert.equal(m.usage.input_tokens, ref.nPrompt);
  }
});

test('text blocks and system blocks give what plain strings give', T, async () => {
  const plain = await client.messages.create({ model: MODEL_ID, max_tokens: 48, temperature: 0, system: SYSTEM, messages: [{ role: 'user', content: P_JSON }] });
  const blocks = await client.messages.create({
    model: MODEL_ID, max_tokens: 48, temperature: 0,
    system: [{ type: 'text', text: SYSTEM }],
    messages: [{ role: 'user', content: [{ type: 'text', text: P_JSON }] }],
  });
  assert.equal(textOf(blocks), textOf(plain));
  assert.equal(blocks.usage.input_tokens, plain.usage.input_tokens);
});

test('earlier turns: equal gmlx template | gmlx run --raw and the OpenAI route', T, async () => {
  const turns = [
    { role: 'user', content: P_ADD },
    { role: 'assistant', content: '1482' },
    { role: 'user', content: 'Extract name and city: In Rome, Ada turned 31.' },
  ];
  const ref = await chatRef(turns, { n: 48 });
  const m = await client.messages.create({ model: MODEL_ID, max_tokens: 48, temperature: 0, messages: turns });
  assert.equal(textOf(m), ref.text);
  assert.equal(m.usage.input_tokens, ref.nPrompt);
  const o = await openaiChat(turns, 48);
  assert.equal(textOf(m), o.choices[0].message.content);
});

test('.stream() helper: text events and finalMessage() equal the non-stream message', T, async () => {
  const params = { model: MODEL_ID, max_tokens: 48, temperature: 0, system: SYSTEM, messages: [{ role: 'user', content: P_JSON }] };
  const full = await client.messages.create(params);
  const stream = client.messages.stream(params);
  let text = '';
  stream.on('text', (d) => { text += d; });
  const fin = await stream.finalMessage();
  checkMessage(fin);
  assert.equal(text, textOf(full));
  assert.equal(textOf(fin), textOf(full));
  assert.equal(fin.stop_reason, full.stop_reason);
  assert.equal(fin.usage.output_tokens, full.usage.output_tokens);
  assert.equal(fin.usage.input_tokens, full.usage.input_tokens);
});

test('max_tokens N: stop_reason "max_tokens", the first N tokens of gmlx run -n N (also streamed)', T, async () => {
  const ref = await runRef(P_JSON, { n: 5 });
  const m = await client.messages.create({ model: MODEL_ID, max_tokens: 5, temperature: 0, messages: [{ role: 'user', content: P_JSON }] });
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(textOf(m), ref.text);
  assert.equal(m.usage.output_tokens, 5);
  const fin = await client.messages.stream({ model: MODEL_ID, max_tokens: 5, temperature: 0, messages: [{ role: 'user', content: P_JSON }] }).finalMessage();
  assert.equal(fin.stop_reason, 'max_tokens');
  assert.equal(textOf(fin), ref.text);
  assert.equal(fin.usage.output_tokens, 5);
});

test('stop_sequences: stop_reason "stop_sequence", the sequence named, the text cut (also streamed)', T, async () => {
  const params = { model: MODEL_ID, max_tokens: 48, temperature: 0, messages: [{ role: 'user', content: P_JSON }] };
  const m = await client.messages.create({ ...params, stop_sequences: ['"city"', 'zzz'] });
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, '"city"');
  assert.equal(textOf(m), '{"name": "Paula", ');
  const fin = await client.messages.stream({ ...params, stop_sequences: ['"city"'] }).finalMessage();
  assert.equal(fin.stop_reason, 'stop_sequence');
  assert.equal(fin.stop_sequence, '"city"');
  assert.equal(textOf(fin), '{"name": "Paula", ');
  // unmatched: end_turn and the whole answer
  const u = await client.messages.create({ ...params, stop_sequences: ['zzz'] });
  assert.equal(u.stop_reason, 'end_turn');
  assert.equal(u.stop_sequence, null);
  assert.equal(textOf(u), '{"name": "Paula", "city": "Dublin"}');
});

test('raw event stream: names equal each data type, in the Messages order', T, async () => {
  const res = await fetch(URL_MAIN + '/v1/messages', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', ...(KEY ? { 'x-api-key': KEY } : {}) },
    body: JSON.stringify({ model: MODEL_ID, max_tokens: 48, temperature: 0, stream: true, messages: [{ role: 'user', content: P_ADD }] }),
    signal: AbortSignal.timeout(30000),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') || '', /^text\/event-stream/);
  const { events } = await readSSE(res);
  const evs = events.filter((e) => e.data !== undefined).map((e) => ({ name: e.event, data: JSON.parse(e.data) }));
  for (const e of evs) assert.equal(e.name, e.data.type, 'event: NAME equals the data\'s type');
  const names = evs.map((e) => e.name).filter((n) => n !== 'ping');
  assert.equal(names[0], 'message_start');
  assert.equal(names.at(-1), 'message_stop');
  assert.equal(names.at(-2), 'message_delta');
  assert.equal(names[1], 'content_block_start');
  assert.equal(names.at(-3), 'content_block_stop');
  assert.ok(names.slice(2, -3).every((n) => n === 'content_block_delta'), names.join(','));
  const start = evs[0].data.message;
  assert.equal(start.role, 'assistant');
  assert.deepEqual(start.content, []);
  const text = evs.filter((e) => e.name === 'content_block_delta').map((e) => { assert.equal(e.data.delta.type, 'text_delta'); return e.data.delta.text; }).join('');
  const ref = await runRef(P_ADD, { n: 48 });
  assert.equal(text, ref.text);
  const md = evs.find((e) => e.name === 'message_delta').data;
  assert.equal(md.delta.stop_reason, 'end_turn');
  assert.equal(md.usage.output_tokens, ref.nGen);
});

test('count_tokens equals the OpenAI route\'s prompt_tokens and gmlx template + tokenize', T, async () => {
  const convs = [
    { system: SYSTEM, messages: [{ role: 'user', content: P_JSON }] },
    { messages: [{ role: 'user', content: P_ADD }, { role: 'assistant', content: '1482' }, { role: 'user', content: 'And 12+30?' }] },
  ];
  for (const c of convs) {
    const r = await client.messages.countTokens({ model: MODEL_ID, ...c });
    assert.equal(typeof r.input_tokens, 'number');
    const oaMessages = [...(c.system ? [{ role: 'system', content: c.system }] : []), ...c.messages];
    const o = await openaiChat(oaMessages, 1);
    assert.equal(r.input_tokens, o.usage.prompt_tokens);
    assert.equal(r.input_tokens, await promptTokens(oaMessages));
  }
});

const TOOLS = [{
  name: 'get_weather',
  description: 'The current weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];

test('tool definitions accepted; count_tokens with tools equals usage.input_tokens', T, async () => {
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const m = await client.messages.create({ model: MODEL_ID, max_tokens: 16, temperature: 0, tools: TOOLS, messages });
  checkMessage(m);
  const c = await client.messages.countTokens({ model: MODEL_ID, tools: TOOLS, messages });
  assert.equal(c.input_tokens, m.usage.input_tokens);
  const c0 = await client.messages.countTokens({ model: MODEL_ID, messages });
  assert.ok(c.input_tokens >= c0.input_tokens);
  if (m.stop_reason === 'tool_use') assert.ok(m.content.some((b) => b.type === 'tool_use' && b.name === 'get_weather'));
});

test('a tool_use / tool_result exchange is accepted and answered', T, async () => {
  const messages = [
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: '18 C, sunny' }] },
  ];
  const m = await client.messages.create({ model: MODEL_ID, max_tokens: 16, temperature: 0, tools: TOOLS, messages });
  checkMessage(m);
  const c = await client.messages.countTokens({ model: MODEL_ID, tools: TOOLS, messages });
  assert.equal(c.input_tokens, m.usage.input_tokens);
  const c1 = await client.messages.countTokens({ model: MODEL_ID, tools: TOOLS, messages: messages.slice(0, 1) });
  assert.ok(c.input_tokens > c1.input_tokens, 'the tool exchange is in the prompt');
  // tool_result content as text blocks
  const m2 = await client.messages.create({
    model: MODEL_ID, max_tokens: 16, temperature: 0, tools: TOOLS,
    messages: [...messages.slice(0, 2), { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: [{ type: 'text', text: '18 C, sunny' }] }] }],
  });
  assert.equal(textOf(m2), textOf(m));
});

test('errors: Anthropic shape as the SDK\'s typed errors', T, async () => {
  // max_tokens is required
  await assert.rejects(
    client.messages.create({ model: MODEL_ID, messages: [{ role: 'user', content: P_ADD }] }),
    (e) => e instanceof Anthropic.BadRequestError && e.status === 400 && isAnthropicError(e.error) && e.error.error.type === 'invalid_request_error',
  );
  // messages not a list, content a number
  for (const body of [
    { model: MODEL_ID, max_tokens: 8, messages: 'hi' },
    { model: MODEL_ID, max_tokens: 8, messages: [{ role: 'user', content: 5 }] },
    { model: MODEL_ID, max_tokens: 'ten', messages: [{ role: 'user', content: 'hi' }] },
  ]) {
    const r = await post('/v1/messages', body, { headers: { 'anthropic-version': '2023-06-01' } });
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    assert.ok(isAnthropicError(r.json), `Anthropic error shape: ${r.text}`);
    assert.equal(r.json.error.type, 'invalid_request_error');
  }
  const bad = await post('/v1/messages', '{"model": "x", "max_tokens": 8, "messages": [', {});
  assert.equal(bad.status, 400);
  assert.ok(isAnthropicError(bad.json), `invalid JSON: ${bad.text}`);
  const cbad = await post('/v1/messages/count_tokens', { model: MODEL_ID, messages: 7 });
  assert.equal(cbad.status, 400);
  assert.ok(isAnthropicError(cbad.json), `count_tokens error shape: ${cbad.text}`);
  if (KEY) {
    const wrong = new Anthropic({ baseURL: URL_MAIN, apiKey: KEY + '-wrong', maxRetries: 0, timeout: 30000 });
    await assert.rejects(
      wrong.messages.create({ model: MODEL_ID, max_tokens: 8, messages: [{ role: 'user', content: P_ADD }] }),
      (e) => e instanceof Anthropic.AuthenticationError && e.status === 401 && isAnthropicError(e.error) && e.error.error.type === 'authentication_error',
    );
    // the key in x-api-key (how the SDK sends it) is accepted
    const ok = await client.messages.countTokens({ model: MODEL_ID, messages: [{ role: 'user', content: P_ADD }] });
    assert.ok(ok.input_tokens > 0);
  }
});
