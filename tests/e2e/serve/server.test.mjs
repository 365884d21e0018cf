// gmlx serve's operational side, on the auxiliary server serve.sh starts without a key and with
// --queue 1 -c 8192 --max-body-mb 1 (GMLX_AUX_URL), where a 7 800-token prompt keeps the model
// busy for seconds (each long prompt starts with a word of its own, so that no cached prefix
// shortens it) (node:test, raw fetch):
//  - GET /health is {"status": "ok"}; GET /metrics is Prometheus text with the counters, gauges and
//    histograms named in the interface, well formed (cumulative buckets, +Inf = _count), and its
//    counters move by what a request reports (tokens generated = completion_tokens);
//  - one "[req] " line on the server's stderr (GMLX_AUX_LOG) per request: answered, refused (400,
//    404) or turned away (503);
//  - a full queue: with one long request running and one waiting, further requests get 503 with
//    Retry-After (OpenAI and Anthropic shapes; the openai client's InternalServerError), the one
//    that waited is answered correctly, gmlx_queue_depth shows the wait and drops back to 0;
//  - a stream dropped during a long prompt's evaluation is canceled: the next request is served
//    well before the long one would have finished;
//  - a prompt past the context (-c) is refused with a 400 naming the problem.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import fs from 'node:fs';
import { URL_AUX, http, post, parseMetrics, runRef, isOpenAIError, isAnthropicError, sleep, rssBytes } from './lib.mjs';

// a guard against a hang, not a speed bound: under ASan, beside the other tests of a parallel
// ctest, the queue test's two long prompts and its burst took longer than 120 s
const T = { timeout: 360000 };
const SHORT = [{ role: 'user', content: 'Q: 605+877=? A:' }];
// about 7 800 tokens: under -c 8192, seconds of prompt evaluation; a word of its own first
let nLong = 0;
const WORDS = ['alpha', 'bravo', 'charlie', 'delta', 'echo', 'foxtrot', 'golf', 'hotel', 'india', 'juliet'];
const LONG = () => [{ role: 'user', content: `${WORDS[nLong++ % WORDS.length]} ${'gold king earth '.repeat(2600)}` }];
const LOG = process.env.GMLX_AUX_LOG || '';
const reqLines = () => (LOG ? fs.readFileSync(LOG, 'utf8').split('\n').filter((l) => l.startsWith('[req] ')).length : 0);
const skip = !URL_AUX && 'GMLX_AUX_URL not set';
const aux = (route, body, o = {}) => post(route, body, { url: URL_AUX, key: '', ...o });

async function metrics() {
  const r = await http(URL_AUX + '/metrics', { timeout: 10000 });
  assert.equal(r.status, 200, `/metrics: ${r.status}`);
  assert.match(r.headers.get('content-type') || '', /^text\/plain/);
  return parseMetrics(r.text);
}

let tLong = NaN; // seconds the long request takes alone

