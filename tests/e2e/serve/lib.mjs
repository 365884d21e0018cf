// Shared helpers of the gmlx serve end-to-end tests (tests/e2e/serve.sh runs them):
//  - the environment serve.sh passes (GMLX_URL, GMLX_KEY, GMLX_AUX_URL, GMLX_BIN, GMLX_MODEL);
//  - independent references computed by the gmlx command line, not by the server: `gmlx run`
//    (greedy text, prompt and generated token counts, stop reason), `gmlx template` + `gmlx run
//    --raw` for whole conversations, `gmlx template` + `gmlx tokenize` for prompt token counts;
//  - raw HTTP over node:net (for requests fetch will not send), an SSE reader, a Prometheus text
//    parser. Everything has a time limit and talks to 127.0.0.1 only.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export const URL_MAIN = process.env.GMLX_URL || '';
export const URL_AUX = process.env.GMLX_AUX_URL || '';
export const KEY = process.env.GMLX_KEY || '';
export const BIN = process.env.GMLX_BIN || '';
export const MODEL = process.env.GMLX_MODEL || '';
if (!URL_MAIN) throw new Error('GMLX_URL is not set (run tests/e2e/serve.sh)');

/** the served model's id: the file name without .gguf */
export const MODEL_ID = MODEL ? path.basename(MODEL).replace(/\.gguf$/, '') : 'model-q4_k_m';

/** headers that carry the API key (Authorization: Bearer), when one is set */
export function auth(key = KEY) {
  return key ? { authorization: `Bearer ${key}` } : {};
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** runs gmlx with args; resolves {stdout, stderr, code} (never rejects on a non-zero exit) */
export function gmlx(args, { timeout = 60000 } = {}) {
  if (!BIN) throw new Error('GMLX_BIN is not set');
  return new Promise((resolve, reject) => {
    execFile(BIN, args, { timeout, maxBuffer: 64 << 20, encoding: 'utf8' }, (err, stdout, stderr) => {
      if (err && typeof err.code !== 'number') return reject(new Error(`gmlx ${args[0]}: ${err.message}\n${stderr}`));
      resolve({ stdout, stderr, code: err ? err.code : 0 });
    });
  });
}

function tmpFile(name, content) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gmlx-serve-'));
  const f = path.join(dir, name);
  fs.writeFileSync(f, content);
  return { f, cleanup: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

/** parses gmlx run's stdout and its "[run] prompt P tokens, ...; decode D tokens, ...; stop: S" line */
function parseRun({ stdout, stderr, code }, what) {
  if (code !== 0) throw new Error(`${what}: exit ${code}\n${stderr}`);
  const m = /\[run\] prompt (\d+) tokens.*; decode (\d+) tokens.*; stop: ([^\n]+)/.exec(stderr);
  if (!m) throw new Error(`${what}: no [run] line in\n${stderr}`);
  const nGen = Number(m[2]);
  // run ends the text with one line break when it generated anything
  const text = nGen > 0 && stdout.endsWith('\n') ? stdout.slice(0, -1) : stdout;
  const stop = m[3].trim();
  return { text, nPrompt: Number(m[1]), nGen, stop, finish: stop === 'length' ? 'length' : 'stop' };
}

/** greedy reference of one user turn through the chat template (raw: the prompt as it is):
 *  gmlx run MODEL -p PROMPT --temp 0 -n N [--raw] [--system S] */
export async function runRef(prompt, { n, raw = false, system } = {}) {
  const args = ['run', MODEL, '-p', prompt, '--temp', '0', '-n', String(n)];
  if (raw) args.push('--raw');
  if (system !== undefined) args.push('--system', system);
  return parseRun(await gmlx(args), `gmlx run -p ${JSON.stringify(prompt)}`);
}

/** renders messages (and tools) through the model's template as gmlx template does */
export async function render(messages, tools) {
  const m = tmpFile('messages.json', JSON.stringify(messages));
  const t = tools ? tmpFile('tools.json', JSON.stringify(tools)) : null;
  try {
    const args = ['template', MODEL, '--messages', m.f, '--add-generation-prompt'];
    if (t) args.push('--tools', t.f);
    const r = await gmlx(args);
    if (r.code !== 0) throw new Error(`gmlx template: exit ${r.code}\n${r.stderr}`);
    return r.stdout;
  } finally {
    m.cleanup();
    t?.cleanup();
  }
}

/** greedy reference of a whole conversation: gmlx template | gmlx run --raw -f (as chat.sh checks chat) */
export async function chatRef(messages, { n, tools } = {}) {
  const prompt = await render(messages, tools);
  const p = tmpFile('prompt.txt', prompt);
  try {
    return parseRun(await gmlx(['run', MODEL, '--raw', '-f', p.f, '--temp', '0', '-n', String(n)]), 'gmlx run --raw -f');
  } finally {
    p.cleanup();
  }
}

/** the number of prompt tokens of a conversation: gmlx template then gmlx tokenize */
export async function promptTokens(messages, tools) {
  const prompt = await render(messages, tools);
  const p = tmpFile('prompt.txt', prompt);
  try {
    const r = await gmlx(['tokenize', MODEL, '-f', p.f]);
    if (r.code !== 0) throw new Error(`gmlx tokenize: exit ${r.code}\n${r.stderr}`);
    return r.stdout.trim().split(/\s+/).filter(Boolean).length;
  } finally {
    p.cleanup();
  }
}

/** fetch with a time limit; resolves {status, headers, text, json (or undefined)} */
export async function http(url, { method = 'GET', headers = {}, body, timeout = 30000 } = {}) {
  const res = await fetch(url, { method, headers, body, signal: AbortSignal.timeout(timeout) });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

/** POSTs a JSON value (or a raw string/Buffer) to the main server with the key */
export function post(route, body, { url = URL_MAIN, key = KEY, headers = {}, timeout = 60000 } = {}) {
  const raw = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  return http(url + route, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth(key), ...headers },
    body: raw,
    timeout,
  });
}

/** reads a text/event-stream body: [{event, data, comment}] (data joined over its lines) */
export async function readSSE(res, { onEvent } = {}) {
  const dec = new TextDecoder();
  let buf = '';
  const events = [];
  const take = (block) => {
    const ev = { event: undefined, data: undefined, comments: [] };
    for (const line of block.split('\n')) {
      if (line === '') continue;
      if (line.startsWith(':')) ev.comments.push(line);
      else {
        const i = line.indexOf(':');
        const field = i < 0 ? line : line.slice(0, i);
        let value = i < 0 ? '' : line.slice(i + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'event') ev.event = value;
        else if (field === 'data') ev.data = ev.data === undefined ? value : ev.data + '\n' + value;
        else ev.unknown = (ev.unknown || []).concat(field);
      }
    }
    events.push(ev);
    onEvent?.(ev);
  };
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true }).replace(/\r\n?/g, '\n');
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      take(buf.slice(0, i));
      buf = buf.slice(i + 2);
    }
  }
  buf += dec.decode();
  return { events, rest: buf };
}

