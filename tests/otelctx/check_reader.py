#!/usr/bin/env python3
"""check_reader.py: another process reads what the agent publishes.

    check_reader.py <capi_host> <reader> <libstackshot.so> <workdir>

A host using the C API runs with the agent enabled. The reader (reader.c,
process_vm_readv, the OTEPs' reading protocols) must find its process
context (OTEP 4719): the resource (service.name as configured, process.pid
the host's) and the thread-context keys; and, through the address of the
host's otel_thread_ctx_v1, the span the host set (OTEP 4947), then the
record marked invalid once cleared. A forked child publishes its own
context (its pid), never the parent's (MADV_DONTFORK). With a JDK on the
PATH, a JVM with the agent (-agentpath) publishes its context too (the
resource with process.runtime.name)."""
import shutil
import os
import subprocess
import sys
import time

host, reader, lib, work = sys.argv[1:5]
os.makedirs(work, exist_ok=True)
env = dict(os.environ)
env.update({
    "SPLUNK_PROFILER_ENABLED": "true",
    "STACKSHOT_EXPORTERS": "text",
    "STACKSHOT_OUTPUT_DIR": work,
    "SPLUNK_PROFILER_CALL_STACK_INTERVAL": "100",
    "OTEL_SERVICE_NAME": "otelctx-svc",
    "LD_PRELOAD": lib,
})
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def read(pid, slot=None, want=None, timeout=15.0):
    """Reader output as a dict of 'resource k' / 'extra k' -> value, plus
    'span' and 'mapping'; polled until want(d) or the timeout."""
    end = time.time() + timeout
    d = {}
    while time.time() < end:
        args = [reader, str(pid)] + ([slot] if slot else [])
        p = subprocess.run(args, capture_output=True, text=True)
        d = {"rc": p.returncode}
        for line in p.stdout.splitlines():
            word, _, rest = line.partition(" ")
            if word in ("resource", "extra"):
                k, _, v = rest.partition("=")
                d[word + " " + k] = v
            else:
                d[word] = rest
        if want is None or want(d):
            return d
        time.sleep(0.1)
    return d


def span_of(first):
    trace = "".join("%02x" % (first + i) for i in range(16))
    span = "".join("%02x" % (0xb0 + first + i) for i in range(8))
    return "valid=1 trace=%s span=%s flags=1" % (trace, span)


def plain():
    p = subprocess.Popen([host], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    word, pid, slot = p.stdout.readline().split()
    check(word == "ready", "host ready")
    d = read(pid, slot, lambda d: d["rc"] == 0)
    print(d)
    check(d["rc"] == 0, "process context found")
    check("OTEL_CTX" in d.get("mapping", ""), "mapping named OTEL_CTX")
    check(d.get("resource service.name") == "otelctx-svc", "service.name")
    check(d.get("resource process.pid") == pid, "process.pid")
    check(d.get("resource telemetry.sdk.name") == "stackshot", "telemetry.sdk.name")
    check(d.get("extra threadlocal.schema_version") == "tlsdesc_v1_dev", "schema version")
    check(d.get("extra threadlocal.attribute_key_map") == "[0]", "attribute key map")
    check(d.get("span") == span_of(0x10), "the C API's span through the TLS record")
    p.stdin.write("next\n")
    p.stdin.flush()
    check(p.stdout.readline().strip() == "cleared", "host cleared")
    d = read(pid, slot)
    check(d.get("span", "").startswith("valid=0"), "cleared: record marked invalid")
    p.stdin.write("end\n")
    p.stdin.flush()
    check(p.wait(timeout=30) == 0, "host exit 0")


def forked():
    p = subprocess.Popen([host, "fork"], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    parent = str(p.pid)
    word, cpid, slot = p.stdout.readline().split()
    check(word == "child", "child ready")
    first = read(cpid, slot, None)
    check(first.get("resource process.pid") in (None, cpid),
          "the child never shows the parent's context")
    d = read(cpid, slot, lambda d: d.get("resource process.pid") == cpid)
    print(d)
    check(d.get("resource process.pid") == cpid, "the child publishes its own context")
    check(d.get("span") == span_of(0x40), "the child's span")
    with open("/proc/%s/maps" % cpid) as f:
        n = sum(1 for line in f if "OTEL_CTX" in line)
    check(n == 1, "one OTEL_CTX mapping in the child (found %d)" % n)
    pd = read(parent, None, lambda d: d["rc"] == 0)
    check(pd.get("resource process.pid") == parent, "the parent's context is its own")
    p.stdin.write("next\nend\n")
    p.stdin.flush()
    p.stdout.read()
    check(p.wait(timeout=30) == 0, "host exit 0")


def jvm():
    java, javac = shutil.which("java"), shutil.which("javac")
    if not java or not javac:
        print("no JDK on the PATH: the JVM case is not run")
        return
    src = os.path.join(work, "OtelCtxSleep.java")
    with open(src, "w") as f:
        f.write("public class OtelCtxSleep { public static void main(String[] a) throws "
                "Exception { System.out.println(\"ready\"); System.out.flush(); "
                "System.in.read(); } }\n")
    subprocess.run([javac, "-d", work, src], check=True)
    jenv = dict(env)
    del jenv["LD_PRELOAD"]
    jenv["OTEL_SERVICE_NAME"] = "otelctx-jvm"
    p = subprocess.Popen([java, "-agentpath:" + lib, "-cp", work, "OtelCtxSleep"], env=jenv,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    check(p.stdout.readline().strip() == "ready", "jvm ready")
    d = read(p.pid, None, lambda d: d["rc"] == 0, timeout=30)
    print(d)
    check(d.get("resource service.name") == "otelctx-jvm", "jvm: service.name")
    check(d.get("resource process.pid") == str(p.pid), "jvm: process.pid")
    check(bool(d.get("resource process.runtime.name")), "jvm: process.runtime.name")
    p.stdin.write("x\n")
    p.stdin.flush()
    check(p.wait(timeout=60) == 0, "jvm exit 0")


plain()
forked()
jvm()
if failures:
    print("FAILED:", failures)
    sys.exit(1)
print("ok")
