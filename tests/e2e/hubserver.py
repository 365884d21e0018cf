#!/usr/bin/env python3
"""A small stand-in for the parts of the Hugging Face hub that gmlx uses, for e2e tests.

Serves DIR/ORG/REPO/<path> (Python 3 standard library only):
  GET/HEAD /ORG/REPO/resolve/REV/PATH    the file (REV ignored); single Range (bytes=a-b, a-, -n)
                                         -> 206 + Content-Range, start past the end -> 416;
                                         X-Linked-Size, X-Linked-Etag and ETag ("<sha256>")
  GET /api/models/ORG/REPO/tree/REV[/SUB][?recursive=true|1]   the hub's JSON listing
  GET /api/models/ORG/REPO[/revision/REV]                      model info with "siblings"
  POST /_control  {"faults": [SPEC...], "token": "T"|null, "clear_log": true}  (each key optional;
                  "faults" replaces the list)
  GET /_log       the request log, one JSON object a line: i, method, path, range, auth, status,
                  sent (body bytes written), size
Faults (--fault, repeatable; /_control): KIND[=N][:GLOB][,once] with KIND one of
  status=CODE  answer CODE with a small body        short=N  full headers, close after N bytes
  stall=N      headers + N bytes, then hang         norange  ignore Range, answer 200 whole file
  badhash      wrong sha256 in X-Linked-Etag/ETag and the listings' lfs.oid
  redirect     302 to /_cdn/ORG/REPO/PATH (which serves the bytes with an ETag, no X-Linked-*)
GLOB (fnmatch) is matched against the path in the repo and against ORG/REPO/PATH; no GLOB
matches every file. Faults apply to /resolve/ (badhash to the listings too). short=N and
stall=N take effect only on a GET whose answer is longer than N bytes, norange only where a
Range was sent. ",once": used up by the first request it takes effect on (norange: a GET).
Modifiers (norange, badhash) combine; of the others the first that takes effect decides.
"""
import argparse
import fnmatch
import hashlib
import json
import os
import re
import select
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

FAULT_RE = re.compile(r"^(status|short|stall|norange|badhash|redirect)(?:=(\d+))?(?::([^,]+))?((?:,once)?)$")


class Fault:
    def __init__(self, spec):
        m = FAULT_RE.match(spec.strip())
        if not m:
            raise ValueError("bad fault '%s' (KIND[=N][:GLOB][,once])" % spec)
        self.spec, self.kind, n, self.glob, once = spec.strip(), m.group(1), m.group(2), m.group(3), m.group(4)
        if self.kind in ("status", "short", "stall") and n is None:
            raise ValueError("fault '%s': %s needs =N" % (spec, self.kind))
        if self.kind not in ("status", "short", "stall") and n is not None:
            raise ValueError("fault '%s': %s takes no =N" % (spec, self.kind))
        self.n = int(n) if n is not None else 0
        if self.kind == "status" and not 100 <= self.n <= 599:
            raise ValueError("fault '%s': not an HTTP status" % spec)
        self.once, self.used = bool(once), False

    def matches(self, org_repo, path):
        return not self.glob or fnmatch.fnmatchcase(path, self.glob) or \
            fnmatch.fnmatchcase(org_repo + "/" + path, self.glob)


