#!/usr/bin/env python3
"""descriptors.py: the agent keeps no write, read or close through a
descriptor its host closed and got back for a file of its own
(docs/safety/descriptors.md).

  descriptors.py <exporters> <mode>

exporters: text | pprof | flamegraph | text,pprof,flamegraph | qubership |
           otlp_http (otlp_logs over http/protobuf) |
           otlp_grpc (otlp_logs over gRPC: its helper process, to the node
           receiver of tests/otlp; skipped without it)
mode:      before | between | repeat | takeaway (fd_host.c)

Runs fd_host (its own 32 files, closes every descriptor >= 3 while the
agent samples every 20 ms) with the agent preloaded, then asserts:
  - the host's files hold exactly its own bytes (fd_host's exit code 0);
  - the agent's own output keeps receiving rounds after the host's last
    close: text rounds stamped after it, profile files written after it,
    collector data or OTLP requests arriving after it; with takeaway (the
    agent cannot open its file again) the rounds after it are counted
    dropped, not delivered;
  - the agent's accounting at exit balances (taken = delivered + dropped +
    refused, nothing held), and for text every round counted delivered is
    in the agent's file (a write that failed, or went to another file, is
    never counted delivered).
Environment: STACKSHOT_LIB, SS_PRELOAD_PREFIX, SS_FD_HOST, SS_COLLECTOR,
SS_OTLP_SINK (tests/packaging/otlp_sink.js).
"""
import datetime
import glob
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

EXPORTERS, MODE = sys.argv[1], sys.argv[2]
SECONDS = "3"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)
    else:
        print("ok: " + what)