/** parses Prometheus text: {name: total over its label sets}, and the raw sample lines */
export function parseMetrics(text) {
  const sums = {};
  const samples = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const v = Number(m[3] === '+Inf' ? Infinity : m[3]);
    samples.push({ name: m[1], labels: m[2] || '', value: v });
    sums[m[1]] = (sums[m[1]] || 0) + v;
  }
  return { sums, samples, text };
}

/** splits an HTTP response out of raw bytes: {status, headers (lower-case), body (Buffer)} */
export function parseHttp(buf) {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const head = buf.subarray(0, end).toString('latin1').split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(head[0]);
  if (!m) return { status: -1, headers: {}, body: buf, statusLine: head[0] };
  const headers = {};
  for (const h of head.slice(1)) {
    const i = h.indexOf(':');
    if (i > 0) headers[h.slice(0, i).trim().toLowerCase()] = h.slice(i + 1).trim();
  }
  let body = buf.subarray(end + 4);
  let complete = false;
  if (headers['content-length'] !== undefined) {
    const n = Number(headers['content-length']);
    complete = body.length >= n;
    body = body.subarray(0, n);
  } else if (/chunked/i.test(headers['transfer-encoding'] || '')) {
    // decode chunks as far as they go
    const out = [];
    let p = 0;
    for (;;) {
      const e = body.indexOf('\r\n', p);
      if (e < 0) break;
      const size = parseInt(body.subarray(p, e).toString('latin1'), 16);
      if (!(size >= 0)) break;
      if (size === 0) {
        complete = true;
        break;
      }
      if (body.length < e + 2 + size) break;
      out.push(body.subarray(e + 2, e + 2 + size));
      p = e + 2 + size + 2;
    }
    body = Buffer.concat(out);
  } else if (Number(m[1]) === 204 || Number(m[1]) === 304) complete = true;
  return { status: Number(m[1]), headers, body, complete, statusLine: head[0] };
}