test('/health and /metrics', { ...T, skip }, async (t) => {
  const h = await http(URL_AUX + '/health');
  assert.equal(h.status, 200);
  assert.deepEqual(h.json, { status: 'ok' });
  const m0 = await metrics();
  for (const name of ['gmlx_tokens_generated_total', 'gmlx_prompt_tokens_total', 'gmlx_queue_depth', 'gmlx_model_resident_bytes'])
    assert.ok(name in m0.sums, `/metrics lacks ${name}`);
  assert.match(m0.text, /^# TYPE gmlx_requests_total counter$/m, '/metrics lacks gmlx_requests_total');
  for (const h of ['gmlx_ttft_seconds', 'gmlx_decode_tokens_per_second']) {
    assert.match(m0.text, new RegExp(`^# TYPE ${h} histogram$`, 'm'), `${h} is not declared a histogram`);
    for (const suffix of ['_bucket', '_sum', '_count']) assert.ok(`${h}${suffix}` in m0.sums, `/metrics lacks ${h}${suffix}`);
  }
  assert.equal(m0.sums.gmlx_queue_depth, 0, 'queue depth of an idle server');
  const r = await aux('/v1/chat/completions', { messages: [{ role: 'user', content: 'Extract name and city: In Dublin, Paula turned 54.' }], temperature: 0, max_tokens: 8 });
  assert.equal(r.status, 200, r.text);
  // the counters may be updated just after the answer is sent: give them a moment
  let m1 = await metrics();
  for (let i = 0; i < 20 && m1.sums.gmlx_tokens_generated_total - m0.sums.gmlx_tokens_generated_total < r.json.usage.completion_tokens; i++) {
    if (i === 0) t.diagnostic('the counters lagged the answer (read right after it)');
    await sleep(100);
    m1 = await metrics();
  }
  const d = (n) => (m1.sums[n] ?? 0) - (m0.sums[n] ?? 0);
  assert.ok('gmlx_requests_total' in m1.sums, '/metrics has no gmlx_requests_total sample after a request');
  assert.ok(m1.sums.gmlx_model_resident_bytes > 0, 'gmlx_model_resident_bytes is 0 with the model loaded');
  const pid = Number(process.env.GMLX_AUX_PID || 0);
  if (pid) t.diagnostic(`gmlx_model_resident_bytes ${(m1.sums.gmlx_model_resident_bytes / 1048576).toFixed(1)} MiB; the server's VmRSS ${(rssBytes(pid) / 1048576).toFixed(1)} MiB`);
  assert.ok(d('gmlx_requests_total') >= 1, 'gmlx_requests_total did not move');
  assert.equal(d('gmlx_tokens_generated_total'), r.json.usage.completion_tokens, 'tokens generated = completion_tokens');
  assert.ok(d('gmlx_prompt_tokens_total') > 0 && d('gmlx_prompt_tokens_total') <= r.json.usage.prompt_tokens,
    `prompt tokens moved by ${d('gmlx_prompt_tokens_total')}, the request had ${r.json.usage.prompt_tokens}`);
  assert.ok(d('gmlx_ttft_seconds_count') >= 1, 'no time-to-first-token observed');
  // histograms: cumulative buckets, +Inf equals _count
  for (const h of ['gmlx_ttft_seconds', 'gmlx_decode_tokens_per_second']) {
    const b = m1.samples.filter((s) => s.name === `${h}_bucket`);
    assert.ok(b.length >= 2, `${h}: buckets`);
    for (let i = 1; i < b.length; i++) assert.ok(b[i].value >= b[i - 1].value, `${h}: buckets not cumulative`);
    const inf = b.find((s) => /le="\+Inf"/.test(s.labels));
    assert.ok(inf, `${h}: no +Inf bucket`);
    assert.equal(inf.value, m1.sums[`${h}_count`], `${h}: +Inf bucket != _count`);
  }
});

test('a full queue answers 503 with Retry-After; the waiting request is served; queue depth shows it', { ...T, skip }, async () => {
  const ref = await runRef('Q: 605+877=? A:', { n: 8 });
  let t0 = Date.now();
  const solo = await aux('/v1/chat/completions', { messages: LONG(), temperature: 0, max_tokens: 1 }, { timeout: 90000 });
  tLong = (Date.now() - t0) / 1000;
  assert.equal(solo.status, 200, `the long request alone: ${solo.text.slice(0, 300)}`);
  assert.ok(solo.json.usage.prompt_tokens > 7000, `long prompt: ${solo.json.usage.prompt_tokens} tokens`);
  if (tLong < 1) console.log(`# the long request takes only ${tLong} s here: the queue may drain before the burst`);
  t0 = Date.now();
  let longDone = 0;
  const long = aux('/v1/chat/completions', { messages: LONG(), temperature: 0, max_tokens: 1 }, { timeout: 90000 }).then((r) => { longDone = Date.now(); return r; });
  await sleep(Math.min(300, tLong * 250));
  const oa = new OpenAI({ baseURL: URL_AUX + '/v1', apiKey: 'no-key', maxRetries: 0, timeout: 90000 });
  const burst = [
    ...Array.from({ length: 4 }, () => aux('/v1/chat/completions', { messages: SHORT, temperature: 0, max_tokens: 8 }, { timeout: 90000 }).then((r) => ({ ...r, kind: 'openai', at: Date.now() }))),
    aux('/v1/messages', { model: 'x', messages: SHORT, temperature: 0, max_tokens: 8 }, { timeout: 90000 }).then((r) => ({ ...r, kind: 'anthropic', at: Date.now() })),
    oa.chat.completions.create({ model: 'x', messages: SHORT, temperature: 0, max_tokens: 8 }).then(
      (r) => ({ status: 200, json: r, kind: 'sdk', at: Date.now() }),
      (e) => ({ status: e.status, error: e, kind: 'sdk', at: Date.now(), headers: e.headers }),
    ),
  ];
  await sleep(100);
  const mid = await metrics();
  const got = await Promise.all(burst);
  const l = await long;
  assert.equal(l.status, 200, 'the long request');
  const n503 = got.filter((r) => r.status === 503);
  for (const r of got) {
    assert.ok([200, 503].includes(r.status), `${r.kind}: ${r.status} ${r.text?.slice(0, 200) ?? r.error}`);
    if (r.status === 200) {
      const text = r.kind === 'anthropic' ? r.json.content.map((b) => b.text ?? '').join('') : r.json.choices[0].message.content;
      assert.equal(text, ref.text, `${r.kind}: the served answer`);
    } else {
      const ra = r.headers.get('retry-after');
      assert.match(ra ?? '', /^\d+$|GMT$/, `${r.kind}: 503 without a Retry-After header`);
      if (r.kind === 'openai') assert.ok(isOpenAIError(r.json), `503 shape: ${r.text}`);
      if (r.kind === 'anthropic') assert.ok(isAnthropicError(r.json), `503 Anthropic shape: ${r.text}`);
      if (r.kind === 'sdk') assert.ok(r.error instanceof OpenAI.InternalServerError, `the client's error: ${r.error}`);
    }
  }
  const early503 = n503.filter((r) => r.at < longDone).length;
  if (tLong >= 1) {
    // queue 1: one of the six waits, the other five are refused while the long one runs
    assert.ok(early503 >= 4, `only ${early503} of 6 got 503 while the long request ran (statuses ${got.map((r) => r.status)})`);
    assert.ok(mid.sums.gmlx_queue_depth >= 1, `gmlx_queue_depth ${mid.sums.gmlx_queue_depth} while a request waited`);
    assert.ok(got.some((r) => r.status === 200), 'the queued request was not served');
  }
  const after = await metrics();
  assert.equal(after.sums.gmlx_queue_depth, 0, 'queue depth after the burst');
});

test('a stream dropped during a long prompt is canceled: the next request is served promptly', { ...T, skip }, async (t) => {
  if (!(tLong > 0)) {
    const t0 = Date.now();
    await aux('/v1/chat/completions', { messages: LONG(), temperature: 0, max_tokens: 1 }, { timeout: 90000 });
    tLong = (Date.now() - t0) / 1000;
  }
  const ref = await runRef('Q: 605+877=? A:', { n: 8 });
  const ac = new AbortController();
  const p = fetch(URL_AUX + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: LONG(), temperature: 0, max_tokens: 64, stream: true }),
    signal: ac.signal,
  }).then(async (res) => { for await (const _ of res.body); }).catch(() => {});
  await sleep(Math.min(500, tLong * 200));
  ac.abort();
  await p;
  const t0 = Date.now();
  const r = await aux('/v1/chat/completions', { messages: SHORT, temperature: 0, max_tokens: 8 }, { timeout: 90000 });
  const tNext = (Date.now() - t0) / 1000;
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices[0].message.content, ref.text);
  t.diagnostic(`long request alone ${tLong.toFixed(2)} s; the request after the dropped stream ${tNext.toFixed(2)} s`);
  if (tLong < 2) return t.skip(`the long prompt takes only ${tLong.toFixed(2)} s here: too short to tell a cancel`);
  assert.ok(tNext < Math.max(1.5, tLong / 2), `the next request took ${tNext.toFixed(2)} s: the dropped one was not canceled (alone it takes ${tLong.toFixed(2)} s)`);
});

