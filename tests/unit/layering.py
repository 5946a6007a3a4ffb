#!/usr/bin/env python3
"""layering: no #include runs upward (docs/architecture.md).

Every project header is named from the repository root ("agent/round.h"),
so the folder a file includes from is the first part of the name. The
layers, lowest first:

  agent/      the round model, configuration, log, memory, agent threads,
              the exporter and source interfaces; includes only agent/
  proc/       the process as /proc shows it; agent/ and proc/
  samplers/   the native source; agent/, proc/, samplers/
  jvmti/      the JVM source; agent/, proc/, samplers/ (its own
              signal-time walk shares the native sampler's), jvmti/
  exporters/  the fan-out and the exporters; agent/, proc/, exporters/
  core/       the composition root: anything
  loader/     libstackshot.so, libc only: loader/ and the few agent/
              headers compiled into it

a header is spelled from the repository root ("agent/round.h", never
"../agent/round.h" nor "round.h"), and a module's sources (stackshot_module(... SOURCES ...)) include no
agent/ header but agent/module_abi.h. Run from ctest with the source
directory as its argument; prints every offending line and exits 1.
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()

ALLOWED = {
    "agent": {"agent", "include"},
    "proc": {"agent", "proc", "include"},
    "samplers": {"agent", "proc", "samplers", "include"},
    "jvmti": {"agent", "proc", "samplers", "jvmti", "include"},
    "exporters": {"agent", "proc", "exporters", "include"},
    "loader": {"loader", "include"},
    "core": {"agent", "proc", "samplers", "jvmti", "exporters", "core", "loader", "include"},
}
# What the loader compiles of agent/ (enabled.c, process_jvm.c) and the
# record layout it shares with the core.
# The module ABI gathers the functions a module may call, from agent/ and
# two proc/ headers.
ABI_EXTRA = {("agent/module_abi.h", "proc/process.h"), ("agent/module_abi.h", "proc/threads.h")}
LOADER_AGENT = {"agent/enabled.h", "agent/fork_timer.h", "agent/main_arena.h", "agent/ms_keys.h", "agent/otel_ctx.h", "agent/version.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return INCLUDE.findall(f.read())


def module_sources():
    """The files of every stackshot_module(... SOURCES ...) call."""
    found = set()
    for dirpath, _, files in os.walk(os.path.join(ROOT, "exporters")):
        if "CMakeLists.txt" not in files:
            continue
        text = open(os.path.join(dirpath, "CMakeLists.txt")).read()
        for call in re.findall(r"stackshot_module\((.*?)\)\n", text, re.S):
            m = re.search(r"SOURCES(.*?)(?:LIBS|EXPORTER|$)", call, re.S)
            if not m:
                continue  # the comment that shows the call's shape
            for src in re.findall(r"\$\{CMAKE_CURRENT_SOURCE_DIR\}/(\S+)", m.group(1)):
                found.add(os.path.relpath(os.path.join(dirpath, src), ROOT))
    return found


def main():
    bad = []
    for top, allowed in ALLOWED.items():
        base = os.path.join(ROOT, top)
        for dirpath, _, files in os.walk(base):
            for name in files:
                if not name.endswith((".c", ".h", ".cc", ".c.in")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, ROOT)
                for inc in includes(path):
                    if inc.startswith(".") or ("/" not in inc and
                                               os.path.exists(os.path.join(dirpath, inc))):
                        bad.append(f"{rel}: includes {inc} (spell it from the repository root)")
                        continue
                    folder = inc.split("/")[0] if "/" in inc else None
                    if folder is None:
                        continue  # generated headers (protobuf-c) and the like
                    if top == "loader" and inc in LOADER_AGENT:
                        continue
                    if (rel, inc) in ABI_EXTRA:
                        continue
                    if folder not in allowed and os.path.exists(os.path.join(ROOT, folder)):
                        bad.append(f"{rel}: includes {inc} ({top}/ may include {sorted(allowed)})")
    modules = module_sources()
    if not modules:
        bad.append("no module sources found in exporters/*/CMakeLists.txt")
    for rel in sorted(modules):
        for inc in includes(os.path.join(ROOT, rel)):
            if inc.startswith("agent/") and inc != "agent/module_abi.h":
                bad.append(f"{rel}: a module's source includes {inc} (only agent/module_abi.h)")
    for line in bad:
        print("layering:", line)
    print(f"layering: {len(bad)} upward include(s); {len(modules)} module sources checked")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
