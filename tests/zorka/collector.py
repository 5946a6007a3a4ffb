#!/usr/bin/python3
"""A test ZICO collector: the two endpoints of a Zorka agent (spec
specs/zorka-wire.md §7), decoded with Debian's python3-cbor2 (its pure
Python decoder, so that tags 1-8 stay plain tags), with ZICO 2.0's session
rules and status codes:

    POST /agent/submit/agd  202; 401 when Reset is not true and the session
                            is unknown or expired; 500 for a missing session
                            header or a body that is not agent data (any
                            tag but 1 and 2, bad CBOR). Reset: true makes a
                            fresh session first, even when the body then
                            fails (§14.5).
    POST /agent/submit/trc  202; 401 for an unknown or expired session and
                            for malformed trace data; 500 for a missing or
                            bad X-Zorka-Trace-ID and for a TraceBegin on a
                            record whose method is undefined.

Sessions expire after --session-timeout seconds without a request that
was accepted (ZICO: 90). Beyond what ZICO checks, every accepted trc is
checked strictly (a "violation" is counted, the answer stays 202 as ZICO's
would): every symbol and method it uses is defined in its session, a
record's TraceEnd is its last element (the BREAK follows it), TraceBegin
comes before the child records, a child's time lies within its parent's,
a parent is never shorter than a child nor has fewer calls, symbol IDs fit
in 21 bits, a symbol is never redefined with another text.

    collector.py --port P --out DIR [--session-timeout S] [--tls-dir D] [--no-decode]

prints the port on its first line of output. DIR/traces.jsonl gets one
line per accepted trc: the session, the trace ID, and the record tree with
every name resolved; DIR/requests.jsonl every agent request in ZICO's dump
format (stackshot-dump zorka decodes it). Control (not part of ZICO):

    POST /control/fail?n=N&status=S&path=agd|trc|any   answer the next N
                   matching requests with S (after reading them)
    POST /control/restart     forget every session (a collector restart)
    POST /control/stall?ms=M  hold every agent answer M ms (0: off)
    GET  /control/stats       counters as JSON
"""
import argparse
import base64
import http.server
import io
import json
import os
import re
import socketserver
import sys
import threading
import time
import urllib.parse

from cbor2 import decoder as pydecoder
from cbor2.types import CBORTag  # the pure Python decoder's own class

# tags 1-8 are Zorka's, not CBOR's date, bignum, ... semantics
pydecoder.semantic_decoders.clear()

MAX_SYMBOL = (1 << 21) - 1


class BadData(Exception):
    pass


def items(body):
    """The top-level items of a CBOR sequence."""
    fp = io.BytesIO(body)
    dec = pydecoder.CBORDecoder(fp)
    out = []
    while fp.tell() < len(body):
        try:
            out.append(dec.decode())
        except Exception as e:  # cbor2 raises several kinds
            raise BadData("CBOR: %s" % e)
    return out


def is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


class Session:
    def __init__(self, sid):
        self.sid = sid
        self.symbols = {}
        self.methods = {}
        self.used = time.monotonic()


class State:
    def __init__(self, out, timeout, decode=True):
        self.decode = decode
        self.lock = threading.Lock()
        self.sessions = {}
        self.timeout = timeout
        self.out = out
        self.fail = []  # [n, status, path]
        self.stall_ms = 0
        self.stats = {"agd": 0, "trc": 0, "accepted_agd": 0, "accepted_trc": 0,
                      "status": {}, "violations": [], "resets": 0, "records": 0,
                      "expired": 0, "restarts": 0, "connections": 0}

    def count(self, status):
        k = str(status)
        self.stats["status"][k] = self.stats["status"].get(k, 0) + 1

    def violation(self, what):
        if len(self.stats["violations"]) < 100:
            self.stats["violations"].append(what)

    def session(self, sid):
        s = self.sessions.get(sid)
        if s and time.monotonic() - s.used > self.timeout:
            del self.sessions[sid]
            self.stats["expired"] += 1
            return None
        return s


STATE = None


# ---- agent data -------------------------------------------------------------

def apply_agd(sess, body):
    """Register the definitions; raises BadData for what ZICO refuses."""
    pending_syms = {}
    for it in items(body):
        if not isinstance(it, CBORTag) or it.tag not in (1, 2):
            raise BadData("not allowed in agent state data: %r" % (it,))
        v = it.value
        if it.tag == 1:
            if not (isinstance(v, list) and len(v) == 2 and is_uint(v[0]) and isinstance(v[1], str)):
                raise BadData("bad string def %r" % (v,))
            sid, text = v
            if sid == 0 or sid > MAX_SYMBOL:
                STATE.violation("symbol id %d out of range" % sid)
            old = sess.symbols.get(sid)
            if old is not None and old != text:
                STATE.violation("symbol %d redefined: %r then %r" % (sid, old, text))
            if old is None:
                sess.symbols[sid] = text  # the first definition wins
        else:
            if not (isinstance(v, list) and len(v) == 4 and all(is_uint(x) for x in v)):
                raise BadData("bad method def %r" % (v,))
            mid, c, m, s = v
            for ref in (c, m, s):
                if ref not in sess.symbols:
                    STATE.violation("method %d uses symbol %d before its definition" % (mid, ref))
            if mid not in sess.methods:
                sess.methods[mid] = (c, m, s)
    return pending_syms