test('a prompt past the context is refused with a 400', { ...T, skip }, async () => {
  const over = [{ role: 'user', content: 'gold king earth '.repeat(3000) }]; // about 9 000 tokens > -c 8192
  const r = await aux('/v1/chat/completions', { messages: over, temperature: 0, max_tokens: 4 }, { timeout: 90000 });
  assert.equal(r.status, 400, r.text.slice(0, 300));
  assert.ok(isOpenAIError(r.json));
  assert.match(r.json.error.message, /context|too long|tokens/i);
  const a = await aux('/v1/messages', { model: 'x', max_tokens: 4, messages: over }, { timeout: 90000 });
  assert.equal(a.status, 400, a.text.slice(0, 300));
  assert.ok(isAnthropicError(a.json));
  const h = await http(URL_AUX + '/health');
  assert.equal(h.status, 200);
});

test('one [req] log line per request: answered, refused or turned away', { ...T, skip: skip || (!LOG && 'GMLX_AUX_LOG not set') }, async () => {
  const before = reqLines();
  const statuses = [];
  statuses.push((await aux('/v1/chat/completions', { messages: SHORT, temperature: 0, max_tokens: 4 })).status);
  statuses.push((await aux('/v1/chat/completions', '{"messages": [')).status);
  statuses.push((await aux('/v1/completions', { prompt: 'Q: 1+1=? A:', max_tokens: 2 })).status);
  statuses.push((await aux('/v1/messages', { model: 'x', messages: SHORT })).status);
  statuses.push((await http(URL_AUX + '/v1/no-such-route')).status);
  assert.deepEqual(statuses, [200, 400, 200, 400, 404]);
  await sleep(300);
  const n = reqLines() - before;
  assert.ok(n >= statuses.length, `${n} new [req] lines for ${statuses.length} requests (${statuses.join(', ')})`);
});
