#!/usr/bin/env python3
"""Speed through the API: gmlx serve against gmlx run on the same model, and against llama.cpp's
llama-server on the same GGUF with the same client.

For each engine, a first request (the start's one-off costs, cold with --cold; reported apart),
then R rounds of one streamed chat completion (temperature 0, ignore_eos, N tokens),
each with its own prompt ("Round k: TEXT", so no round reuses another's cache); the client times
the first token (TTFT, from sending the request) and the decode rate ((tokens - 1) / (last token -
first token)). gmlx run gives the same figures for the same prompts from its -v line (prefill time
stands for its TTFT: it has no HTTP, template or queue in front). Prints each round and the medians
with the ratios, and --json FILE writes them.

Usage: serve_bench.py MODEL [-n 128] [--rounds 3] [--prompt TEXT] [--gmlx build/release/bin/gmlx]
                     [--llama-server PATH] [--threads T] [--ctx 4096] [--cold] [-- GMLX_FLAGS...]
  --cold  drop the page cache before each engine starts (needs root), for files larger than RAM
Standard library only; the servers run on 127.0.0.1 and are stopped at the end.
"""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def drop_caches():
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        print(f"serve_bench: cannot drop the page cache ({e}); --cold needs root", file=sys.stderr)


def stream_chat(port, prompt, n, timeout):
    """One streamed chat completion; returns (ttft_s, decode_tok_s, tokens, prompt_tokens)."""
    body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": n, "temperature": 0, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}, "cache_prompt": False})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    first = last = None
    chunks = 0
    usage = {}
    buf = b""
    while True:
        data = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not data:
            break
        buf += data
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            for line in ev.split(b"\n"):
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                d = json.loads(line[6:])
                if d.get("usage"):
                    usage = d["usage"]
                for ch in d.get("choices") or []:
                    delta = ch.get("delta") or {}
                    if delta.get("content") or delta.get("reasoning_content"):
                        now = time.monotonic()
                        first = first or now
                        last = now
                        chunks += 1
    c.close()
    tokens = usage.get("completion_tokens") or chunks
    if first is None:
        raise RuntimeError("no token came back")
    rate = (tokens - 1) / (last - first) if tokens > 1 and last > first else float("nan")
    return first - t0, rate, tokens, usage.get("prompt_tokens")


def wait_ready(proc, port, log, timeout=600):
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {open(log).read()[-2000:]}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the server did not become ready")


def run_server(name, argv, port, prompts, n, log, first):
    """The first request (the load's and a cold start's one-off costs: reported apart as "first"),
    then the rounds."""
    print(f"[{name}] {' '.join(argv)}", file=sys.stderr)
    with open(log, "w") as lf:
        proc = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT)
    rows = []
    try:
        wait_ready(proc, port, log)
        ttft, rate, tokens, ptok = stream_chat(port, first, n, 3600)
        first_row = {"ttft_s": ttft, "decode_tok_s": rate, "tokens": tokens, "prompt_tokens": ptok}
        print(f"[{name}] first request: ttft {ttft:.3f} s, decode {rate:.2f} tok/s", file=sys.stderr)
        for p in prompts:
            ttft, rate, tokens, ptok = stream_chat(port, p, n, 3600)
            rows.append({"ttft_s": ttft, "decode_tok_s": rate, "tokens": tokens, "prompt_tokens": ptok})
            print(f"[{name}] ttft {ttft:.3f} s, decode {rate:.2f} tok/s, {tokens} tokens, prompt {ptok}",
                  file=sys.stderr)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return rows, first_row


def run_cli(gmlx, model, prompts, n, flags):
    rows = []
    pat = re.compile(r"\[run\] prompt (\d+) tokens, ([\d.]+) tok/s; decode (\d+) tokens, ([\d.]+) tok/s")
    for p in prompts:
        argv = [gmlx, "run", model, "--temp", "0", "-n", str(n), "--ignore-eos", "-v", "-p", p] + flags
        out = subprocess.run(argv, capture_output=True, text=True, check=False)
        m = pat.search(out.stderr)
        if not m:
            raise RuntimeError(f"gmlx run printed no timing line: {out.stderr[-1500:]}")
        pt, pr, dt, dr = int(m[1]), float(m[2]), int(m[3]), float(m[4])
        rows.append({"ttft_s": pt / pr, "decode_tok_s": dr, "tokens": dt, "prompt_tokens": pt})
        print(f"[gmlx run] prefill {pt / pr:.3f} s, decode {dr:.2f} tok/s, {dt} tokens, prompt {pt}", file=sys.stderr)
    return rows


