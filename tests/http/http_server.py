#!/usr/bin/python3
"""A local HTTP/1.1 server for the HTTP client's tests (Python 3 standard
library and the openssl command only).

    http_server.py --dir DIR

makes a test CA, a server certificate (127.0.0.1, localhost) and a client
certificate with openssl in DIR, listens on three loopback ports (plain
HTTP, HTTPS, HTTPS that requires a client certificate) and writes
DIR/ready (key=value lines: ports and file names) when it is ready.

Every answer says which connection carried the request and how many
requests that connection had carried, so a test checks keep-alive at the
server. Paths (any method):

    /echo[?close=1|drop=1]  200, JSON: method, path, body length, sha256,
                            chunked or not, conn, nth, headers, client_cn;
                            close=1 answers "Connection: close", drop=1
                            closes the socket right after the answer
    /status/NNN[?ra=V]      status NNN, Retry-After: V when given
                            (ra=dateS: an HTTP date S seconds ahead)
    /silent                 reads the request, never answers
    /garbage                answers bytes that are not HTTP, closes
    /close                  closes without an answer
    /halfheaders            a status line and half the headers, then closes
    /big                    200 with a 200,000-byte body
"""
import argparse
import email.utils
import hashlib
import http.server
import json
import os
import select
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

conn_lock = threading.Lock()
conn_count = 0


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def make_certs(d):
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=stackshot test CA", cwd=d)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "extendedKeyUsage=serverAuth\n")
    with open(os.path.join(d, "client.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    for who in ("server", "client"):
        openssl("req", *ec, "-keyout", who + ".key", "-out", who + ".csr",
                "-subj", "/CN=stackshot-test-" + who, cwd=d)
        openssl("x509", "-req", "-in", who + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", who + ".crt", "-days", "2",
                "-extfile", who + ".ext", cwd=d)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        global conn_count
        super().setup()
        with conn_lock:
            conn_count += 1
            self.conn_id = conn_count
        self.nth = 0

    def log_message(self, *args):
        pass

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                line = self.rfile.readline()
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return body, True
                body += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length", "0"))
        return self.rfile.read(n), False

    def answer(self, status, body, extra=()):
        self.send_response(status)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def client_cn(self):
        try:
            cert = self.connection.getpeercert()
        except AttributeError:
            return None
        for rdn in (cert or {}).get("subject", ()):
            for k, v in rdn:
                if k == "commonName":
                    return v
        return None

    def handle_any(self):
        self.nth += 1
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        path = url.path
        if path == "/close":
            self.close_connection = True
            return
        if path == "/halfheaders":
            self.read_body()
            self.wfile.write(b"HTTP/1.1 202 Accepted\r\nServer: test\r\nContent-Le")
            self.wfile.flush()
            self.close_connection = True
            return
        if path == "/garbage":
            self.wfile.write(b"SSH-2.0-OpenSSH_9.2 not http at all\r\n\r\n\x00\x01\x02")
            self.wfile.flush()
            self.close_connection = True
            return
        body, chunked = self.read_body()
        if path == "/silent":
            # until the client goes away (or 30 s)
            end = time.time() + 30
            while time.time() < end:
                r, _, _ = select.select([self.connection], [], [], 0.2)
                if r and not self.connection.recv(1, 0x40):  # MSG_DONTWAIT peek-ish
                    break
            self.close_connection = True
            return
        if path.startswith("/status/"):
            extra = []
            ra = q.get("ra")
            if ra is not None:
                if ra.startswith("date"):
                    ra = email.utils.formatdate(time.time() + int(ra[4:]), usegmt=True)
                extra.append(("Retry-After", ra))
            self.answer(int(path[8:]), b"status", extra)
            return
        if path == "/big":
            self.answer(200, b"x" * 200000)
            return
        if path == "/echo":
            doc = {
                "method": self.command,
                "path": path,
                "len": len(body),
                "sha256": hashlib.sha256(body).hexdigest(),
                "chunked": chunked,
                "conn": self.conn_id,
                "nth": self.nth,
                "headers": {k: v for k, v in self.headers.items()},
                "client_cn": self.client_cn(),
            }
            extra = [("Content-Type", "application/json")]
            if q.get("close"):
                extra.append(("Connection", "close"))
            self.answer(200, json.dumps(doc).encode(), extra)
            if q.get("drop"):
                self.close_connection = True
            return
        self.answer(404, b"no such path")

    do_POST = do_PUT = do_GET = do_PATCH = handle_any


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        # a client that went away mid-request is what some tests do
        if not isinstance(sys.exc_info()[1], (ConnectionError, ssl.SSLError)):
            super().handle_error(request, client_address)


def serve(port_name, ctx):
    srv = Server(("127.0.0.1", 0), Handler)
    if ctx:
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return port_name, srv.server_address[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()
    d = a.dir
    make_certs(d)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(os.path.join(d, "server.crt"), os.path.join(d, "server.key"))
    mtls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    mtls.load_cert_chain(os.path.join(d, "server.crt"), os.path.join(d, "server.key"))
    mtls.load_verify_locations(os.path.join(d, "ca.crt"))
    mtls.verify_mode = ssl.CERT_REQUIRED
    ports = [serve("plain", None), serve("tls", tls), serve("mtls", mtls)]
    tmp = os.path.join(d, "ready.tmp")
    with open(tmp, "w") as f:
        for k, v in ports:
            f.write("%s=%d\n" % (k, v))
        for k in ("ca.crt", "client.crt", "client.key"):
            f.write("%s=%s\n" % (k, os.path.join(d, k)))
    os.rename(tmp, os.path.join(d, "ready"))
    # until the test kills us (or an hour passes)
    try:
        time.sleep(3600)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
