// gmlx serve against malformed and hostile requests (raw fetch and raw sockets, node:test):
//  - a corpus of bad bodies on /v1/chat/completions, /v1/completions and /v1/messages: invalid
//    JSON, wrong types, missing fields, empty body, invalid UTF-8, huge numbers, deep nesting,
//    NUL bytes, 10 000 messages, a prompt past the context: each is answered (400 in the route's
//    error shape where the request is invalid; 200 or a clear 400 where either is defensible),
//    never a crash, a hang or a 5xx;
//  - HTTP level: 404 unknown route, 405 wrong method, 413 body over the limit (the default 8 MiB
//    here, --max-body-mb 1 on the auxiliary server), 431 headers too large, garbage request
//    lines, a body shorter than its Content-Length, a chunked body over the limit;
//  - the API key: 401 without it or with a wrong one (Bearer and x-api-key), on every API route,
//    /health exempt;
//  - after the corpus the server still answers /health and a normal completion, equal to gmlx run.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  URL_MAIN, URL_AUX, KEY, http, post, rawHttp, rawRequest, runRef, isOpenAIError, isAnthropicError, auth,
} from './lib.mjs';

const T = { timeout: 120000 };
const MSG = [{ role: 'user', content: 'Q: 605+877=? A:' }];
const valid = (extra) => JSON.stringify({ messages: MSG, max_tokens: 8, temperature: 0, ...extra });

/** checks one answer: the status is one of `want`; a 4xx carries the route's error shape, a 200 a valid answer */
function judge(name, r, want, shape = 'openai') {
  assert.ok(want.includes(r.status), `${name}: status ${r.status}, wanted ${want.join(' or ')}: ${(r.text ?? r.body?.toString()).slice(0, 300)}`);
  const json = r.json;
  if (r.status >= 400) {
    const ok = shape === 'anthropic' ? isAnthropicError(json) : isOpenAIError(json);
    assert.ok(ok, `${name}: ${r.status} without the ${shape} error shape: ${(r.text ?? r.body?.toString()).slice(0, 300)}`);
  } else if (r.status === 200) {
    assert.ok(json && (json.choices || json.content), `${name}: 200 without an answer: ${(r.text ?? '').slice(0, 300)}`);
  }
}