/** sends raw bytes over a new TCP connection and reads the answer until it is complete, the
 *  server closes, or the time limit. parts: Buffers/strings written in order, waiting for the
 *  socket to drain; writing stops as soon as the server starts answering (a 413 or 431 is
 *  answered before the whole body or header is read). Resolves
 *  {status, headers, body, json, closed, timedOut, error, sentAll, raw} (status -1: nothing came). */
export function rawHttp(url, parts, { timeout = 20000 } = {}) {
  const u = new URL(url);
  if (!Array.isArray(parts)) parts = [parts];
  return new Promise((resolve) => {
    const sock = net.connect(Number(u.port), u.hostname);
    const chunks = [];
    let done = false;
    let error = null;
    let sentAll = false;
    let closed = false;
    const got = () => Buffer.concat(chunks);
    const finish = (why) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      const raw = got();
      const r = parseHttp(raw) || { status: -1, headers: {}, body: raw };
      let json;
      try {
        json = JSON.parse(r.body.toString('utf8'));
      } catch {}
      resolve({ ...r, json, closed, timedOut: why === 'timeout', error, sentAll, raw });
    };
    const timer = setTimeout(() => finish('timeout'), timeout);
    sock.on('data', (d) => {
      chunks.push(d);
      const r = parseHttp(got());
      if (r && r.complete) finish('complete');
    });
    sock.on('end', () => {
      closed = true;
      finish('end');
    });
    sock.on('close', () => {
      closed = true;
      finish('close');
    });
    sock.on('error', (e) => {
      error = e.code || e.message;
    });
    sock.on('connect', async () => {
      // a part of up to 1 MiB in one write (the kernel takes it before any answer can come
      // back); larger ones 64 KiB at a time, looking for an answer in between, as curl does
      for (const p of parts) {
        const b = Buffer.isBuffer(p) ? p : Buffer.from(p, 'latin1');
        const step = b.length <= 1 << 20 ? Math.max(b.length, 1) : 65536;
        for (let off = 0; off < b.length || (b.length === 0 && off === 0); off += step) {
          if (done || chunks.length || error) return;
          const ok = sock.write(b.subarray(off, off + step));
          if (!ok) await new Promise((r) => sock.once('drain', r).once('close', r));
          else await new Promise((r) => setImmediate(r));
          if (b.length === 0) break;
        }
      }
      sentAll = true;
    });
  });
}

/** a plain request in raw bytes (Connection: close unless headers say otherwise) */
export function rawRequest(method, route, { body, headers = {}, host = '127.0.0.1', key = KEY } = {}) {
  const b = body === undefined ? Buffer.alloc(0) : Buffer.isBuffer(body) ? body : Buffer.from(body);
  const h = { Host: host, Connection: 'close', ...(key ? { Authorization: `Bearer ${key}` } : {}), ...headers };
  if (body !== undefined && !Object.keys(h).some((k) => /^(content-length|transfer-encoding)$/i.test(k)))
    h['Content-Length'] = String(b.length);
  let head = `${method} ${route} HTTP/1.1\r\n`;
  for (const [k, v] of Object.entries(h)) head += `${k}: ${v}\r\n`;
  return [Buffer.from(head + '\r\n', 'latin1'), b];
}

/** reads a process's resident memory (VmRSS) in bytes, or NaN */
export function rssBytes(pid) {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : NaN;
  } catch {
    return NaN;
  }
}

/** asserts an OpenAI-shaped error body: {"error": {"message": string, "type": string, ...}} */
export function isOpenAIError(json) {
  return (
    json && typeof json === 'object' && json.error && typeof json.error === 'object' &&
    typeof json.error.message === 'string' && json.error.message.length > 0 && typeof json.error.type === 'string'
  );
}

/** asserts an Anthropic-shaped error body: {"type": "error", "error": {"type": string, "message": string}} */
export function isAnthropicError(json) {
  return (
    json && json.type === 'error' && json.error && typeof json.error.type === 'string' &&
    typeof json.error.message === 'string' && json.error.message.length > 0
  );
}

/** percentile of sorted numbers */
export function pct(sorted, p) {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}
