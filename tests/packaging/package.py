#!/usr/bin/env python3
"""The Debian package, installed on this machine as a user would (label packaging).

    package.py --cpack-config build/CPackConfig.cmake --src tests/packaging --spin spin --out DIR

Builds the .deb with `cpack -G DEB`, installs it with `dpkg -i`, checks its contents (the
modules, LICENSE, man pages, pkg-config and CMake files; dependencies from dpkg-shlibdeps),
runs the installed `stackshot run` on a program and on the installed demo (stackshot-demo: its
threads in their functions), attaches the installed `stackshot attach` to a running JVM, builds a consumer with
`pkg-config --cflags --libs stackshot` and one with a CMake `find_package(stackshot)`
project against the installed files, runs both, and removes the package with `dpkg -r`,
also when a check failed. It changes the machine: it runs only as root, with dpkg and
cpack, and not when a stackshot package is installed already (exit 77 otherwise).
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

FAILED = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILED.append(what)


def run(argv, **kw):
    kw.setdefault("timeout", 300)
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def installed():
    r = run(["dpkg-query", "-W", "-f", "${Status}", "stackshot"])
    return r.returncode == 0 and "installed" in r.stdout and "not-installed" not in r.stdout


def checks(a, tmp, deb):
    info = run(["dpkg-deb", "-f", deb, "Depends"]).stdout
    for dep in ("libc6", "libunwind8", "libdw1"):
        check(dep in info, "Depends (dpkg-shlibdeps) names %s: %s" % (dep, info.strip()))
    r = run(["dpkg", "-i", deb])
    check(r.returncode == 0, "dpkg -i: %s" % r.stderr.strip()[-300:])
    if r.returncode:
        return
    files = run(["dpkg", "-L", "stackshot"]).stdout.split()
    for f in ("/usr/bin/stackshot", "/usr/bin/stackshot-dump", "/usr/include/stackshot.h",
              "/usr/lib/libstackshot.so.0.1.0", "/usr/lib/libstackshot-core.so",
              "/usr/lib/libstackshot-grpc.so", "/usr/lib/libstackshot-http.so",
              "/usr/lib/libstackshot-qubership.so", "/usr/lib/libstackshot-zorka.so",
              "/usr/lib/stackshot-grpc-helper",
              "/usr/lib/pkgconfig/stackshot.pc", "/usr/lib/cmake/stackshot/stackshot-config.cmake",
              "/usr/share/man/man1/stackshot.1", "/usr/share/man/man7/stackshot.7",
              "/usr/share/doc/stackshot/LICENSE"):
        check(f in files, "the package holds " + f)
    lic = open("/usr/share/doc/stackshot/LICENSE").read()
    check("Apache License" in lic and "Version 2.0" in lic, "LICENSE is the Apache-2.0 text")
    r = run(["objdump", "-p", "/usr/lib/libstackshot.so.0.1.0"])
    check(re.search(r"SONAME\s+libstackshot\.so\.0\n", r.stdout) is not None, "soname kept")

    # the installed command, no --lib, no STACKSHOT_LIB: finds /usr/lib/libstackshot.so
    env = {k: v for k, v in os.environ.items() if k not in ("STACKSHOT_LIB", "LD_PRELOAD")}
    out = os.path.join(tmp, "dumps")
    r = run(["/usr/bin/stackshot", "run", "-i", "100", "-e", "text", "-o", out, "--",
             a.spin, "800", "4"], env=env)
    f = glob.glob(os.path.join(out, "*.txt"))
    check(r.returncode == 4 and r.stdout == "spun\n", "installed stackshot run: status kept")
    check(len(f) == 1 and "spin_for" in open(f[0]).read(), "installed stackshot run: stacks")
    # the default exporter's gRPC calls made by the installed helper
    r = run(["/usr/bin/stackshot", "run", "-i", "100", "-e", "otlp_logs", "--", "sleep", "0.6"],
            env=dict(env, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
                     STACKSHOT_LOG_LEVEL="debug"))
    check(re.search(r"gRPC calls made by stackshot-grpc-helper, pid \d+", r.stderr) is not None,
          "installed: gRPC in the helper next to the core: " + r.stderr.strip()[-200:])
    r = run(["/usr/bin/stackshot", "run", "-e", "none", "--", "grep", "-m1", "libstackshot",
             "/proc/self/maps"], env=env)
    check("/usr/lib/libstackshot.so.0.1.0" in r.stdout, "the installed library was preloaded: "
          + r.stdout.strip()[-80:])
    # the demo, as a user tries it first: the installed stackshot-demo under stackshot run
    out = os.path.join(tmp, "demo")
    r = run(["/usr/bin/stackshot", "run", "-i", "200", "-e", "text", "-o", out, "--",
             "/usr/bin/stackshot-demo", "2"], env=env)
    f = glob.glob(os.path.join(out, "stackshot-demo.*.txt"))
    text = open(f[0]).read() if len(f) == 1 else ""
    check(r.returncode == 0 and "/usr/bin/stackshot-demo" in files,
          "the installed demo ran under stackshot run (exit %d)" % r.returncode)
    for thread, func in (("busy-worker", "compute_primes"), ("sleeper", "sleep_forever"),
                         ("mutex-waiter", "wait_for_lock")):
        check('"%s"' % thread in text and func in text,
              "the demo's %s thread in %s" % (thread, func))

    # attach to a running JVM with the installed command: no JDK tool involved
    jdk = "/usr/lib/jvm/java-17-openjdk-amd64/bin/"
    java = jdk + "java"
    if os.path.exists(jdk + "javac"):
        cls = os.path.join(tmp, "classes")
        r = run([jdk + "javac", "-d", cls, os.path.join(a.src, "Spin.java")])
        jvm = subprocess.Popen([java, "-cp", cls, "Spin", "5000"], cwd=tmp, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out = os.path.join(tmp, "attached")
        r = None
        # until the JVM has loaded libjvm.so and installed its signal handlers
        # (refused before: "not a HotSpot JVM", then "does not catch SIGQUIT")
        for _ in range(100):
            r = run(["/usr/bin/stackshot", "attach", str(jvm.pid), "-i", "100", "-e", "text",
                     "-o", out])
            if r.returncode == 0 or ("does not catch SIGQUIT" not in r.stderr and
                                     "is not a HotSpot JVM" not in r.stderr):
                break
            time.sleep(0.1)
        so, se = jvm.communicate(timeout=60)
        f = glob.glob(os.path.join(out, "java.*.txt"))
        check(r.returncode == 0 and "agent loaded into %d" % jvm.pid in r.stdout,
              "installed stackshot attach: %r" % r.stderr[-200:])
        check(jvm.returncode == 0 and so == "spun\n" and len(f) == 1 and
              "at Spin.spin(" in open(f[0]).read(), "the JVM ran on, its Java stacks written")

    r = run(["/usr/bin/stackshot", "--version"])
    check(r.returncode == 0 and r.stdout.startswith("stackshot "), "installed --version")

    # a consumer through pkg-config
    pc = run(["pkg-config", "--cflags", "--libs", "stackshot"])
    check(pc.returncode == 0 and "-lstackshot" in pc.stdout, "pkg-config: " + pc.stdout.strip())
    exe = os.path.join(tmp, "consumer_pc")
    r = run(["cc", "-o", exe, os.path.join(a.src, "consumer.c")] + pc.stdout.split())
    check(r.returncode == 0, "consumer built with pkg-config: " + r.stderr[-300:])
    if r.returncode == 0:
        r = run([exe])
        check(r.returncode == 0 and re.fullmatch(r"stackshot \d+\.\d+\.\d+\n", r.stdout),
              "consumer (pkg-config) runs: %r" % r.stdout)
        r = run(["ldd", exe])
        check(re.search(r"libstackshot\.so\.0 => (/usr)?/lib/libstackshot\.so\.0 ", r.stdout)
              is not None, "it links the installed libstackshot.so.0: " +
              " ".join(l.strip() for l in r.stdout.splitlines() if "stackshot" in l))

    # a consumer through CMake's find_package
    proj = os.path.join(tmp, "cmake_consumer")
    os.makedirs(proj)
    shutil.copy(os.path.join(a.src, "consumer.c"), proj)
    with open(os.path.join(proj, "CMakeLists.txt"), "w") as f:
        f.write("cmake_minimum_required(VERSION 3.18)\nproject(consumer C)\n"
                "find_package(stackshot 0.1 REQUIRED)\n"
                "add_executable(consumer consumer.c)\n"
                "target_link_libraries(consumer PRIVATE stackshot::stackshot)\n")
    b = os.path.join(proj, "build")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CMAKE_")}
    r = run(["cmake", "-S", proj, "-B", b], env=env)
    check(r.returncode == 0, "find_package(stackshot) configures: " + r.stderr[-300:])
    r = run(["cmake", "--build", b], env=env)
    check(r.returncode == 0, "the CMake consumer builds: " + r.stdout[-300:])
    if r.returncode == 0:
        r = run([os.path.join(b, "consumer")])
        check(r.returncode == 0 and r.stdout.startswith("stackshot "),
              "consumer (CMake) runs: %r" % r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpack-config", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--spin", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("skip: installs a package: root only")
        sys.exit(77)
    for tool in ("dpkg", "dpkg-deb", "cpack", "pkg-config", "cc", "cmake"):
        if not shutil.which(tool):
            print("skip: no " + tool)
            sys.exit(77)
    if installed():
        print("skip: a stackshot package is installed already; not replaced by a test")
        sys.exit(77)
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    r = run(["cpack", "--config", a.cpack_config, "-G", "DEB", "-B", a.out])
    debs = glob.glob(os.path.join(a.out, "stackshot_*.deb"))
    check(r.returncode == 0 and len(debs) == 1, "cpack -G DEB made one .deb: %s %s" %
          (debs, r.stderr[-300:]))
    if not debs:
        sys.exit(1)
    tmp = tempfile.mkdtemp(prefix="ss-pkg-")
    try:
        checks(a, tmp, debs[0])
    finally:
        r = run(["dpkg", "-r", "stackshot"])
        check(r.returncode == 0 and not installed() and not os.path.exists("/usr/bin/stackshot"),
              "dpkg -r removed it")
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILED:
        print("%d check(s) failed" % len(FAILED))
        sys.exit(1)


if __name__ == "__main__":
    main()
