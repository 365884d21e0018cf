// gmlx serve through the official `openai` client (node:test), against independent references:
//  - greedy (temperature 0) chat answers equal `gmlx run MODEL -p PROMPT --temp 0 -n N`, text and
//    token counts (prompt_tokens = run's prompt tokens, completion_tokens = run's decoded tokens),
//    finish_reason "length" exactly when N tokens were generated; multi-turn conversations (system,
//    assistant turns, tool calls) equal `gmlx template | gmlx run --raw` on the same messages;
//  - streamed content concatenated equals the non-streamed content, the first delta carries the
//    role, the usage chunk (stream_options.include_usage) equals the non-stream usage, and the
//    wire format is SSE ending in `data: [DONE]`;
//  - stop strings (string, array, matched at the start, never matched) cut the text;
//    max_completion_tokens acts as max_tokens; a seed with temperature > 0 repeats;
//  - /v1/completions equals `gmlx run --raw`; /v1/models lists the file's id;
//  - tools reach the template (prompt_tokens equals the template's rendering with them, counted
//    by gmlx tokenize), tool_choice "none" strips them, response_format is accepted;
//  - a stream aborted with an AbortController leaves the server serving the next request;
//  - error responses surface as the client's typed errors (BadRequestError, AuthenticationError,
//    NotFoundError, APIError 405).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { URL_MAIN, KEY, MODEL_ID, runRef, chatRef, promptTokens, post, readSSE, auth } from './lib.mjs';

const client = new OpenAI({ baseURL: URL_MAIN + '/v1', apiKey: KEY || 'no-key', maxRetries: 0, timeout: 30000 });
const P_JSON = 'Extract name and city: In Dublin, Paula turned 54.'; // {"name": "Paula", "city": "Dublin"}
const P_ADD = 'Q: 605+877=? A:';
const user = (content) => [{ role: 'user', content }];
const T = { timeout: 60000 };

/** one streamed chat completion through the SDK: {content, chunks, finish, usage, role} */
async function streamChat(params, opts) {
  const stream = await client.chat.completions.create({ ...params, stream: true }, opts);
  const chunks = [];
  let content = '';
  let finish = null;
  let usage = null;
  let role = null;
  for await (const c of stream) {
    chunks.push(c);
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta?.role && role === null) role = ch.delta.role;
      if (typeof ch.delta?.content === 'string') content += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  return { content, chunks, finish, usage, role };
}

function checkCompletion(r) {
  assert.equal(r.object, 'chat.completion');
  assert.equal(typeof r.id, 'string');
  assert.ok(r.id.length > 0, 'id is empty');
  assert.equal(typeof r.created, 'number');
  assert.equal(typeof r.model, 'string');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].index, 0);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens, 'total_tokens is the sum');
}

test('GET /v1/models lists the served file by its name without .gguf', T, async () => {
  const ids = [];
  for await (const m of client.models.list()) {
    assert.equal(m.object, 'model');
    ids.push(m.id);
  }
  assert.ok(ids.includes(MODEL_ID), `models ${JSON.stringify(ids)} lack ${MODEL_ID}`);
});

for (const [name, prompt] of [['JSON extraction', P_JSON], ['arithmetic', P_ADD]]) {
  test(`greedy chat equals gmlx run (${name}): text, finish_reason, usage`, T, async () => {
    const ref = await runRef(prompt, { n: 48 });
    assert.ok(ref.nGen > 0 && ref.nGen < 48, `the reference should stop by itself: ${JSON.stringify(ref)}`);
    const r = await client.chat.completions.create({ model: MODEL_ID, messages: user(prompt), temperature: 0, max_tokens: 48 });
    checkCompletion(r);
    assert.equal(r.choices[0].message.content, ref.text);
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.usage.prompt_tokens, ref.nPrompt, 'prompt_tokens = gmlx run prompt tokens');
    assert.equal(r.usage.completion_tokens, ref.nGen, 'completion_tokens = gmlx run decoded tokens');
  });
}

test('max_tokens N: the first N tokens of gmlx run -n N, finish_reason "length", completion_tokens N', T, async () => {
  const ref = await runRef(P_JSON, { n: 5 });
  assert.equal(ref.stop, 'length');
  const r = await client.chat.completions.create({ model: MODEL_ID, messages: user(P_JSON), temperature: 0, max_tokens: 5 });
  checkCompletion(r);
  assert.equal(r.choices[0].message.content, ref.text);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 5);
  assert.equal(r.usage.prompt_tokens, ref.nPrompt);
  // max_completion_tokens is the same limit under its newer name
  const r2 = await client.chat.completions.create({ model: MODEL_ID, messages: user(P_JSON), temperature: 0, max_completion_tokens: 5 });
  assert.equal(r2.choices[0].message.content, ref.text);
  assert.equal(r2.choices[0].finish_reason, 'length');
  assert.equal(r2.usage.completion_tokens, 5);
});