const corpus = [
  // [name, body (string | Buffer), allowed statuses]
  ['invalid JSON', '{"messages": [', [400]],
  ['not JSON at all', 'hello', [400]],
  ['empty body', '', [400]],
  ['JSON null', 'null', [400]],
  ['JSON array', '[]', [400]],
  ['JSON string', '"messages"', [400]],
  ['trailing garbage', valid() + 'xyz', [400]],
  ['missing messages', JSON.stringify({ max_tokens: 8 }), [400]],
  ['messages null', JSON.stringify({ messages: null }), [400]],
  ['messages a string', JSON.stringify({ messages: 'hi' }), [400]],
  ['messages an object', JSON.stringify({ messages: { role: 'user', content: 'hi' } }), [400]],
  ['messages empty', JSON.stringify({ messages: [] }), [400]],
  ['message not an object', JSON.stringify({ messages: ['hi'] }), [400]],
  ['content a number', JSON.stringify({ messages: [{ role: 'user', content: 5 }] }), [400]],
  ['content an object', JSON.stringify({ messages: [{ role: 'user', content: { text: 'hi' } }] }), [400]],
  ['role a number', JSON.stringify({ messages: [{ role: 7, content: 'hi' }] }), [400]],
  ['role missing', JSON.stringify({ messages: [{ content: 'hi' }] }), [400]],
  ['unknown role', JSON.stringify({ messages: [{ role: 'wizard', content: 'hi' }], max_tokens: 8 }), [200, 400]],
  ['max_tokens "ten"', valid({ max_tokens: 'ten' }), [400]],
  ['max_tokens 1e308', valid({ max_tokens: 1e308 }), [200, 400]],
  ['max_tokens -1', valid({ max_tokens: -1 }), [200, 400]],
  ['max_tokens 2.5', valid({ max_tokens: 2.5 }), [200, 400]],
  ['max_tokens 0', valid({ max_tokens: 0 }), [200, 400]],
  ['max_tokens 2^64', valid().replace('"max_tokens":8', '"max_tokens":18446744073709551616'), [200, 400]],
  ['temperature 1e400', valid().replace('"temperature":0', '"temperature":1e400'), [200, 400]],
  ['temperature "hot"', valid({ temperature: 'hot' }), [400]],
  ['temperature -1', valid({ temperature: -1 }), [200, 400]],
  ['top_p 7', valid({ top_p: 7 }), [200, 400]],
  ['seed -5', valid({ seed: -5 }), [200, 400]],
  ['seed 1e30', valid({ seed: 1e30 }), [200, 400]],
  ['n 2', valid({ n: 2 }), [400]],
  ['n 0', valid({ n: 0 }), [200, 400]],
  ['n "one"', valid({ n: 'one' }), [400]],
  ['stream "yes"', valid({ stream: 'yes' }), [400]],
  ['stop a number', valid({ stop: 5 }), [400]],
  ['stop list with a number', valid({ stop: ['a', 5] }), [400]],
  ['stop 1000 strings', valid({ stop: Array.from({ length: 1000 }, (_, i) => `s${i}`) }), [200, 400]],
  ['tools not a list', valid({ tools: 'get_weather' }), [400]],
  ['response_format unknown type', valid({ response_format: { type: 'banana' } }), [200, 400]],
  ['NUL in content', JSON.stringify({ messages: [{ role: 'user', content: 'a\u0000b' }], max_tokens: 8 }), [200, 400]],
  ['lone surrogate escape', '{"messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 8}', [200, 400]],
  ['invalid UTF-8 in content', Buffer.concat([Buffer.from('{"messages": [{"role": "user", "content": "a'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}], "max_tokens": 8}')]), [400]],
  ['overlong UTF-8 in content', Buffer.concat([Buffer.from('{"messages": [{"role": "user", "content": "'), Buffer.from([0xc0, 0xaf]), Buffer.from('"}]}')]), [400]],
  ['UTF-8 BOM before the JSON', Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(valid())]), [200, 400]],
  ['deep nesting', '{"messages": ' + '['.repeat(100000) + ']'.repeat(100000) + '}', [400]],
  ['deep nesting of objects', '{"x": ' + '{"a": '.repeat(50000) + '1' + '}'.repeat(50000) + ', "messages": []}', [400]],
  ['huge number literal', valid().replace('"max_tokens":8', '"max_tokens":' + '9'.repeat(5000)), [200, 400]],
  ['duplicate keys', '{"messages": 5, "messages": ' + JSON.stringify(MSG) + ', "max_tokens": 8}', [200, 400]],
  ['a prompt past the context', JSON.stringify({ messages: [{ role: 'user', content: 'gold king earth '.repeat(60000) }], max_tokens: 8 }), [400]],
];

test('malformed chat bodies: 400 in the OpenAI shape (or a clear 200), never a crash', T, async () => {
  for (const [name, body, want] of corpus) {
    const r = await post('/v1/chat/completions', body, { timeout: 60000 });
    judge(name, r, want);
  }
});

