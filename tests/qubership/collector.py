#!/usr/bin/env python3
"""A test Qubership collector (specs/qubership-wire.md §3.9), byte for byte.

Accepts agent connections on TCP, answers the handshake with 100605, every
INIT_STREAM_V2 with a fresh UUID, the Java collector's period/size and the
requested sequence id echoed, one 0x00 ack per RCV_DATA and per
REQUEST_ACK_FLUSH (flushed at once). Every rolling file is recorded as
  <out>/c<conn>.<stream>.<seq>.bin
holding the concatenated RCV_DATA payloads (phrase headers kept), the shape
of the spec's vectors; events go to <out>/events.log, one line each.

Fault switches (they apply to the first --fault-conns connections only, so
that the agent's reconnect can be observed):
  --fault drop --after N        close the socket after N commands
  --fault stall --after N       stop reading and answering after N commands
  --fault null-uuid --after N   answer the N-th INIT (0-based) with 16 zero bytes
  --fault ack-ff --after N      answer the first RCV_DATA after N commands with 0xFF, close
  --fault garbage               answer the handshake with 8 bytes of garbage
  --fault blacklist             answer every handshake with 88888888 (all connections)

TLS (REMOTE_DUMP_PORT_SSL): --tls-cert FILE --tls-key FILE serves TLS with
that certificate; a failed handshake is logged ("c1 tls error <why>").

Diagnostic commands (spec §3.4.4): --commands td,top,heap --commands-after N
puts those commands into the ack of the N-th RCV_DATA or REQUEST_ACK_FLUSH
of the first connection; every command sent and every REPORT_COMMAND_RESULT
received is logged ("c1 command sent <hex id> <what>", "c1 command result
<hex id> K|FF").
"""
import argparse
import os
import socket
import ssl
import struct
import sys
import threading
import time
import uuid

V2 = 100605
BLACKLISTED = 88888888
STREAMS = {"trace", "calls", "xml", "sql", "dictionary", "suspend", "params", "gc"}
NO_ROTATION = {"dictionary", "params"}


class Closed(Exception):
    pass