test('stream: role first, content concatenated equals non-stream, usage chunk equals non-stream usage', T, async () => {
  const params = { model: MODEL_ID, messages: user(P_JSON), temperature: 0, max_tokens: 48 };
  const full = await client.chat.completions.create(params);
  const s = await streamChat({ ...params, stream_options: { include_usage: true } });
  assert.equal(s.role, 'assistant', 'the first delta carries role "assistant"');
  assert.equal(s.chunks[0].choices[0]?.delta?.role, 'assistant', 'the very first chunk carries the role');
  assert.equal(s.content, full.choices[0].message.content);
  assert.equal(s.finish, 'stop');
  assert.ok(s.usage, 'no usage chunk with stream_options.include_usage');
  assert.deepEqual(
    { p: s.usage.prompt_tokens, c: s.usage.completion_tokens, t: s.usage.total_tokens },
    { p: full.usage.prompt_tokens, c: full.usage.completion_tokens, t: full.usage.total_tokens },
  );
  const ids = new Set(s.chunks.map((c) => c.id));
  assert.equal(ids.size, 1, 'every chunk has the same id');
  for (const c of s.chunks) assert.equal(c.object, 'chat.completion.chunk');
  const usageChunks = s.chunks.filter((c) => c.usage);
  assert.equal(usageChunks.length, 1, 'one usage chunk');
  assert.deepEqual(usageChunks[0].choices, [], 'the usage chunk has choices: []');
  assert.equal(s.chunks.at(-1), usageChunks[0], 'the usage chunk comes last');
  // without include_usage no chunk carries usage
  const s2 = await streamChat(params);
  assert.equal(s2.content, full.choices[0].message.content);
  assert.equal(s2.usage, null, 'usage sent without stream_options.include_usage');
});

test('stream stopped by max_tokens: finish_reason "length", completion_tokens N', T, async () => {
  const ref = await runRef(P_JSON, { n: 7 });
  const s = await streamChat({ model: MODEL_ID, messages: user(P_JSON), temperature: 0, max_tokens: 7, stream_options: { include_usage: true } });
  assert.equal(s.content, ref.text);
  assert.equal(s.finish, 'length');
  assert.equal(s.usage?.completion_tokens, 7);
});

test('stream wire format: text/event-stream, data: JSON events, one finish chunk, then data: [DONE]', T, async () => {
  const res = await fetch(URL_MAIN + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth() },
    body: JSON.stringify({ messages: user(P_ADD), temperature: 0, max_tokens: 16, stream: true, stream_options: { include_usage: true } }),
    signal: AbortSignal.timeout(30000),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') || '', /^text\/event-stream/);
  const { events, rest } = await readSSE(res);
  assert.equal(rest.trim(), '', 'bytes after the last event');
  const data = events.filter((e) => e.data !== undefined);
  for (const e of events) {
    assert.equal(e.unknown, undefined, `unknown SSE fields ${e.unknown}`);
    for (const c of e.comments) assert.match(c, /^:/);
  }
  assert.equal(data.at(-1).data, '[DONE]', 'the stream ends with data: [DONE]');
  const chunks = data.slice(0, -1).map((e) => JSON.parse(e.data));
  assert.equal(chunks.filter((c) => c.choices?.[0]?.finish_reason).length, 1, 'exactly one chunk with finish_reason');
  const ref = await runRef(P_ADD, { n: 16 });
  assert.equal(chunks.map((c) => c.choices?.[0]?.delta?.content ?? '').join(''), ref.text);
  assert.equal(chunks.at(-1).usage?.completion_tokens, ref.nGen);
});

test('stop strings cut the text (string, array, at the start, unmatched) and give finish_reason "stop"', T, async () => {
  const ref = await runRef(P_JSON, { n: 48 });
  assert.equal(ref.text, '{"name": "Paula", "city": "Dublin"}', 'the bundled model changed its answer');
  const base = { model: MODEL_ID, messages: user(P_JSON), temperature: 0, max_tokens: 48 };
  const cases = [
    ['"city"', '{"name": "Paula", '], // spans several tokens
    [['Dublin', 'Paula'], '{"name": "'], // the earliest match wins
    ['{', ''], // matched by the first token
    ['zzz', ref.text], // never matched: the whole answer
  ];
  for (const [stop, want] of cases) {
    const r = await client.chat.completions.create({ ...base, stop });
    assert.equal(r.choices[0].message.content, want, `stop ${JSON.stringify(stop)}`);
    assert.equal(r.choices[0].finish_reason, 'stop', `stop ${JSON.stringify(stop)}`);
    assert.ok(r.usage.completion_tokens <= ref.nGen, `stop ${JSON.stringify(stop)}: completion_tokens ${r.usage.completion_tokens}`);
    const s = await streamChat({ ...base, stop });
    assert.equal(s.content, want, `streamed, stop ${JSON.stringify(stop)}: no part of the stop string leaks`);
    assert.equal(s.finish, 'stop');
  }
});