class OtlpHttp(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP logs receiver: 200 and an empty ExportLogsServiceResponse
    (protobuf), connection kept alive so the agent reuses its socket."""
    protocol_version = "HTTP/1.1"
    stamps = []

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(n)
        OtlpHttp.stamps.append(time.time())
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


def start_collector(out):
    py = subprocess.Popen([sys.executable, os.environ["SS_COLLECTOR"], "--out", out],
                          stdout=subprocess.PIPE, text=True)
    port = int(py.stdout.readline())
    return py, port


def text_rounds(path):
    """(seq, unix time) of every round header of a text file."""
    out = []
    with open(path, "rb") as f:
        data = f.read().decode("utf-8", "replace")
    for m in re.finditer(r"^Full thread dump stackshot round (\d+) at (\S+)Z ", data, re.M):
        t = datetime.datetime.strptime(m.group(2), "%Y-%m-%dT%H:%M:%S.%f")
        out.append((int(m.group(1)), t.replace(tzinfo=datetime.timezone.utc).timestamp()))
    return out


def accounting(stderr, pid):
    out = {}
    # "pid P accounting: NAME: rounds T taken = D delivered + X dropped + R
    # refused + H held (...); ... | NAME2: ..." (the exit's one line)
    for line in re.finditer(r"pid (\d+) accounting: (.*)", stderr):
        if int(line.group(1)) != pid:
            continue
        for m in re.finditer(r"(\w+): rounds (\d+) taken = (\d+) delivered \+ (\d+) "
                             r"dropped \+ (\d+) refused \+ (\d+) held", line.group(2)):
            out[m.group(1)] = dict(line=m.group(0), taken=int(m.group(2)),
                                   delivered=int(m.group(3)), dropped=int(m.group(4)),
                                   refused=int(m.group(5)), held=int(m.group(6)))
    return out


def main():
    work = tempfile.mkdtemp(prefix="stackshot-fds-")
    out, host_dir, qb_out = (os.path.join(work, d) for d in ("out", "host", "qb"))
    for d in (host_dir, qb_out):
        os.mkdir(d)
    exporters = "otlp_logs" if EXPORTERS in ("otlp_http", "otlp_grpc") else EXPORTERS
    env = dict(os.environ)
    env.update({
        "LD_PRELOAD": ":".join(p for p in (os.environ.get("SS_PRELOAD_PREFIX"),
                                           os.environ["STACKSHOT_LIB"]) if p),
        "SPLUNK_PROFILER_ENABLED": "true",
        "SPLUNK_PROFILER_CALL_STACK_INTERVAL": "20",
        "STACKSHOT_EXPORTERS": exporters,
        "STACKSHOT_OUTPUT_DIR": out,
        "STACKSHOT_LOG_LEVEL": "debug",
        "STACKSHOT_PROFILES_PERIOD": "1",
        "STACKSHOT_SHUTDOWN_TIMEOUT": "3000",
    })
    collector = server = None
    if EXPORTERS in ("qubership", "otlp_http"):
        env["SS_WAIT_SOCKET"] = "1"  # "between": once the agent is connected
    elif EXPORTERS == "otlp_grpc":
        pass  # the connection is the helper's: "between" is after 150 ms
    else:  # "between": once the agent's first file is there (open, for text)
        env["SS_WAIT_FILE"] = (".txt" if "text" in EXPORTERS else
                               ".pb.gz" if EXPORTERS == "pprof" else ".html")
    if EXPORTERS == "qubership":
        collector, port = start_collector(qb_out)
        env.update({"REMOTE_DUMP_HOST": "127.0.0.1", "REMOTE_DUMP_PORT_PLAIN": str(port),
                    "STACKSHOT_QUBERSHIP_RECONNECT": "200", "POD_NAME": "fdhost",
                    "STACKSHOT_QUBERSHIP_WINDOW": "1"})
    if EXPORTERS == "otlp_http":
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), OtlpHttp)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:%d" % server.server_port,
                    "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
    sink = None
    if EXPORTERS == "otlp_grpc":
        js = os.environ.get("SS_OTLP_SINK", "")
        mods = os.path.join(os.path.dirname(js), "..", "otlp", "node", "node_modules")
        if not shutil.which("node") or not os.path.isdir(mods):
            print("SKIP: node or tests/otlp/node's packages (npm ci) missing")
            sys.exit(77)
        sink = subprocess.Popen(["node", js], stdout=subprocess.PIPE, text=True)
        env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:" +
                    sink.stdout.readline().strip()})
    try:
        res = subprocess.run([os.environ["SS_FD_HOST"], MODE, host_dir, SECONDS], env=env,
                             capture_output=True, text=True, timeout=90)
    finally:
        time.sleep(0.3)
        if collector:
            collector.kill()
        if server:
            server.shutdown()
        sink_seen = {}
        if sink:
            sink.terminate()
            out_line = sink.communicate(timeout=30)[0].strip().splitlines()
            sink_seen = json.loads(out_line[-1]) if out_line else {}
    sys.stdout.write(res.stdout)
    lines = [l for l in res.stderr.splitlines()
             if re.search(r"^fd_host: (?!closing)|rounds taken|closed by the host|host closed|"
                          r"descriptor|Sanitizer|runtime error:|lost", l)]
    lines = lines[:10] + ["..."] + lines[-30:] if len(lines) > 41 else lines
    sys.stdout.write("\n".join(lines) + "\n")
    closes = [int(x) / 1000.0 for x in re.findall(r"^fd_host: closed at (\d+)$", res.stdout, re.M)]
    last_close = closes[-1] if closes else time.time()

    check(res.returncode == 0, "the host's 32 files and 4 socket pairs hold only its own bytes (host exit %s)"
          % res.returncode)
    check(not re.search(r"ERROR: (Address|Leak)Sanitizer|runtime error:", res.stderr),
          "no sanitizer report")
    pids = [int(p) for p in re.findall(r"pid (\d+) accounting: ", res.stderr)]
    pid = pids[0] if pids else -1
    acc = accounting(res.stderr, pid)
    for name in exporters.split(","):
        a = acc.get(name)
        check(a is not None, "%s: accounting line at exit" % name)
        if not a:
            continue
        check(a["held"] == 0 and a["taken"] == a["delivered"] + a["dropped"] + a["refused"],
              "%s: balances: %s" % (name, a["line"]))
        # repeated closes may cut every Qubership window; takeaway may come
        # before the first write: only the other runs must deliver
        if MODE in ("before", "between"):
            check(a["delivered"] > 0, "%s: rounds delivered" % name)

    takeaway = MODE == "takeaway"
    if takeaway:
        out = out + ".gone"  # where fd_host moved the agent's directory
        for name in exporters.split(","):
            a = acc.get(name)
            if a:
                check(a["dropped"] >= (10 if name == "text" else 1),
                      "%s: the rounds it could not write are counted dropped: %s"
                      % (name, a["line"]))
    if "text" in exporters.split(","):
        files = glob.glob(os.path.join(out, "*.txt"))
        check(len(files) == 1, "one text file of the agent's: %s" % files)
        rounds = text_rounds(files[0]) if files else []
        after = [s for s, t in rounds if t > last_close + 0.05]
        check(takeaway or len(after) >= 10, "text: %d rounds in the agent's file after the host's last close"
              % len(after))
        a = acc.get("text")
        if a:
            check(a["delivered"] <= len(set(s for s, _ in rounds)),
                  "text: every round counted delivered is in the agent's file (%d delivered, "
                  "%d in the file)" % (a["delivered"], len(set(s for s, _ in rounds))))
    for name, pat in (("pprof", "*.pb.gz"), ("flamegraph", "*.html")):
        if name in exporters.split(","):
            fresh = [f for f in glob.glob(os.path.join(out, pat))
                     if os.path.getmtime(f) > last_close + 0.05]
            check(takeaway or len(fresh) >= 1, "%s: %d files written after the host's last close"
                  % (name, len(fresh)))
    if EXPORTERS == "qubership":
        fresh = [f for f in glob.glob(os.path.join(qb_out, "*.bin"))
                 if os.path.getmtime(f) > last_close + 0.05]
        check(len(fresh) >= 1, "qubership: %d stream files written after the host's last close"
              % len(fresh))
    if EXPORTERS == "otlp_http":
        n = len([t for t in OtlpHttp.stamps if t > last_close + 0.05])
        check(n >= 1, "otlp http: %d requests after the host's last close" % n)
    if EXPORTERS == "otlp_grpc":
        n = len([t for t in sink_seen.get("stamps", []) if t > last_close + 0.05])
        check(n >= 1, "otlp grpc: %d calls after the host's last close" % n)
        check(re.search(r"gRPC calls made by stackshot-grpc-helper, pid \d+", res.stderr)
              is not None, "otlp grpc: the calls were the helper's")
    if failures:
        print("kept for inspection: " + work)
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