class Conn:
    def __init__(self, server, sock, n):
        self.server, self.sock, self.n = server, sock, n
        self.buf = b""
        self.handles = {}
        self.commands = 0
        self.inits = 0
        self.datas = 0
        self.flushes = 0
        self.acks = 0
        self.max_piece = 0
        self.faulty = n <= server.args.fault_conns

    def log(self, msg):
        self.server.log("c%d %s" % (self.n, msg))

    def read(self, k):
        while len(self.buf) < k:
            d = self.sock.recv(65536)
            if not d:
                raise Closed()
            self.buf += d
        out, self.buf = self.buf[:k], self.buf[k:]
        return out

    def read_string(self, cap=1024):
        (n,) = struct.unpack(">i", self.read(4))
        if n < 0 or n > cap:
            raise ValueError("field length %d" % n)
        return self.read(n)

    def ack(self):
        """One ack byte, or the commands of --commands at the chosen ack."""
        a = self.server.args
        self.acks += 1
        cmds = [c for c in (a.commands or "").split(",") if c]
        if not cmds or self.n != 1 or self.acks != a.commands_after:
            self.sock.sendall(b"\x00")
            return
        out = bytes([len(cmds)])
        for c in cmds:
            cid = uuid.uuid4().bytes
            out += cid + struct.pack(">i", len(c)) + c.encode()
            self.log("command sent %s %s" % (cid.hex(), c))
        self.sock.sendall(out)

    def fault(self, name):
        return self.faulty and self.server.args.fault == name

    def run(self):
        ctx = self.server.tls
        if ctx:
            try:
                self.sock.settimeout(10)
                self.sock = ctx.wrap_socket(self.sock, server_side=True)
                self.sock.settimeout(None)
                self.log("tls %s" % self.sock.version())
            except (ssl.SSLError, OSError) as e:
                self.log("tls error %s" % e)
                self.sock.close()
                return
        try:
            while True:
                self.command()
        except Closed:
            self.log("eof")
        except (ValueError, ConnectionError, OSError) as e:
            self.log("error %s" % e)
        finally:
            for f in self.handles.values():
                f.close()
            try:
                self.sock.close()
            except OSError:
                pass

    def command(self):
        a = self.server.args
        if self.faulty and a.fault in ("drop", "stall") and self.commands >= a.after:
            if a.fault == "drop":
                self.log("fault drop")
                self.sock.shutdown(socket.SHUT_RDWR)
                raise Closed()
            self.log("fault stall")
            time.sleep(a.stall_seconds)
            raise Closed()
        cmd = self.read(1)[0]
        self.commands += 1
        if cmd == 0x14:
            (version,) = struct.unpack(">q", self.read(8))
            pod = self.read_string().decode()
            svc = self.read_string().decode()
            ns = self.read_string().decode()
            self.log("handshake version=%d pod=%s service=%s namespace=%s" % (version, pod, svc, ns))
            if a.fault == "blacklist":
                self.sock.sendall(struct.pack(">q", BLACKLISTED))
                self.log("fault blacklist")
                raise Closed()
            if self.fault("garbage"):
                self.sock.sendall(b"garbage!")
                self.log("fault garbage")
                return
            self.sock.sendall(struct.pack(">q", V2))
        elif cmd == 0x15:
            name = self.read_string().decode()
            seq, reset = struct.unpack(">ii", self.read(8))
            self.log("init %s seq=%d reset=%d" % (name, seq, reset))
            idx = self.inits
            self.inits += 1
            if name not in STREAMS or (self.fault("null-uuid") and idx == a.after):
                self.sock.sendall(bytes(16))
                self.log("null-uuid %s" % name)
                return
            h = uuid.uuid4().bytes
            path = os.path.join(a.out, "c%d.%s.%d.bin" % (self.n, name, seq))
            self.handles[h] = open(path, "wb")
            period, size = (0, 0) if name in NO_ROTATION else (a.period, a.size)
            self.sock.sendall(h + struct.pack(">qqi", period, size, seq))
        elif cmd == 0x02:
            h = self.read(16)
            data = self.read_string()
            if len(data) < 1:
                raise ValueError("empty RCV_DATA")
            if self.fault("ack-ff") and self.commands > a.after:
                self.log("fault ack-ff")
                self.sock.sendall(b"\xff")
                raise Closed()
            f = self.handles.get(h)
            if f is None:
                self.sock.sendall(b"\xff")
                self.log("unknown handle")
                raise Closed()
            f.write(data)
            f.flush()
            self.datas += 1
            self.max_piece = max(self.max_piece, len(data))
            self.server.count("data", len(data))
            self.ack()
        elif cmd == 0x11:
            self.server.count("flush", 1)
            self.flushes += 1
            self.ack()
        elif cmd == 0x13:
            r = self.read(17)
            self.log("command result %s %s" % (r[:16].hex(), {0x4B: "K", 0xFF: "FF"}.get(r[16], "%02x" % r[16])))
        elif cmd == 0x04:
            self.log("close data=%d flushes=%d max_piece=%d" % (self.datas, self.flushes,
                                                                 self.max_piece))
            raise Closed()
        else:
            self.log("unknown command 0x%02x" % cmd)
            self.sock.sendall(b"\xff")
            raise Closed()


class Server:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.counts = {}
        self.conns = 0
        os.makedirs(args.out, exist_ok=True)
        self.events = open(os.path.join(args.out, "events.log"), "a")
        self.tls = None
        if args.tls_cert:
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(args.tls_cert, args.tls_key)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", args.port))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]

    def log(self, msg):
        with self.lock:
            self.events.write("%.3f %s\n" % (time.time(), msg))
            self.events.flush()

    def count(self, k, v):
        with self.lock:
            self.counts[k] = self.counts.get(k, 0) + v

    def serve(self):
        while True:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.conns += 1
                n = self.conns
            self.log("c%d accept" % n)
            threading.Thread(target=Conn(self, s, n).run, daemon=True).start()

    def start(self):
        threading.Thread(target=self.serve, daemon=True).start()
        return self


def parse(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--fault", default="")
    p.add_argument("--after", type=int, default=0)
    p.add_argument("--fault-conns", type=int, default=1)
    p.add_argument("--stall-seconds", type=float, default=3600)
    p.add_argument("--period", type=int, default=300000)
    p.add_argument("--size", type=int, default=2097152)
    p.add_argument("--commands", default="")
    p.add_argument("--tls-cert", default="")
    p.add_argument("--tls-key", default="")
    p.add_argument("--commands-after", type=int, default=10)
    return p.parse_args(argv)


if __name__ == "__main__":
    srv = Server(parse())
    print(srv.port, flush=True)
    srv.serve()