test('seed with temperature > 0 repeats, streamed or not', T, async () => {
  const p = { model: MODEL_ID, messages: user('Sort: 36 64 33 76'), temperature: 0.9, top_p: 0.9, seed: 1234, max_tokens: 16 };
  const a = await client.chat.completions.create(p);
  const b = await client.chat.completions.create(p);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  const s = await streamChat(p);
  assert.equal(s.content, a.choices[0].message.content);
});

test('/v1/completions equals gmlx run --raw, streamed or not', T, async () => {
  const ref = await runRef(P_ADD, { n: 16, raw: true });
  const r = await client.completions.create({ model: MODEL_ID, prompt: P_ADD, temperature: 0, max_tokens: 16 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].text, ref.text);
  assert.equal(r.choices[0].finish_reason, ref.finish);
  assert.equal(r.usage.prompt_tokens, ref.nPrompt);
  assert.equal(r.usage.completion_tokens, ref.nGen);
  const stream = await client.completions.create({ model: MODEL_ID, prompt: P_ADD, temperature: 0, max_tokens: 16, stream: true });
  let text = '';
  let finish = null;
  for await (const c of stream) {
    text += c.choices[0]?.text ?? '';
    if (c.choices[0]?.finish_reason) finish = c.choices[0].finish_reason;
  }
  assert.equal(text, ref.text);
  assert.equal(finish, ref.finish);
  const ref2 = await runRef(P_ADD, { n: 2, raw: true });
  const r2 = await client.completions.create({ model: MODEL_ID, prompt: P_ADD, temperature: 0, max_tokens: 2 });
  assert.equal(r2.choices[0].text, ref2.text);
  assert.equal(r2.choices[0].finish_reason, 'length');
});

test('a system message and earlier turns: equal gmlx template | gmlx run --raw', T, async () => {
  const messages = [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: P_ADD },
    { role: 'assistant', content: '1482' },
    { role: 'user', content: 'Extract name and city: In Rome, Ada turned 31.' },
  ];
  const ref = await chatRef(messages, { n: 48 });
  const r = await client.chat.completions.create({ model: MODEL_ID, messages, temperature: 0, max_tokens: 48 });
  assert.equal(r.choices[0].message.content, ref.text);
  assert.equal(r.usage.prompt_tokens, ref.nPrompt);
  assert.equal(r.usage.completion_tokens, ref.nGen);
  // --system of gmlx run is the same single system message
  const sys = await runRef(P_ADD, { n: 48, system: 'You are terse.' });
  const r2 = await client.chat.completions.create({
    model: MODEL_ID, messages: [{ role: 'system', content: 'You are terse.' }, ...user(P_ADD)], temperature: 0, max_tokens: 48,
  });
  assert.equal(r2.choices[0].message.content, sys.text);
  assert.equal(r2.usage.prompt_tokens, sys.nPrompt);
});

const TOOLS = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The current weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];

test('tools reach the template: prompt_tokens equals the rendering with them; tool_choice "none" strips them', T, async (t) => {
  const messages = user('What is the weather in Paris?');
  const withTools = await promptTokens(messages, TOOLS);
  const without = await promptTokens(messages);
  // the bundled model's template is plain ChatML and ignores tools; a template that renders
  // them makes the prompt grow, and the server must send that rendering
  if (withTools === without) t.diagnostic(`the model's template does not render tools (${without} tokens either way)`);
  const r = await client.chat.completions.create({ model: MODEL_ID, messages, tools: TOOLS, tool_choice: 'auto', temperature: 0, max_tokens: 16 });
  checkCompletion(r);
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  assert.equal(r.usage.prompt_tokens, withTools, 'prompt_tokens with tools = template rendering with tools');
  const none = await client.chat.completions.create({ model: MODEL_ID, messages, tools: TOOLS, tool_choice: 'none', temperature: 0, max_tokens: 16 });
  assert.equal(none.usage.prompt_tokens, without, 'tool_choice "none": rendered without tools');
  assert.ok(r.usage.prompt_tokens >= none.usage.prompt_tokens);
  const ref = await chatRef(messages, { n: 16, tools: TOOLS });
  assert.equal(r.choices[0].message.content ?? '', ref.text);
});

