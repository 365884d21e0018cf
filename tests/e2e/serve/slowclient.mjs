// Slow clients against gmlx serve (run by tests/e2e/serve.sh; plain node, exit status 0 = pass):
//  - GMLX_SLOW_HEADERS (32) raw sockets send a request's header one byte per second (slowloris),
//    GMLX_SLOW_BODIES (4) send a complete header and then the body one byte per second, and one
//    socket connects and sends nothing, for GMLX_SLOW_SECONDS (20) seconds;
//  - meanwhile a normal client sends a completion every 300 ms, each over a new connection: each
//    must be answered within GMLX_SLOW_PROMPT_MS (5000) ms with the reference text (fetched
//    before the slow sockets start);
//  - at the end each slow socket was either closed by the server (after its read timeout; the
//    time and any answer, such as 408, are printed) or is still open and harmless (the normal
//    requests went through); the server still answers /health and a completion.
// More slow sockets than the server's connection limit (GMLX_SLOW_HEADERS=300 against the default
// limit of 256) show whether a slowloris can lock normal clients out.
import http from 'node:http';
import net from 'node:net';
import { URL_MAIN, KEY, auth, sleep } from './lib.mjs';

const SECONDS = Number(process.env.GMLX_SLOW_SECONDS || 20);
const N_HEADERS = Number(process.env.GMLX_SLOW_HEADERS || 32);
const N_BODIES = Number(process.env.GMLX_SLOW_BODIES || 4);
const PROMPT_MS = Number(process.env.GMLX_SLOW_PROMPT_MS || 5000);
const u = new URL(URL_MAIN);
const fails = [];
const fail = (m) => {
  console.log(`FAIL: ${m}`);
  fails.push(m);
};

const MSG = { messages: [{ role: 'user', content: 'Q: 605+877=? A:' }], temperature: 0, max_tokens: 8 };
const BODY = JSON.stringify(MSG);
const HEAD = `POST /v1/chat/completions HTTP/1.1\r\nHost: ${u.host}\r\n${KEY ? `Authorization: Bearer ${KEY}\r\n` : ''}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(BODY)}\r\n\r\n`;

/** a socket that writes `bytes` one per second after `prefix`, recording what the server does */
function slowSocket(kind, prefix, bytes) {
  const s = { kind, sent: 0, closedAt: null, answer: '', error: null, t0: Date.now() };
  const sock = net.connect(Number(u.port), u.hostname);
  s.sock = sock;
  let timer = null;
  sock.on('connect', () => {
    if (prefix) sock.write(prefix);
    if (!bytes.length) return;
    timer = setInterval(() => {
      if (s.sent >= bytes.length || sock.destroyed) return clearInterval(timer);
      sock.write(bytes.subarray(s.sent, s.sent + 1), (e) => { if (e) s.error = s.error ?? e.code; });
      s.sent++;
    }, 1000);
  });
  sock.on('data', (d) => { s.answer += d.toString('latin1'); });
  const closed = () => {
    if (s.closedAt === null) s.closedAt = (Date.now() - s.t0) / 1000;
    clearInterval(timer);
  };
  sock.on('end', closed);
  sock.on('close', closed);
  sock.on('error', (e) => { s.error = s.error ?? e.code; });
  s.stop = () => { clearInterval(timer); sock.destroy(); };
  return s;
}

/** one completion over a new connection (no kept-alive socket from before the slow ones) */
function completion() {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const req = http.request({
      host: u.hostname, port: u.port, path: '/v1/chat/completions', method: 'POST', agent: false,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(BODY), connection: 'close', ...auth() },
    });
    const timer = setTimeout(() => req.destroy(new Error(`no answer in ${PROMPT_MS * 3} ms`)), PROMPT_MS * 3);
    req.on('error', (e) => {
      clearTimeout(timer);
      resolve({ ms: Date.now() - t0, status: -1, text: String(e.code ?? e.message) });
    });
    req.on('response', (res) => {
      let raw = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { raw += d; });
      res.on('end', () => {
        clearTimeout(timer);
        let text;
        try {
          text = JSON.parse(raw).choices[0].message.content;
        } catch {
          text = raw.slice(0, 200);
        }
        resolve({ ms: Date.now() - t0, status: res.statusCode, text });
      });
    });
    req.end(BODY);
  });
}

async function main() {
  const ref = await completion();
  if (ref.status !== 200) {
    console.log(`slowclient: the reference request failed: ${ref.status} ${ref.text}`);
    process.exit(1);
  }
  const slow = [];
  const head = Buffer.from(HEAD);
  for (let i = 0; i < N_HEADERS; i++) slow.push(slowSocket('header', null, head));
  for (let i = 0; i < N_BODIES; i++) slow.push(slowSocket('body', head, Buffer.from(BODY)));
  slow.push(slowSocket('silent', null, Buffer.alloc(0)));
  await sleep(1500); // every slow socket connected and started
  const t0 = Date.now();
  const lat = [];
  let n = 0;
  while (Date.now() - t0 < SECONDS * 1000) {
    const r = await completion();
    n++;
    lat.push(r.ms);
    if (r.status !== 200) fail(`normal request ${n}: status ${r.status} ${r.text}`);
    else if (r.text !== ref.text) fail(`normal request ${n}: ${JSON.stringify(r.text)} != ${JSON.stringify(ref.text)}`);
    if (r.ms > PROMPT_MS) fail(`normal request ${n} took ${r.ms} ms (limit ${PROMPT_MS}) beside the slow sockets`);
    await sleep(300);
  }
  lat.sort((a, b) => a - b);
  console.log(`slowclient: ${n} normal requests beside ${slow.length} slow sockets in ${SECONDS} s: max ${lat.at(-1)} ms, median ${lat[lat.length >> 1]} ms`);
  for (const kind of ['header', 'body', 'silent']) {
    const ss = slow.filter((s) => s.kind === kind);
    const closed = ss.filter((s) => s.closedAt !== null);
    const answers = [...new Set(closed.map((s) => (/^HTTP\/1\.[01] \d{3}/.exec(s.answer) || ['(no answer)'])[0]))];
    const times = closed.map((s) => s.closedAt).sort((a, b) => a - b);
    console.log(`slowclient: ${kind}: ${ss.length} sockets, ${closed.length} closed by the server` +
      (closed.length ? ` after ${times[0].toFixed(1)}-${times.at(-1).toFixed(1)} s (${ss.reduce((a, s) => a + s.sent, 0)} bytes sent in all), answers: ${answers.join(', ')}` : ', none closed (still open, harmless: the normal requests went through)'));
    // a slow request the server gave up on must not have been answered 200 with a partial body
    for (const s of closed) if (/^HTTP\/1\.[01] 200/.test(s.answer) && s.sent < (kind === 'body' ? Buffer.byteLength(BODY) : head.length)) fail(`${kind} socket answered 200 before its request was complete`);
  }
  for (const s of slow) s.stop();
  await sleep(200);
  const h = await fetch(URL_MAIN + '/health', { signal: AbortSignal.timeout(10000) }).catch((e) => ({ status: String(e) }));
  if (h.status !== 200) fail(`/health after the slow clients: ${h.status}`);
  const last = await completion();
  if (last.status !== 200 || last.text !== ref.text) fail(`completion after the slow clients: ${last.status} ${last.text}`);
  console.log(`slowclient: ${fails.length ? `FAILED (${fails.length})` : 'ok'}`);
  process.exit(fails.length ? 1 : 0);
}

main().catch((e) => {
  console.log(`slowclient: ${e.stack}`);
  process.exit(1);
});
