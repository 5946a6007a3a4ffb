#!/usr/bin/env python3
"""The Qubership dumps collector for tests: a real Debian nginx in WebDAV
mode, configured as upstream's dumps-collector (specs/qubership-dumps.md
§1.1: `location /diagnostic { root <pv>; dav_methods PUT;
create_full_put_path on; }`), started on a free port, and a checker that
applies the collector's indexing rules (§2.3, §5) to what it stored.

  c = Nginx(workdir, mode="ok"|"403"|"413").start()   # c.base: http://127.0.0.1:<port>
  c.uploads()   -> [Upload(path, kind, pod, ns, when, arrival, problems)]
  c.stop()

Fault servers without nginx: Silent(workdir) accepts connections and
never answers (a slow collector); a port nobody listens on is "down".
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import calendar

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

# spec §2.3 (4), verbatim (Python spells named groups (?P<name>...))
POD_RE = re.compile(r"^(?P<pod_name>(?P<service_name>[a-z0-9]+(?:-[a-z0-9]+)*?)"
                    r"(?:-([a-f0-9]*))?-([a-z0-9]+)(?P<ts>_([0-9]+))?)$")
SUFFIXES = {".td.txt": "td", ".top.txt": "top", ".hprof.zip": "heap"}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Upload:
    def __init__(self, rel, path, arrival):
        self.rel, self.path, self.arrival = rel, path, arrival
        self.problems = []
        self.kind = self.pod = self.ns = self.name = None
        self.when = None
        self.check()

    def check(self):
        """The dumps-collector's rules for one stored file (spec §2.3, §5.3)."""
        parts = self.rel.split("/")
        if len(parts) != 9:
            self.problems.append("%d path segments, not 9" % len(parts))
            return
        ns, y, mo, d, h, mi, s, pod, name = parts
        self.ns, self.pod, self.name = ns, pod, name
        if ns in (".", ".."):
            self.problems.append("namespace %r" % ns)
        widths = [4, 2, 2, 2, 2, 2]
        for v, w in zip((y, mo, d, h, mi, s), widths):
            if not v.isdigit() or len(v) != w:
                self.problems.append("time part %r is not %d zero-padded digits" % (v, w))
        if not self.problems:
            self.when = calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(s), 0, 0, 0))
            if self.arrival is not None:
                late = self.arrival - self.when
                if late > 300:
                    self.problems.append("path time %d s before arrival (never indexed)" % late)
                if late < -5:
                    self.problems.append("path time %d s in the future" % -late)
        if not POD_RE.match(pod):
            self.problems.append("pod directory %r fails the collector's pattern" % pod)
        for suf, kind in SUFFIXES.items():
            if name.endswith(suf):
                self.kind = kind
        if not self.kind:
            self.problems.append("file name %r has no known suffix" % name)
        if not re.match(r"^\d{8}T\d{6}\.", name):
            self.problems.append("file name %r does not start with YYYYMMDDTHHMMSS" % name)

    def data(self):
        with open(self.path, "rb") as f:
            return f.read()

    def __repr__(self):
        return "<%s %s%s>" % (self.kind, self.rel, (" " + "; ".join(self.problems)) if self.problems else "")


class Nginx:
    """mode: "ok", "403" (no storage configured), "413" (bodies over 100
    bytes refused); tls=(cert, key) serves https, as the collector's
    nginx-https.conf (no client certificate asked)."""

    def __init__(self, workdir, mode="ok", tls=None):
        self.dir = os.path.join(workdir, "nginx")
        self.pv = os.path.join(self.dir, "pv")
        self.mode = mode
        self.tls = tls
        self.proc = None
        self.port = free_port()
        self.base = "%s://127.0.0.1:%d" % ("https" if tls else "http", self.port)

    def config(self):
        d = self.dir
        if self.mode == "403":
            # upstream's entrypoint when no storage is configured
            loc = 'return 403 "Diagnostic storage has not been configured";'
        else:
            size = "100" if self.mode == "413" else "10G"
            loc = ("root %s; dav_methods PUT; create_full_put_path on; dav_access user:rw; "
                   "client_max_body_size %s; client_body_temp_path %s/body;" % (self.pv, size, d))
        user = "user root;\n" if os.geteuid() == 0 else ""
        return """%sworker_processes 1;
daemon off;
pid %s/nginx.pid;
error_log %s/error.log info;
events { worker_connections 64; }
http {
  log_format arrivals '$msec $request_method $status $request_length $uri';
  access_log %s/access.log arrivals;
  client_body_temp_path %s/body;
  proxy_temp_path %s/proxy;
  fastcgi_temp_path %s/fastcgi;
  uwsgi_temp_path %s/uwsgi;
  scgi_temp_path %s/scgi;
  server {
    listen 127.0.0.1:%d%s;
    %s
    location /diagnostic { %s }
  }
}
""" % (user, d, d, d, d, d, d, d, d, self.port, " ssl" if self.tls else "",
       "ssl_certificate %s; ssl_certificate_key %s;" % self.tls if self.tls else "", loc)

    def start(self):
        os.makedirs(self.pv, exist_ok=True)
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write(self.config())
        self.proc = subprocess.Popen([NGINX, "-c", conf, "-p", self.dir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("nginx did not start: " + self.proc.stderr.read().decode())
                time.sleep(0.02)
        raise RuntimeError("nginx did not listen on %d" % self.port)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def requests(self):
        """(arrival, method, status, uri) of every request nginx logged."""
        out = []
        try:
            with open(os.path.join(self.dir, "access.log")) as f:
                for line in f:
                    p = line.split()
                    if len(p) >= 5:
                        out.append((float(p[0]), p[1], int(p[2]), p[4]))
        except FileNotFoundError:
            pass
        return out

    def uploads(self):
        """Every stored file, judged by the collector's rules; arrival from
        the access log (the time nginx finished the request)."""
        arrivals = {}
        for t, m, st, uri in self.requests():
            if m == "PUT" and st in (201, 204):
                arrivals[uri] = t
        root = os.path.join(self.pv, "diagnostic")
        found = []
        for dirpath, _, files in os.walk(root):
            for fn in files:
                path = os.path.join(dirpath, fn)
                rel = os.path.relpath(path, root)
                found.append(Upload(rel, path, arrivals.get("/diagnostic/" + rel)))
        found.sort(key=lambda u: u.rel.split("/")[-1])
        return found


class Silent:
    """Accepts connections, reads what comes, never answers: a stalled collector."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.base = "http://127.0.0.1:%d" % self.port
        self.accepted = 0
        self.conns = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.conns.append(c)
            threading.Thread(target=self.drain, args=(c,), daemon=True).start()

    def drain(self, c):
        try:
            while c.recv(65536):
                pass
        except OSError:
            pass

    def stop(self):
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