test('malformed completions bodies', T, async () => {
  const cases = [
    ['invalid JSON', '{"prompt": ', [400]],
    ['missing prompt', JSON.stringify({ max_tokens: 8 }), [400]],
    ['prompt a number', JSON.stringify({ prompt: 5 }), [400]],
    ['prompt an object', JSON.stringify({ prompt: { a: 1 } }), [400]],
    ['prompt a list of strings', JSON.stringify({ prompt: ['a', 'b'], max_tokens: 4 }), [200, 400]],
    ['prompt a list of numbers', JSON.stringify({ prompt: [1, 2, 3], max_tokens: 4 }), [200, 400]],
    ['prompt empty', JSON.stringify({ prompt: '', max_tokens: 4 }), [200, 400]],
    ['n 3', JSON.stringify({ prompt: 'Q: 1+1=? A:', n: 3 }), [400]],
    ['invalid UTF-8', Buffer.concat([Buffer.from('{"prompt": "'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}')]), [400]],
  ];
  for (const [name, body, want] of cases) judge(`completions: ${name}`, await post('/v1/completions', body), want);
});

test('malformed messages bodies: the Anthropic error shape', T, async () => {
  const ok = { model: 'x', max_tokens: 8, messages: MSG };
  const cases = [
    ['invalid JSON', '{"model": ', [400]],
    ['empty body', '', [400]],
    ['missing max_tokens', JSON.stringify({ model: 'x', messages: MSG }), [400]],
    ['max_tokens negative', JSON.stringify({ ...ok, max_tokens: -3 }), [400]],
    ['messages missing', JSON.stringify({ model: 'x', max_tokens: 8 }), [400]],
    ['content block of an unknown type', JSON.stringify({ ...ok, messages: [{ role: 'user', content: [{ type: 'hologram', data: 1 }] }] }), [400]],
    ['content block without text', JSON.stringify({ ...ok, messages: [{ role: 'user', content: [{ type: 'text' }] }] }), [400]],
    ['role system inside messages', JSON.stringify({ ...ok, messages: [{ role: 'system', content: 'x' }, ...MSG] }), [200, 400]],
    ['system a number', JSON.stringify({ ...ok, system: 5 }), [400]],
    ['stop_sequences a string', JSON.stringify({ ...ok, stop_sequences: 'x' }), [200, 400]],
    ['temperature 1e400', JSON.stringify(ok).replace('"max_tokens":8', '"max_tokens":8,"temperature":1e400'), [200, 400]],
    ['invalid UTF-8', Buffer.concat([Buffer.from('{"max_tokens": 8, "messages": [{"role": "user", "content": "'), Buffer.from([0xf8, 0x88]), Buffer.from('"}]}')]), [400]],
  ];
  for (const [name, body, want] of cases)
    judge(`messages: ${name}`, await post('/v1/messages', body, { headers: { 'anthropic-version': '2023-06-01' } }), want, 'anthropic');
});

test('10 000 messages: answered (200, or a clear 400), not a crash', T, async () => {
  const messages = [];
  for (let i = 0; i < 10000; i++) messages.push({ role: i % 2 ? 'assistant' : 'user', content: `message ${i}` });
  messages.push({ role: 'user', content: 'Q: 605+877=? A:' });
  const t0 = Date.now();
  const r = await post('/v1/chat/completions', { messages, max_tokens: 8, temperature: 0 }, { timeout: 90000 });
  judge('10 000 messages', r, [200, 400]);
  const a = await post('/v1/messages', { model: 'x', max_tokens: 8, messages: messages.slice(1) }, { timeout: 90000 });
  judge('10 000 messages (Anthropic)', a, [200, 400], 'anthropic');
  assert.ok(Date.now() - t0 < 90000);
});

test('unknown routes 404, wrong methods 405, in the OpenAI error shape', T, async () => {
  for (const [m, route] of [['GET', '/v1/nope'], ['POST', '/nope'], ['GET', '/v1/chat/completions/extra'], ['GET', '/'], ['GET', '/v1']]) {
    const r = await http(URL_MAIN + route, { method: m, headers: auth(), body: m === 'POST' ? '{}' : undefined });
    assert.equal(r.status, 404, `${m} ${route}: ${r.text}`);
    assert.ok(isOpenAIError(r.json), `${m} ${route}: ${r.text}`);
  }
  for (const [m, route] of [['GET', '/v1/chat/completions'], ['PUT', '/v1/chat/completions'], ['GET', '/v1/completions'], ['DELETE', '/v1/models'], ['POST', '/v1/models'], ['POST', '/health'], ['GET', '/v1/messages'], ['GET', '/v1/messages/count_tokens']]) {
    const r = await http(URL_MAIN + route, { method: m, headers: { 'content-type': 'application/json', ...auth() }, body: ['POST', 'PUT'].includes(m) ? '{}' : undefined });
    assert.equal(r.status, 405, `${m} ${route}: ${r.text}`);
    assert.ok(r.json && (isOpenAIError(r.json) || isAnthropicError(r.json)), `${m} ${route}: ${r.text}`);
  }
});

test('413: a body over the limit (8 MiB default; 1 MiB with --max-body-mb 1)', T, async (t) => {
  const big = Buffer.alloc(9 << 20, 'a');
  const head = (route, length, extra = '', key = KEY) => Buffer.from(`POST ${route} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n${key ? `Authorization: Bearer ${key}\r\n` : ''}Content-Type: application/json\r\nContent-Length: ${length}\r\n${extra}\r\n`);
  // the declared length decides: answered after the first 256 KiB of the body, without waiting
  // for the rest (the client sends no more until it has the answer)
  for (const route of ['/v1/chat/completions', '/v1/completions', '/v1/messages']) {
    const r = await rawHttp(URL_MAIN, [head(route, big.length), big.subarray(0, 256 << 10)], { timeout: 15000 });
    assert.equal(r.status, 413, `${route}, 9 MiB declared: status ${r.status} (${r.error ?? ''}, timed out ${r.timedOut}) ${r.body?.toString().slice(0, 200)}`);
    const shape = route === '/v1/messages' ? isAnthropicError(r.json) : isOpenAIError(r.json);
    assert.ok(shape, `${route}: 413 shape: ${r.body?.toString().slice(0, 200)}`);
  }
  const d = await rawHttp(URL_MAIN, [head('/v1/chat/completions', 1 << 30)], { timeout: 15000 });
  assert.equal(d.status, 413, `1 GiB declared, no body: status ${d.status}, timed out ${d.timedOut}`);
  // Expect: 100-continue: refused before any of the body is sent
  const e = await rawHttp(URL_MAIN, [head('/v1/chat/completions', big.length, 'Expect: 100-continue\r\n')], { timeout: 15000 });
  assert.equal(e.status, 413, `Expect: 100-continue, 9 MiB: status ${e.status}`);
  // a client that sends the whole body at once (as the SDKs do): the answer is readable only if
  // the server reads or discards the rest before it closes (else the client sees a reset)
  const w = await rawHttp(URL_MAIN, rawRequest('POST', '/v1/chat/completions', { body: big, headers: { 'Content-Type': 'application/json' } }), { timeout: 30000 });
  if (w.status !== 413) t.diagnostic(`a client sending the whole 9 MiB got ${w.status === -1 ? `no answer but ${w.error}` : w.status}: the server closed without draining the body`);
  else assert.ok(isOpenAIError(w.json));
  // a chunked body over the limit: refused (an answer, or a reset before all of it was taken),
  // never buffered without end
  const chunk = Buffer.alloc(1 << 20, 'a');
  const parts = [Buffer.from(`POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n${KEY ? `Authorization: Bearer ${KEY}\r\n` : ''}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`)];
  for (let i = 0; i < 10; i++) parts.push(Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n'));
  parts.push(Buffer.from('0\r\n\r\n'));
  const c = await rawHttp(URL_MAIN, parts, { timeout: 30000 });
  assert.ok([400, 411, 413, 501].includes(c.status) || (c.status === -1 && !c.sentAll && c.error), `chunked 10 MiB: status ${c.status} (${c.error ?? ''}, all sent ${c.sentAll})`);
  if (c.status === -1) t.diagnostic(`chunked 10 MiB: connection reset (${c.error}) before all was sent, no answer read`);
  if (!URL_AUX) return t.skip('GMLX_AUX_URL not set');
  const aux = await rawHttp(URL_AUX, [head('/v1/chat/completions', 1536 << 10, '', ''), Buffer.alloc(256 << 10, 'a')], { timeout: 15000 });
  assert.equal(aux.status, 413, `--max-body-mb 1, 1.5 MiB declared: ${aux.status}`);
  // just under the limit: parsed (a valid body answers 200 or a 400 for its content, never 413)
  const under = JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(900 << 10) }], max_tokens: 1 });
  const u = await post('/v1/chat/completions', under, { url: URL_AUX, key: '' });
  assert.ok([200, 400].includes(u.status), `--max-body-mb 1, 0.9 MiB body: ${u.status} ${u.text.slice(0, 200)}`);
});