def med(rows, k):
    v = [r[k] for r in rows if r[k] == r[k]]
    return statistics.median(v) if v else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt", default="Write a short story about a lighthouse keeper who finds a message in a bottle.")
    ap.add_argument("--gmlx", default=os.path.join(os.path.dirname(__file__), "../../build/release/bin/gmlx"))
    ap.add_argument("--llama-server")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--llama-arg", action="append", default=[],
                    help="an extra llama-server argument (repeat; e.g. --llama-arg=--no-repack for a file "
                         "larger than RAM, which llama.cpp would otherwise copy into memory)")
    ap.add_argument("gmlx_flags", nargs="*")
    a = ap.parse_args()
    prompts = [f"Round {k + 1}: {a.prompt}" for k in range(a.rounds)]
    first = f"Round 0: {a.prompt}"
    res = {"model": a.model, "n": a.n, "rounds": a.rounds, "threads": a.threads}
    if a.cold:
        drop_caches()
    run_rows = run_cli(a.gmlx, a.model, [first] + prompts, a.n, ["-t", str(a.threads), "-c", str(a.ctx)] + a.gmlx_flags)
    res["gmlx_run"], res["gmlx_run_first"] = run_rows[1:], run_rows[0]
    if a.cold:
        drop_caches()
    port = free_port()
    res["gmlx_serve"], res["gmlx_serve_first"] = run_server(
        "gmlx serve", [a.gmlx, "serve", a.model, "--port", str(port), "-t", str(a.threads), "-c", str(a.ctx)]
        + a.gmlx_flags, port, prompts, a.n, "/tmp/serve_bench_gmlx.log", first)
    if a.llama_server:
        if a.cold:
            drop_caches()
        port = free_port()
        res["llama_server"], res["llama_server_first"] = run_server(
            "llama-server", [a.llama_server, "-m", a.model, "--port", str(port), "--host", "127.0.0.1", "-t",
                             str(a.threads), "-c", str(a.ctx), "--jinja", "-np", "1", "--no-webui"] + a.llama_arg,
            port, prompts, a.n, "/tmp/serve_bench_llama.log", first)
    print(f"\n{os.path.basename(a.model)}: {a.rounds} rounds of {a.n} tokens, {a.threads} threads (medians)")
    print(f"{'engine':<14} {'first TTFT s':>13} {'TTFT s':>9} {'decode tok/s':>13}   (first: the first request"
          f" after the start{', from a dropped page cache' if a.cold else ''}; gmlx run: its prefill time)")
    for k in ("gmlx_run", "gmlx_serve", "llama_server"):
        if k in res:
            print(f"{k:<14} {res[k + '_first']['ttft_s']:>13.3f} {med(res[k], 'ttft_s'):>9.3f} "
                  f"{med(res[k], 'decode_tok_s'):>13.2f}")
    s, r = res["gmlx_serve"], res["gmlx_run"]
    res["serve_over_run_decode"] = med(s, "decode_tok_s") / med(r, "decode_tok_s")
    print(f"gmlx serve / gmlx run: decode {res['serve_over_run_decode']:.3f}x")
    if "llama_server" in res:
        l = res["llama_server"]
        res["serve_over_llama_decode"] = med(s, "decode_tok_s") / med(l, "decode_tok_s")
        res["llama_over_serve_ttft"] = med(l, "ttft_s") / med(s, "ttft_s")
        res["llama_over_serve_first_ttft"] = res["llama_server_first"]["ttft_s"] / res["gmlx_serve_first"]["ttft_s"]
        print(f"gmlx serve / llama-server: decode {res['serve_over_llama_decode']:.2f}x, "
              f"TTFT {res['llama_over_serve_ttft']:.2f}x shorter, first TTFT {res['llama_over_serve_first_ttft']:.2f}x "
              f"shorter")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