class State:
    def __init__(self, args):
        self.root = os.path.realpath(args.root)
        self.lock = threading.Lock()
        self.faults = [Fault(s) for s in args.fault]
        self.token = args.require_token
        self.log, self.log_file = [], args.log
        self.hashes = {}  # realpath -> ((mtime_ns, size), sha256 hex, git sha1 hex)
        self.hash_max = args.hash_max_mb << 20
        self.deadline = time.monotonic() + args.max_seconds
        self.stop = threading.Event()

    def candidates(self, org_repo, path, kinds):
        """The faults of these kinds that match this file and are not used up."""
        with self.lock:
            return [f for f in self.faults
                    if f.kind in kinds and not (f.once and f.used) and f.matches(org_repo, path)]

    def use(self, f, consume=True):
        """Whether fault f takes effect now; a once-fault does only the first time (consume)."""
        if not f.once:
            return True
        with self.lock:
            if f.used:
                return False
            f.used = consume
            return True

    def file_hashes(self, real):
        """(sha256, git sha1) of a file, cached per path, mtime and size; None over --hash-max-mb."""
        st = os.stat(real)
        key = (st.st_mtime_ns, st.st_size)
        with self.lock:
            c = self.hashes.get(real)
        if c and c[0] == key:
            return c[1], c[2]
        if st.st_size > self.hash_max:
            return None, None
        sha, git = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % st.st_size)
        with open(real, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                sha.update(chunk)
                git.update(chunk)
        with self.lock:
            self.hashes[real] = (key, sha.hexdigest(), git.hexdigest())
        return sha.hexdigest(), git.hexdigest()

    def record(self, entry):
        with self.lock:
            entry["i"] = len(self.log)
            self.log.append(entry)

    def finish(self, entry):
        if self.log_file:
            with self.lock, open(self.log_file, "a") as f:
                f.write(json.dumps(entry) + "\n")


def flip(h):
    return h if h is None else ("0" if h[0] != "0" else "1") + h[1:]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hubserver/1"
    st = None  # State, set in main

    def log_message(self, fmt, *args):  # quiet: the request log is /_log and --log
        pass

    # ---- plumbing ----
    def handle_one_request(self):
        try:
            super().handle_one_request()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError):
            self.close_connection = True
        except Exception as e:  # never let one request take the server down
            sys.stderr.write("hubserver: %s %s: %r\n" % (self.command, self.path, e))
            self.close_connection = True

    def send(self, code, body=b"", ctype="application/json", headers=()):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.entry["status"] = code
        if self.command != "HEAD":
            self.wfile.write(body)
            self.entry["sent"] += len(body)

    def send_json(self, code, obj, headers=()):
        self.send(code, json.dumps(obj), "application/json", headers)

    def do_HEAD(self):
        self.route()

    def do_GET(self):
        self.route()

    def do_POST(self):
        self.route()

    def route(self):
        u = urlsplit(self.path)
        self.query = parse_qs(u.query)
        self.entry = {"method": self.command, "path": self.path, "range": self.headers.get("Range"),
                      "auth": self.headers.get("Authorization") is not None, "status": None, "sent": 0,
                      "t": round(time.time(), 3)}
        if u.path in ("/_control", "/_log"):
            return self.control() if u.path == "/_control" else self.send_log()
        self.st.record(self.entry)
        try:
            if self.st.token is not None and self.headers.get("Authorization") != "Bearer " + self.st.token:
                return self.send_json(401, {"error": "Invalid credentials in Authorization header"},
                                      [("X-Error-Code", "Unauthorized")])
            m = re.match(r"^/(_cdn/)?([^/]+)/([^/]+)/resolve/([^/]+)/(.+)$", u.path) if self.command != "POST" else None
            if m:
                return self.resolve(unquote(m.group(2)), unquote(m.group(3)), unquote(m.group(5)), bool(m.group(1)))
            m = re.match(r"^/api/models/([^/]+)/([^/]+)/tree/([^/]+)(?:/(.*))?$", u.path)
            if m and self.command == "GET":
                return self.tree(unquote(m.group(1)), unquote(m.group(2)), unquote(m.group(4) or ""))
            m = re.match(r"^/api/models/([^/]+)/([^/]+)(?:/revision/([^/]+))?/?$", u.path)
            if m and self.command == "GET":
                return self.info(unquote(m.group(1)), unquote(m.group(2)))
            self.send_json(404, {"error": "Not Found"})
        finally:
            self.st.finish(self.entry)

    # ---- helpers ----
    def repo_dir(self, org, repo):
        if org in (".", "..", "") or repo in (".", "..", "") or org.startswith("_"):
            return None
        d = os.path.join(self.st.root, org, repo)
        return d if os.path.isdir(d) else None

    def safe_path(self, repo_dir, path):
        parts = [p for p in path.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            return None
        real = os.path.realpath(os.path.join(repo_dir, *parts))
        return real if real.startswith(self.st.root + os.sep) else None

    def entries(self, repo_dir, org_repo, sub, recursive):
        base = self.safe_path(repo_dir, sub) if sub else repo_dir
        if not base or not os.path.isdir(base):
            return None
        out = []
        for dirpath, dirs, files in os.walk(base):
            dirs.sort()
            rel_dir = os.path.relpath(dirpath, repo_dir)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
            for d in dirs:
                out.append({"type": "directory", "oid": hashlib.sha1((rel_dir + d).encode()).hexdigest(),
                            "size": 0, "path": rel_dir + d})
            for fn in sorted(files):
                rel = rel_dir + fn
                real = os.path.join(dirpath, fn)
                size = os.path.getsize(real)
                sha, git = self.st.file_hashes(real)
                e = {"type": "file", "oid": git or hashlib.sha1(rel.encode()).hexdigest(), "size": size, "path": rel}
                if sha:
                    if any(self.st.use(f) for f in self.st.candidates(org_repo, rel, ("badhash",))):
                        sha = flip(sha)
                    e["lfs"] = {"oid": sha, "size": size, "pointerSize": 134}
                out.append(e)
            if not recursive:
                break
        out.sort(key=lambda e: e["path"])
        return out

    # ---- routes ----
    def tree(self, org, repo, sub):
        d = self.repo_dir(org, repo)
        if not d:
            return self.send_json(404, {"error": "Repository not found"}, [("X-Error-Code", "RepoNotFound")])
        rec = self.query.get("recursive", ["false"])[0].lower() in ("true", "1")
        listing = self.entries(d, org + "/" + repo, sub, rec)
        if listing is None:
            return self.send_json(404, {"error": "Entry not found"}, [("X-Error-Code", "EntryNotFound")])
        self.send_json(200, listing)

    def info(self, org, repo):
        d = self.repo_dir(org, repo)
        if not d:
            return self.send_json(404, {"error": "Repository not found"}, [("X-Error-Code", "RepoNotFound")])
        files = [e for e in self.entries(d, org + "/" + repo, "", True) if e["type"] == "file"]
        sib = [{"rfilename": e["path"], "size": e["size"], **({"lfs": e["lfs"]} if "lfs" in e else {})}
               for e in files]
        self.send_json(200, {"id": org + "/" + repo, "sha": hashlib.sha1((org + "/" + repo).encode()).hexdigest(), "siblings": sib})

    def resolve(self, org, repo, path, cdn):
        d = self.repo_dir(org, repo)
        if not d:
            return self.send_json(404, {"error": "Repository not found"}, [("X-Error-Code", "RepoNotFound")])
        real = self.safe_path(d, path)
        if not real or not os.path.isfile(real):
            return self.send_json(404, {"error": "Entry not found"}, [("X-Error-Code", "EntryNotFound")])
        org_repo = org + "/" + repo
        kinds = ("status", "short", "stall", "norange", "badhash") + (() if cdn else ("redirect",))
        cands = self.st.candidates(org_repo, path, kinds)
        size = os.path.getsize(real)
        self.entry["size"] = size
        sha, git = self.st.file_hashes(real)
        if any(f.kind == "badhash" and self.st.use(f) for f in cands):
            sha = flip(sha)
        linked = [("X-Linked-Size", str(size)), ("X-Linked-Etag", '"%s"' % sha)] if sha and not cdn else []
        rng = self.headers.get("Range")
        m = re.match(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", rng or "")
        if m and not (m.group(1) or m.group(2)):
            m = None  # "bytes=-": ignored, as a malformed Range is
        norange = any(f.kind == "norange" and self.st.use(f, self.command == "GET") for f in cands) if m else False
        if norange:
            m = None
        start, end, unsat = 0, size - 1, False
        if m and m.group(1):
            start = int(m.group(1))
            end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            unsat = start >= size or (m.group(2) != "" and int(m.group(2)) < start)
        elif m:  # suffix: the last n bytes
            start = max(0, size - int(m.group(2)))
            unsat = size == 0 or int(m.group(2)) == 0
        length = 0 if unsat else max(0, end - start + 1)
        body_fault = None
        for f in cands:  # the first of these that takes effect decides the answer
            if f.kind in ("status", "redirect") or (f.kind in ("short", "stall") and self.command == "GET"
                                                    and length > f.n):
                if self.st.use(f):
                    body_fault = f
                    break
        if body_fault and body_fault.kind == "status":
            return self.send(body_fault.n, "injected HTTP %d for %s\n" % (body_fault.n, path), "text/plain")
        if body_fault and body_fault.kind == "redirect":
            loc = "http://%s/_cdn/%s/resolve/main/%s" % (self.headers.get("Host", "127.0.0.1"), org_repo, quote(path))
            return self.send(302, "", "text/plain", linked + [("Location", loc)])
        if unsat:
            return self.send(416, "", "text/plain", linked + [("Content-Range", "bytes */%d" % size)])
        partial = m is not None
        self.send_response(206 if partial else 200)
        self.entry["status"] = 206 if partial else 200
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        if not norange:
            self.send_header("Accept-Ranges", "bytes")
        if partial:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        for k, v in linked:
            self.send_header(k, v)
        self.send_header("ETag", '"%s"' % (sha or git))
        self.end_headers()
        if self.command == "HEAD":
            return
        limit = length
        if body_fault and body_fault.kind in ("short", "stall"):
            limit = min(length, body_fault.n)
        with open(real, "rb") as f:
            f.seek(start)
            left = limit
            while left > 0:
                chunk = f.read(min(left, 1 << 16))
                if not chunk:
                    break
                self.wfile.write(chunk)
                self.entry["sent"] += len(chunk)
                left -= len(chunk)
        self.wfile.flush()
        if body_fault and body_fault.kind == "stall" and limit < length:
            self.hang()
        if limit < length:
            self.close_connection = True

    def hang(self):
        """Send nothing more until the client hangs up, the server stops or time runs out."""
        sock = self.connection
        while not self.st.stop.is_set() and time.monotonic() < self.st.deadline:
            r, _, _ = select.select([sock], [], [], 0.2)
            if r:
                try:
                    if not sock.recv(4096):
                        break
                except OSError:
                    break
        self.close_connection = True

    def control(self):
        if self.command == "GET" and self.path.startswith("/_control"):
            with self.st.lock:
                return self.send_json(200, {"faults": [f.spec for f in self.st.faults], "token": self.st.token})
        if self.command != "POST":
            return self.send_json(405, {"error": "POST a JSON object"})
        try:
            n = int(self.headers.get("Content-Length") or 0)
            req = json.loads(self.rfile.read(n) or b"{}")
            faults = [Fault(s) for s in req.get("faults", [])] if "faults" in req else None
        except (ValueError, TypeError, AttributeError) as e:
            return self.send_json(400, {"error": str(e)})
        with self.st.lock:
            if faults is not None:
                self.st.faults = faults
            if "token" in req:
                self.st.token = req["token"]
            if req.get("clear_log"):
                self.st.log = []
            out = {"ok": True, "faults": [f.spec for f in self.st.faults], "token": self.st.token}
        self.send_json(200, out)

    def send_log(self):
        with self.st.lock:
            text = "".join(json.dumps(e) + "\n" for e in self.st.log)
        self.send(200, text, "application/x-ndjson")


def main():
    ap = argparse.ArgumentParser(description="A stand-in for the Hugging Face hub (tests).")
    ap.add_argument("--root", required=True, help="DIR holding ORG/REPO/<files>")
    ap.add_argument("--port", type=int, default=0, help="0: a free port")
    ap.add_argument("--port-file", help="the port is written here (atomically) once listening")
    ap.add_argument("--fault", action="append", default=[], help="KIND[=N][:GLOB][,once] (repeatable)")
    ap.add_argument("--require-token", help="answer 401 without 'Authorization: Bearer TOKEN'")
    ap.add_argument("--log", help="also append each request's log line to this file")
    ap.add_argument("--max-seconds", type=float, default=300, help="exit after this long (default 300)")
    ap.add_argument("--hash-max-mb", type=int, default=256,
                    help="files larger than this get no sha256 (no X-Linked-*, no lfs) (default 256)")
    args = ap.parse_args()
    if not os.path.isdir(args.root):
        ap.error("--root %s: not a folder" % args.root)
    try:
        st = State(args)
    except ValueError as e:
        ap.error(str(e))
    Handler.st = st
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.allow_reuse_address = True
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    srv.timeout = 1
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: st.stop.set())
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    t.start()
    port = srv.server_address[1]
    if args.port_file:
        tmp = "%s.tmp.%d" % (args.port_file, os.getpid())
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, args.port_file)
    st.stop.wait(max(0.0, st.deadline - time.monotonic()))
    st.stop.set()
    srv.shutdown()
    srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