test('431: headers too large; garbage request lines get 4xx, a close, or nothing harmful', T, async (t) => {
  // 96 KiB of header, and no more until the answer: refused once past the server's limit
  const start = 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n';
  const r = await rawHttp(URL_MAIN, [Buffer.from(start + 'X-Big: ' + 'b'.repeat(96 << 10))], { timeout: 15000 });
  assert.equal(r.status, 431, `a 96 KiB header: status ${r.status} (${r.error ?? ''}, timed out ${r.timedOut})`);
  let many = '';
  for (let i = 0; i < 2500; i++) many += `X-H${i}: ${'v'.repeat(30)}\r\n`;
  const m = await rawHttp(URL_MAIN, [Buffer.from(start + many)], { timeout: 15000 });
  assert.ok([400, 431].includes(m.status), `2500 headers: status ${m.status} (${m.error ?? ''}, timed out ${m.timedOut})`);
  const longUrl = await rawHttp(URL_MAIN, [Buffer.from(`GET /${'a'.repeat(96 << 10)}`)], { timeout: 15000 });
  assert.ok([400, 404, 414, 431].includes(longUrl.status), `a 96 KiB URL: status ${longUrl.status} (${longUrl.error ?? ''}, timed out ${longUrl.timedOut})`);
  // a complete request with an 8 KiB header is fine
  const fine = await rawHttp(URL_MAIN, [Buffer.from(start + 'X-Fine: ' + 'f'.repeat(8 << 10) + '\r\n\r\n')], { timeout: 15000 });
  assert.equal(fine.status, 200, `an 8 KiB header: status ${fine.status}`);
  for (const junk of ['HELLO\r\n\r\n', 'GET\r\n\r\n', '\x00\x01\x02\x03\r\n\r\n', 'GET / HTTP/9.9\r\n\r\n', 'POST /v1/chat/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n', 'POST /v1/chat/completions HTTP/1.1\r\nContent-Length: abc\r\n\r\n', 'POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello']) {
    // an answer (4xx, 505), a close, or a connection left open until the server's idle timeout
    // (harmless: the server goes on answering others, checked below)
    const j = await rawHttp(URL_MAIN, [Buffer.from(junk, 'latin1')], { timeout: 3000 });
    if (j.status === -1 && !j.closed) t.diagnostic(`${JSON.stringify(junk)}: neither answered nor closed in 3 s`);
    assert.ok(j.status === -1 || (j.status >= 400 && j.status < 500) || j.status === 505, `${JSON.stringify(junk)}: status ${j.status}`);
    const h = await http(URL_MAIN + '/health', { timeout: 10000 });
    assert.equal(h.status, 200, `/health after ${JSON.stringify(junk)}`);
  }
  // a body shorter than its Content-Length, then the client goes away
  await rawHttp(URL_MAIN, [Buffer.from(`POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${KEY}\r\nContent-Length: 100\r\n\r\n{"mess`)], { timeout: 1000 });
  const h = await http(URL_MAIN + '/health', { timeout: 10000 });
  assert.equal(h.status, 200);
});