# ---- trace data -------------------------------------------------------------

class Checker:
    def __init__(self, sess):
        self.sess = sess
        self.problems = []
        self.begin_without_method = False
        self.n_records = 0

    def sym(self, i):
        if i not in self.sess.symbols:
            self.problems.append("symbol %r undefined" % (i,))
            return "<?%r>" % (i,)
        return self.sess.symbols[i]

    def record(self, tag, depth=0):
        if not (isinstance(tag, CBORTag) and tag.tag == 3 and isinstance(tag.value, list)):
            raise BadData("not a record: %r" % (tag,))
        v = tag.value
        if len(v) < 3 or not is_int(v[0]) or not is_uint(v[1]):
            raise BadData("bad record head")
        self.n_records += 1
        rec = {"tstart": v[0], "mid": v[1], "attrs": {}, "children": []}
        meth = self.sess.methods.get(v[1])
        if meth is None:
            self.problems.append("method %d undefined" % v[1])
            rec.update({"class": "<?>", "method": "<?>", "sig": "<?>"})
        else:
            rec.update({"class": self.sym(meth[0]), "method": self.sym(meth[1]),
                        "sig": self.sym(meth[2])})
        end = v[-1]
        if not (isinstance(end, CBORTag) and end.tag == 4):
            raise BadData("record without TraceEnd as its last element")
        e = end.value
        if not (isinstance(e, list) and len(e) in (2, 3) and is_int(e[0]) and is_uint(e[1])):
            raise BadData("bad TraceEnd %r" % (e,))
        rec["tstop"], rec["calls"] = e[0], e[1]
        rec["flags"] = e[2] if len(e) == 3 else 0
        seen_child = False
        for el in v[2:-1]:
            if not isinstance(el, CBORTag):
                raise BadData("untagged element %r" % (el,))
            if el.tag == 3:
                seen_child = True
                rec["children"].append(self.record(el, depth + 1))
            elif el.tag == 5:
                b = el.value
                if not (isinstance(b, list) and 2 <= len(b) <= 4 and all(is_int(x) for x in b)):
                    raise BadData("bad TraceBegin %r" % (b,))
                if seen_child:
                    self.problems.append("TraceBegin after a child record")
                if meth is None:
                    self.begin_without_method = True
                rec["begin"] = {"clock": b[0], "ttype": self.sym(b[1]),
                                "span": b[2] if len(b) > 2 else 0,
                                "parent": b[3] if len(b) > 3 else 0}
            elif el.tag == 6:
                a = el.value
                if not (isinstance(a, list) and len(a) in (2, 3)):
                    raise BadData("bad attribute %r" % (a,))
                name = self.sym(a[-2])
                rec["attrs"][name] = a[-1]
            elif el.tag in (7, 8):
                rec.setdefault("exceptions", []).append(repr(el.value))
            elif el.tag == 4:
                raise BadData("TraceEnd not last in its record")
            else:
                raise BadData("unknown tag %d" % el.tag)
        # durations add up
        for c in rec["children"]:
            if c["tstart"] < rec["tstart"] or c["tstop"] > rec["tstop"]:
                self.problems.append("child %s.%s outside its parent %s.%s" % (
                    c["class"], c["method"], rec["class"], rec["method"]))
            if c["tstop"] - c["tstart"] > rec["tstop"] - rec["tstart"]:
                self.problems.append("child longer than its parent")
            if c["calls"] > rec["calls"]:
                self.problems.append("child with more calls than its parent")
        if rec["tstop"] < rec["tstart"]:
            self.problems.append("record ends before it starts")
        return rec


def check_trc(sess, body):
    ch = Checker(sess)
    recs = [ch.record(it) for it in items(body)]
    if not recs:
        raise BadData("empty trace data")
    return ch, recs


# ---- HTTP -------------------------------------------------------------------

