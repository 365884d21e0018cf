// Load test of gmlx serve (run by tests/e2e/serve.sh after the node tests; plain node, exit
// status 0 = pass): GMLX_LOAD_CLIENTS (64) concurrent clients for GMLX_LOAD_SECONDS (60) seconds,
// at most GMLX_LOAD_MAX_REQUESTS (40000) requests, each client sending its own distinct prompt at
// temperature 0 with a small max_tokens (every fourth client streams, every third of the rest uses
// /v1/completions). First each prompt's reference answer is fetched alone. During the load:
//  - every request gets 200 or 503, and a 503 carries Retry-After;
//  - no connection error (a reset of a kept-alive socket the server closed while idle, Node's
//    documented race, is retried once and counted apart);
//  - every 200's text equals that prompt's reference answer: nothing lost, nothing mixed up
//    between concurrent requests, streamed or not;
//  - the server's resident memory (VmRSS of GMLX_PID) grows by at most GMLX_LOAD_RSS_MIB (64) MiB
//    from the start of the load to its end;
//  - the server answers /health afterwards.
// Prints counts, p50/p99/max latency of the 200s, throughput and both RSS figures.
import http from 'node:http';
import { URL_MAIN, KEY, rssBytes, pct, sleep } from './lib.mjs';

const SECONDS = Number(process.env.GMLX_LOAD_SECONDS || 60);
const CLIENTS = Number(process.env.GMLX_LOAD_CLIENTS || 64);
const MAX_REQUESTS = Number(process.env.GMLX_LOAD_MAX_REQUESTS || 40000);
const RSS_MIB = Number(process.env.GMLX_LOAD_RSS_MIB || 64);
const PID = Number(process.env.GMLX_PID || 0);
const MAX_TOKENS = 12;
const u = new URL(URL_MAIN);
const agent = new http.Agent({ keepAlive: true, maxSockets: CLIENTS * 2 });

const violations = [];
const violate = (msg) => {
  if (violations.length < 50) console.log(`VIOLATION: ${msg}`);
  violations.push(msg);
};

// distinct prompts of the tasks the bundled model was trained on
function prompts(n) {
  const out = [];
  const letters = 'abcdefghijklmnopqrstuvwxyz';
  for (let i = 0; out.length < n; i++) {
    const a = 100 + ((i * 37) % 800);
    const b = 10 + ((i * 53) % 90);
    switch (i % 4) {
      case 0: out.push(`Q: ${a}+${b}=? A:`); break;
      case 1: out.push(`Sort: ${b} ${a % 97} ${(a * 7) % 89} ${i + 1}`); break;
      case 2: out.push(`Copy: ${letters[i % 26]} ${letters[(i * 7) % 26]} ${letters[(i * 11) % 26]}`); break;
      default: out.push(`Q: ${a}-${b}=? A:`);
    }
  }
  return out;
}

/** one request with node:http: resolves {status, retryAfter, text, finish, ms, err, reused} */
function request(route, body, stream, timeoutMs = 60000) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const data = Buffer.from(JSON.stringify(body));
    const req = http.request({
      host: u.hostname, port: u.port, path: route, method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': data.length, ...(KEY ? { authorization: `Bearer ${KEY}` } : {}) },
    });
    const timer = setTimeout(() => req.destroy(new Error(`no answer in ${timeoutMs} ms`)), timeoutMs);
    req.on('error', (e) => {
      clearTimeout(timer);
      resolve({ err: e, reused: req.reusedSocket, ms: performance.now() - t0 });
    });
    req.on('response', (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('error', (e) => {
        clearTimeout(timer);
        resolve({ err: e, reused: false, ms: performance.now() - t0 });
      });
      res.on('end', () => {
        clearTimeout(timer);
        const raw = Buffer.concat(chunks).toString('utf8');
        const out = { status: res.statusCode, retryAfter: res.headers['retry-after'], ms: performance.now() - t0, raw };
        if (res.statusCode === 200) {
          try {
            if (stream) {
              let text = '';
              let done = false;
              for (const block of raw.replace(/\r\n/g, '\n').split('\n\n')) {
                for (const line of block.split('\n')) {
                  if (!line.startsWith('data:')) continue;
                  const d = line.slice(5).trim();
                  if (d === '[DONE]') { done = true; continue; }
                  const j = JSON.parse(d);
                  const c = j.choices?.[0];
                  text += c?.delta?.content ?? c?.text ?? '';
                  if (c?.finish_reason) out.finish = c.finish_reason;
                }
              }
              if (!done) out.bad = 'stream without data: [DONE]';
              out.text = text;
            } else {
              const j = JSON.parse(raw);
              const c = j.choices[0];
              out.text = c.message ? c.message.content : c.text;
              out.finish = c.finish_reason;
            }
          } catch (e) {
            out.bad = `unparsable 200 body (${e.message}): ${raw.slice(0, 200)}`;
          }
        }
        resolve(out);
      });
    });
    req.end(data);
  });
}

function bodyFor(kind, prompt) {
  const common = { temperature: 0, max_tokens: MAX_TOKENS };
  if (kind === 'completions') return ['/v1/completions', { prompt, ...common }, false];
  if (kind === 'stream') return ['/v1/chat/completions', { messages: [{ role: 'user', content: prompt }], ...common, stream: true }, true];
  return ['/v1/chat/completions', { messages: [{ role: 'user', content: prompt }], ...common }, false];
}
const kindOf = (i) => (i % 4 === 3 ? 'stream' : i % 3 === 2 ? 'completions' : 'chat');

