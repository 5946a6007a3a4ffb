#!/usr/bin/env python3
"""What examples/container/ deploys, without a container runtime (label packaging).

    container.py --build BUILD_DIR --src REPO --spin spin --out DIR

The init container's work: the installed tree (cmake --install), made self-contained by
examples/container/bundle.sh, copied to another directory (the pod's emptyDir), the
original removed. The application container's work: its environment read from
examples/container/k8s.yaml (the Deployment's app container: $(VAR) expanded as Kubernetes
does, status.hostIP = 127.0.0.1, the volume's mount path = the copy; the collector's port 4317
is the only value replaced: by a local OTLP/gRPC receiver's), and a native program run with
it and nothing else. Checks: the program's own output and status, the agent and its libraries
mapped from the copy, and the receiver got call-stack records of service my-app. The same
env runs a JVM (when JDK 17 is there): LD_PRELOAD alone profiles a Java application too (the
loader gives the JVM -agentpath: its main thread's records received).
Exit 0 pass, 1 fail, 77 skip (no node receiver, patchelf or python3-yaml).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

FAILED = []
JDK17 = "/usr/lib/jvm/java-17-openjdk-amd64"


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILED.append(what)


def skip(why):
    print("skip: " + why)
    sys.exit(77)


def manifest_env(path, mount, node_ip, port):
    import yaml
    docs = list(yaml.safe_load_all(open(path)))
    dep = next(d for d in docs if d["kind"] == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    app = pod["containers"][0]
    vm = next(v for v in app["volumeMounts"] if v["name"] == "stackshot")["mountPath"]
    init = pod["initContainers"][0]
    check(any(v["mountPath"] == vm for v in init["volumeMounts"]) and
          any(v["name"] == "stackshot" and "emptyDir" in v for v in pod["volumes"]),
          "the init container and the app share an emptyDir at " + vm)
    env = {}
    for item in app["env"]:
        if "valueFrom" in item:
            field = item["valueFrom"]["fieldRef"]["fieldPath"]
            check(field == "status.hostIP", "%s from the downward API" % item["name"])
            env[item["name"]] = node_ip
            continue
        v = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), item["value"])
        if v.startswith(vm + "/"):
            v = mount + v[len(vm):]
        env[item["name"]] = v.replace(":4317", ":%d" % port)
    return env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--spin", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    node_mods = os.path.join(a.src, "tests/otlp/node/node_modules/@grpc/grpc-js")
    if not shutil.which("node") or not os.path.isdir(node_mods):
        skip("no node or no npm packages in tests/otlp/node (npm ci there)")
    if not shutil.which("patchelf"):
        skip("no patchelf")
    try:
        import yaml  # noqa: F401
    except ImportError:
        skip("no python3-yaml")

    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    stage, volume = os.path.join(a.out, "stage"), os.path.join(a.out, "emptydir")
    r = subprocess.run(["cmake", "--install", a.build, "--prefix", stage],
                       capture_output=True, text=True)
    check(r.returncode == 0, "cmake --install: " + r.stderr[-200:])
    r = subprocess.run([os.path.join(a.src, "examples/container/bundle.sh"), stage],
                       capture_output=True, text=True)
    check(r.returncode == 0, "bundle.sh: " + r.stderr[-300:])
    os.makedirs(volume)
    subprocess.run(["cp", "-a", stage + "/.", volume + "/"], check=True)  # the init container
    shutil.rmtree(stage)

    jse = None  # the JVM's stderr, when a JDK is there
    sink = subprocess.Popen(["node", os.path.join(a.src, "tests/packaging/otlp_sink.js")],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(sink.stdout.readline())
        env = manifest_env(os.path.join(a.src, "examples/container/k8s.yaml"), volume,
                           "127.0.0.1", port)
        print("app env: %s" % env)
        check(set(env) >= {"LD_PRELOAD", "SPLUNK_PROFILER_ENABLED", "OTEL_SERVICE_NAME",
                           "OTEL_EXPORTER_OTLP_ENDPOINT"}, "the manifest sets the four keys")
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("STACKSHOT_", "SPLUNK_", "OTEL_", "LD_"))}
        p = subprocess.Popen([a.spin, "3500", "0"], env={**base, **env},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # gRPC is in the helper process (stackshot-grpc-helper, from the copy too),
        # found by the pidfd the host holds
        maps, hmaps, hexe, deadline = "", "", "", time.monotonic() + 3.4
        while time.monotonic() < deadline and "libgrpc" not in hmaps:
            time.sleep(0.2)
            try:
                maps = open("/proc/%d/maps" % p.pid).read()
                for fd in os.listdir("/proc/%d/fdinfo" % p.pid):
                    m = re.search(r"^Pid:\s+(\d+)$",
                                  open("/proc/%d/fdinfo/%s" % (p.pid, fd)).read(), re.M)
                    if m:
                        hexe = os.readlink("/proc/%s/exe" % m.group(1))
                        hmaps = open("/proc/%s/maps" % m.group(1)).read()
            except OSError:
                continue
        so, se = p.communicate(timeout=60)
        check(p.returncode == 0 and so == "spun\n", "the program ran as without the agent")
        lib = os.path.join(volume, "lib")
        for name in ("libstackshot.so", "libstackshot-core.so", "libdw.so", "libunwind.so"):
            check(re.search(re.escape(lib) + "/" + re.escape(name), maps) is not None,
                  "%s mapped from the copied tree" % name)
        check(hexe == os.path.join(lib, "stackshot-grpc-helper"),
              "the gRPC helper run from the copied tree: %r" % hexe)
        check(re.search(re.escape(lib) + "/libgrpc.so", hmaps) is not None,
              "libgrpc.so mapped by the helper from the copied tree")
        # a Java application with the same env (LD_PRELOAD, no JAVA_TOOL_OPTIONS): the
        # loader gives the JVM -agentpath, the JVMTI agent samples its Java threads
        if os.path.exists(JDK17 + "/bin/javac"):
            cls = os.path.join(a.out, "classes")
            subprocess.run([JDK17 + "/bin/javac", "-d", cls,
                            os.path.join(a.src, "tests/packaging/Spin.java")], check=True)
            r = subprocess.run([JDK17 + "/bin/java", "-cp", cls, "Spin", "3500"],
                               env={**base, **env}, capture_output=True, text=True, timeout=120)
            jse = r.stderr
            check(r.returncode == 0 and r.stdout == "spun\n", "the JVM ran as without the agent")
            check(re.search(r"Picked up JAVA_TOOL_OPTIONS: -agentpath:" + re.escape(lib) +
                            r"/libstackshot\.so", jse) is not None and
                  jse.count("stackshot: started in pid") == 1 and "jvmti sampler" in jse,
                  "the JVM profiled through JVMTI from the copy, once: %r" % jse[-300:])
        else:
            print("note: no JDK 17: the Java application's part is not run")
    finally:
        sink.terminate()
        got = sink.stdout.read()
        sink.wait(timeout=30)
    summary = json.loads(got.strip().splitlines()[-1]) if got.strip() else {}
    print("receiver: %s; agent: %s" % (summary, se.strip()[-300:]))
    check(summary.get("records", 0) > 0, "the collector endpoint got call-stack records")
    check(summary.get("services") == [env.get("OTEL_SERVICE_NAME")] == ["my-app"],
          "of the manifest's service my-app")
    check(os.path.basename(a.spin) in summary.get("threads", []), "the program's thread sampled")
    if jse is not None:
        check("main" in summary.get("threads", []), "the JVM's main thread sampled")
    if FAILED:
        print("%d check(s) failed" % len(FAILED))
        sys.exit(1)


if __name__ == "__main__":
    main()