test('a tool call and its result in the history: answered as the template renders them', T, async () => {
  const messages = [
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '18 C, sunny' },
  ];
  const r = await client.chat.completions.create({ model: MODEL_ID, messages, tools: TOOLS, temperature: 0, max_tokens: 16 });
  checkCompletion(r);
  const ref = await chatRef(messages, { n: 16, tools: TOOLS });
  assert.equal(r.choices[0].message.content ?? '', ref.text);
  assert.equal(r.usage.prompt_tokens, ref.nPrompt);
});

test('response_format text / json_object accepted; model may be any name or absent', T, async () => {
  const ref = await runRef(P_JSON, { n: 48 });
  for (const response_format of [{ type: 'text' }, { type: 'json_object' }]) {
    const r = await client.chat.completions.create({ model: MODEL_ID, messages: user(P_JSON), temperature: 0, max_tokens: 48, response_format });
    checkCompletion(r);
  }
  const any = await client.chat.completions.create({ model: 'some-other-name', messages: user(P_JSON), temperature: 0, max_tokens: 48 });
  assert.equal(any.choices[0].message.content, ref.text);
  const absent = await post('/v1/chat/completions', { messages: user(P_JSON), temperature: 0, max_tokens: 48 });
  assert.equal(absent.status, 200, absent.text);
  assert.equal(absent.json.choices[0].message.content, ref.text);
});

test('parallel requests get their own answers', T, async () => {
  const prompts = [P_JSON, P_ADD, 'Sort: 36 64 33 76', 'Uppercase: gold, earth, book, green', 'Reverse: i v l x f f', 'Copy: d k r'];
  const refs = await Promise.all(prompts.map((p) => runRef(p, { n: 32 })));
  const got = await Promise.all(prompts.map((p) => client.chat.completions.create({ model: MODEL_ID, messages: user(p), temperature: 0, max_tokens: 32 })));
  got.forEach((r, i) => assert.equal(r.choices[0].message.content, refs[i].text, `prompt ${JSON.stringify(prompts[i])}`));
});

test('a stream aborted mid-way (AbortController) leaves the server answering the next request', T, async () => {
  const ref = await runRef(P_JSON, { n: 48 });
  for (const when of ['after the first chunk', 'before any chunk']) {
    const ac = new AbortController();
    let aborted = null;
    try {
      const p = client.chat.completions.create({ model: MODEL_ID, messages: user(P_JSON), temperature: 0, max_tokens: 48, stream: true }, { signal: ac.signal });
      if (when === 'before any chunk') setTimeout(() => ac.abort(), 1);
      const stream = await p;
      for await (const c of stream) {
        if (c.choices[0]?.delta) ac.abort();
      }
    } catch (e) {
      aborted = e;
    }
    if (aborted) assert.ok(aborted instanceof OpenAI.APIUserAbortError || aborted.name === 'AbortError', `${when}: ${aborted}`);
    const t0 = Date.now();
    const r = await client.chat.completions.create({ model: MODEL_ID, messages: user(P_JSON), temperature: 0, max_tokens: 48 }, { timeout: 10000 });
    assert.equal(r.choices[0].message.content, ref.text, `${when}: the next answer`);
    assert.ok(Date.now() - t0 < 10000, `${when}: the next request took ${Date.now() - t0} ms`);
  }
});

test('errors surface as the client\'s typed errors', T, async () => {
  // n > 1 is refused
  await assert.rejects(
    client.chat.completions.create({ model: MODEL_ID, messages: user(P_ADD), n: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && typeof e.error?.message === 'string' && typeof e.type === 'string',
  );
  // messages missing
  await assert.rejects(client.chat.completions.create({ model: MODEL_ID }), (e) => e instanceof OpenAI.BadRequestError);
  // unknown route, wrong method
  await assert.rejects(client.post('/no-such-route', { body: {} }), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(client.get('/chat/completions'), (e) => e instanceof OpenAI.APIError && e.status === 405);
  if (KEY) {
    const wrong = new OpenAI({ baseURL: URL_MAIN + '/v1', apiKey: KEY + '-wrong', maxRetries: 0, timeout: 30000 });
    await assert.rejects(
      wrong.chat.completions.create({ model: MODEL_ID, messages: user(P_ADD) }),
      (e) => e instanceof OpenAI.AuthenticationError && e.status === 401 && typeof e.error?.message === 'string',
    );
    await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  }
});