async function main() {
  const P = prompts(CLIENTS);
  // references, one request at a time (the completions route's answer differs: no template)
  const refs = [];
  for (let i = 0; i < CLIENTS; i++) {
    const [route, body] = bodyFor(kindOf(i) === 'completions' ? 'completions' : 'chat', P[i]);
    let r;
    for (let k = 0; k < 20; k++) {
      r = await request(route, body, false);
      if (r.status !== 503) break;
      await sleep(200);
    }
    if (r.status !== 200 || r.bad || typeof r.text !== 'string') {
      console.log(`load: reference ${i} (${JSON.stringify(P[i])}) failed: ${r.status ?? r.err} ${r.bad ?? ''} ${r.raw?.slice(0, 200) ?? ''}`);
      process.exit(1);
    }
    refs.push(r.text);
  }
  const distinct = new Set(refs.map((t, i) => `${kindOf(i) === 'completions'}:${t}`)).size;
  console.log(`load: ${CLIENTS} prompts, ${distinct} distinct reference answers`);

  const rss0 = rssBytes(PID);
  const t0 = Date.now();
  const deadline = t0 + SECONDS * 1000;
  let sent = 0;
  const counts = { 200: 0, 503: 0, other: 0, connErr: 0, keepAliveRetries: 0 };
  const lat = [];
  const perKind = { chat: 0, stream: 0, completions: 0 };

  async function client(i) {
    const kind = kindOf(i);
    const [route, body, stream] = bodyFor(kind, P[i]);
    while (Date.now() < deadline && sent < MAX_REQUESTS) {
      sent++;
      let r = await request(route, body, stream);
      if (r.err && r.reused && r.err.code === 'ECONNRESET') {
        counts.keepAliveRetries++;
        r = await request(route, body, stream);
      }
      if (r.err) {
        counts.connErr++;
        violate(`client ${i}: connection error ${r.err.code ?? ''} ${r.err.message}`);
        await sleep(100);
        continue;
      }
      if (r.status === 200) {
        counts[200]++;
        perKind[kind]++;
        lat.push(r.ms);
        if (r.bad) violate(`client ${i} (${kind}): ${r.bad}`);
        else if (r.text !== refs[i]) violate(`client ${i} (${kind}): ${JSON.stringify(r.text)} != reference ${JSON.stringify(refs[i])}`);
      } else if (r.status === 503) {
        counts[503]++;
        if (r.retryAfter === undefined) violate(`client ${i}: 503 without Retry-After`);
        // back off a little, well under Retry-After, so the queue stays contended
        await sleep(20 + Math.random() * 200);
      } else {
        counts.other++;
        violate(`client ${i} (${kind}): status ${r.status}: ${r.raw?.slice(0, 200)}`);
        await sleep(100);
      }
    }
  }
  await Promise.all(Array.from({ length: CLIENTS }, (_, i) => client(i)));
  const secs = (Date.now() - t0) / 1000;
  await sleep(500);
  const rss1 = rssBytes(PID);

  lat.sort((a, b) => a - b);
  const mib = (b) => (b / 1048576).toFixed(1);
  console.log(`load: ${CLIENTS} clients, ${secs.toFixed(1)} s, ${sent} requests: ${counts[200]} x 200 (chat ${perKind.chat}, stream ${perKind.stream}, completions ${perKind.completions}), ${counts[503]} x 503, ${counts.other} other, ${counts.connErr} connection errors, ${counts.keepAliveRetries} keep-alive retries`);
  console.log(`load: latency of the 200s p50 ${pct(lat, 50)?.toFixed(0)} ms, p99 ${pct(lat, 99)?.toFixed(0)} ms, max ${lat.at(-1)?.toFixed(0)} ms; ${(counts[200] / secs).toFixed(1)} answers/s`);
  if (PID) {
    console.log(`load: server RSS ${mib(rss0)} MiB at the start, ${mib(rss1)} MiB at the end (growth ${mib(rss1 - rss0)} MiB, bound ${RSS_MIB} MiB)`);
    if (!(rss1 - rss0 <= RSS_MIB * 1048576)) violate(`RSS grew by ${mib(rss1 - rss0)} MiB (bound ${RSS_MIB} MiB)`);
  } else console.log('load: GMLX_PID not set, RSS not checked');
  if (counts[200] < CLIENTS) violate(`only ${counts[200]} requests answered 200 in ${secs.toFixed(1)} s`);
  const h = await new Promise((resolve) => {
    const req = http.get({ host: u.hostname, port: u.port, path: '/health', agent: false, timeout: 10000 }, (res) => {
      res.resume();
      resolve(res.statusCode);
    });
    req.on('error', (e) => resolve(e.code));
    req.on('timeout', () => req.destroy(new Error('timeout')));
  });
  if (h !== 200) violate(`/health after the load: ${h}`);
  agent.destroy();
  console.log(`load: ${violations.length ? `FAILED (${violations.length} violations)` : 'ok'}`);
  process.exit(violations.length ? 1 : 0);
}

main().catch((e) => {
  console.log(`load: ${e.stack}`);
  process.exit(1);
});