test('API key: 401 without it or with a wrong one on every API route; /health exempt', T, async (t) => {
  if (!KEY) return t.skip('GMLX_KEY not set: the server runs without a key');
  const routes = [
    ['GET', '/v1/models', undefined, 'openai'],
    ['POST', '/v1/chat/completions', valid(), 'openai'],
    ['POST', '/v1/completions', JSON.stringify({ prompt: 'Q: 1+1=? A:', max_tokens: 4 }), 'openai'],
    ['POST', '/v1/messages', JSON.stringify({ model: 'x', max_tokens: 8, messages: MSG }), 'anthropic'],
    ['POST', '/v1/messages/count_tokens', JSON.stringify({ model: 'x', messages: MSG }), 'anthropic'],
  ];
  const variants = [
    ['no key', {}],
    ['wrong Bearer', { authorization: `Bearer ${KEY}x` }],
    ['wrong x-api-key', { 'x-api-key': `${KEY}x` }],
    ['key without Bearer', { authorization: KEY }],
    ['empty Bearer', { authorization: 'Bearer ' }],
    ['a prefix of the key', { authorization: `Bearer ${KEY.slice(0, -1)}` }],
  ];
  for (const [m, route, body, shape] of routes) {
    for (const [name, headers] of variants) {
      const r = await http(URL_MAIN + route, { method: m, headers: { 'content-type': 'application/json', ...headers }, body });
      assert.equal(r.status, 401, `${m} ${route}, ${name}: ${r.status} ${r.text.slice(0, 200)}`);
      assert.ok(shape === 'anthropic' ? isAnthropicError(r.json) : isOpenAIError(r.json), `${m} ${route}, ${name}: shape ${r.text.slice(0, 200)}`);
    }
    for (const [name, headers] of [['Bearer', { authorization: `Bearer ${KEY}` }], ['x-api-key', { 'x-api-key': KEY }]]) {
      const r = await http(URL_MAIN + route, { method: m, headers: { 'content-type': 'application/json', ...headers }, body });
      assert.equal(r.status, 200, `${m} ${route}, right key in ${name}: ${r.status} ${r.text.slice(0, 200)}`);
    }
  }
  const h = await http(URL_MAIN + '/health');
  assert.equal(h.status, 200, '/health without a key');
  assert.deepEqual(h.json, { status: 'ok' });
});

test('after the corpus: /health answers and a normal completion equals gmlx run', T, async () => {
  const h = await http(URL_MAIN + '/health', { timeout: 10000 });
  assert.equal(h.status, 200);
  assert.equal(h.json?.status, 'ok');
  const ref = await runRef('Q: 605+877=? A:', { n: 16 });
  const r = await post('/v1/chat/completions', { messages: MSG, max_tokens: 16, temperature: 0 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].message.content, ref.text);
});