TRACE_ID = re.compile(r"^[0-9a-fA-F]{16,32}$")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        with STATE.lock:
            STATE.stats["connections"] += 1

    def log_message(self, *a):
        pass

    def reply(self, status, doc=None):
        body = json.dumps(doc).encode() if doc is not None else b""
        self.send_response(status)
        if body:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_body(self):
        n = int(self.headers.get("Content-Length", "0"))
        return self.rfile.read(n)

    def do_GET(self):
        if self.path == "/control/stats":
            with STATE.lock:
                doc = dict(STATE.stats)
                doc["sessions"] = len(STATE.sessions)
            self.reply(200, doc)
        else:
            self.reply(404, {"reason": "not found"})

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        body = self.read_body()
        if url.path.startswith("/control/"):
            return self.control(url.path, q)
        kind = {"/agent/submit/agd": "agd", "/agent/submit/trc": "trc"}.get(url.path)
        if not kind:
            return self.reply(404, {"reason": "not found"})
        with STATE.lock:
            stall = STATE.stall_ms
        if stall:
            time.sleep(stall / 1000.0)
        with STATE.lock:
            STATE.stats[kind] += 1
            self.dump(url.path, body)
            status, doc = self.scripted(kind)
            if status is None:
                status, doc = (self.agd if kind == "agd" else self.trc)(body)
            STATE.count(status)
        self.reply(status, doc)

    def dump(self, uri, body):
        """Every agent request in ZICO's dump format (requests.jsonl), which
        stackshot-dump zorka reads."""
        headers = {k: [v] for k, v in self.headers.items() if k.lower().startswith("x-zorka")
                   or k.lower() == "content-type"}
        with open(os.path.join(STATE.out, "requests.jsonl"), "a") as f:
            f.write(json.dumps({"uri": uri, "headers": headers, "t": "%d" % (time.time() * 1000),
                                "body": base64.b64encode(body).decode()}) + "\n")

    def scripted(self, kind):
        for f in STATE.fail:
            if f[0] > 0 and f[2] in (kind, "any"):
                f[0] -= 1
                return f[1], {"reason": "scripted"}
        return None, None

    def agd(self, body):
        sid = self.headers.get("X-Zorka-Session-ID")
        if not sid:
            return 500, {"reason": "internal error"}
        reset = self.headers.get("X-Zorka-Session-Reset", "").lower() == "true"
        if reset:
            STATE.sessions[sid] = Session(sid)
            STATE.stats["resets"] += 1
        sess = STATE.session(sid)
        if sess is None:
            return 401, {"reason": "invalid or missing session ID header"}
        try:
            if STATE.decode:
                apply_agd(sess, body)
            elif body[:1] not in (b"\xc1", b"\xc2"):
                raise BadData("not agent data")
        except BadData as e:
            STATE.violation("agd refused: %s" % e)
            return 500, {"reason": "internal error"}
        sess.used = time.monotonic()
        STATE.stats["accepted_agd"] += 1
        return 202, None

    def trc(self, body):
        sid = self.headers.get("X-Zorka-Session-ID")
        if not sid:
            return 500, {"reason": "internal error"}
        sess = STATE.session(sid)
        if sess is None:
            return 401, {"reason": "invalid or missing session ID header"}
        tid = self.headers.get("X-Zorka-Trace-ID")
        if not tid or not TRACE_ID.match(tid):
            return 500, {"reason": "internal error"}
        if not STATE.decode:  # the backends matrix: fast, the session rules only
            if body[:2] != b"\xc3\x9f":
                return 401, {"reason": "malformed data or missing header"}
            sess.used = time.monotonic()
            STATE.stats["accepted_trc"] += 1
            return 202, None
        try:
            ch, recs = check_trc(sess, body)
        except BadData as e:
            STATE.violation("trc refused: %s" % e)
            return 401, {"reason": "malformed data or missing header"}
        if ch.begin_without_method:
            return 500, {"reason": "internal error"}
        for p in ch.problems:
            STATE.violation(p)
        sess.used = time.monotonic()
        STATE.stats["accepted_trc"] += 1
        STATE.stats["records"] += ch.n_records
        with open(os.path.join(STATE.out, "traces.jsonl"), "a") as f:
            f.write(json.dumps({"sid": sid, "trace_id": tid, "problems": ch.problems,
                                "records": recs, "bytes": len(body)}) + "\n")
        return 202, None

    def control(self, path, q):
        with STATE.lock:
            if path == "/control/fail":
                STATE.fail.append([int(q.get("n", "1")), int(q.get("status", "500")),
                                   q.get("path", "any")])
            elif path == "/control/restart":
                STATE.sessions.clear()
                STATE.stats["restarts"] += 1
            elif path == "/control/stall":
                STATE.stall_ms = int(q.get("ms", "0"))
            else:
                return self.reply(404, {"reason": "not found"})
        self.reply(200, {"ok": True})


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def tls_context(cert_dir):
    """A server context with a test CA made by openssl in cert_dir (the HTTP
    client's test server makes it: tests/http/http_server.py)."""
    import ssl
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "http"))
    from http_server import make_certs
    make_certs(cert_dir)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(cert_dir, "server.crt"), os.path.join(cert_dir, "server.key"))
    return ctx


def start(out, port=0, session_timeout=90.0, tls_dir=None, decode=True):
    """Serve on a thread; returns the server (server_address[1] is the
    port). One collector per process (its state is global)."""
    global STATE
    os.makedirs(out, exist_ok=True)
    STATE = State(out, session_timeout, decode)
    srv = Server(("127.0.0.1", port), Handler)
    if tls_dir:
        srv.socket = tls_context(tls_dir).wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--session-timeout", type=float, default=90.0)
    ap.add_argument("--tls-dir", help="serve https with a test CA made here")
    ap.add_argument("--no-decode", action="store_true",
                    help="session rules only, bodies not decoded (fast, for load tests)")
    a = ap.parse_args()
    srv = start(a.out, a.port, a.session_timeout, a.tls_dir, not a.no_decode)
    print(srv.server_address[1], flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
