"""Reading what the native tests compare: the text exporter's thread dumps
and gdb's backtraces of the same process (tests/native/check_*.py)."""
import datetime
import os
import re
import subprocess

FRAME = re.compile(r"^\tat (.*)\((.*)\)$")
HEADER = re.compile(r'^"(.*)" #(\d+) .* nid=0x([0-9a-f]+) (.*)$')
ROUND = re.compile(r"^Full thread dump stackshot round (\d+) at (\S+)Z \(")


def short(func):
    """A function name as both sides spell it: no namespace or class, no
    symbol version, no parameter list."""
    func = func.split("@", 1)[0]
    if func.startswith("global."):
        func = func[len("global."):]
    i = func.find("(")
    func = func[:i] if i > 0 else func
    return func.rsplit("::", 1)[-1]  # we print "Blocker.~Blocker", gdb "Blocker::~Blocker"


def parse(path):
    """List of rounds; each round is a list of threads (dicts) with
    name, number, nid, status, state and frames [(function, file, line)];
    the round's wall time (epoch ms) is in each thread's "time_ms"."""
    rounds, cur, th, when = [], None, None, 0
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = ROUND.match(line)
            if m:
                t = datetime.datetime.fromisoformat(m.group(2)).replace(tzinfo=datetime.timezone.utc)
                when = t.timestamp() * 1000
                cur = []
                rounds.append(cur)
                th = None
                continue
            m = HEADER.match(line)
            if m and cur is not None:
                th = {"name": m.group(1), "number": int(m.group(2)),
                      "nid": int(m.group(3), 16), "status": m.group(4),
                      "state": None, "frames": [], "time_ms": when}
                cur.append(th)
                continue
            if th is None:
                continue
            if line.startswith("   native.Thread.State: "):
                th["state"] = line[len("   native.Thread.State: "):]
                continue
            m = FRAME.match(line)
            if m:
                qual, loc = m.group(1), m.group(2)
                # "<ns>.<name>": C functions are in "global"; strip symbol versions
                func = qual.split(".", 1)[1] if "." in qual else qual
                func = func.split("@", 1)[0]
                file, _, ln = loc.partition(":")
                th["frames"].append((func, file, int(ln) if ln.isdigit() else 0))
    return rounds


GDB_THREAD = re.compile(r'^Thread \d+ \(.*LWP (\d+)\) "(.*)"\):')
GDB_FRAME = re.compile(r"^#\d+\s+(?:0x[0-9a-f]+ in )?(.+?) \(.*?\)(?: at (\S+):(\d+)| from (\S+))?\s*$")


def gdb_stacks(pid, timeout=90):
    """thread name -> [(function, file, line)] by gdb; None when gdb could
    not attach. Also by LWP under the key ("lwp", n)."""
    try:
        out = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx",
                              "-ex", "set print frame-arguments none",
                              "-ex", "thread apply all bt"],
                             capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    stacks, cur = {}, None
    for line in out.splitlines():
        m = GDB_THREAD.match(line)
        if m:
            cur = stacks.setdefault(m.group(2), [])
            stacks[("lwp", int(m.group(1)))] = cur
            continue
        m = GDB_FRAME.match(line)
        if m and cur is not None:
            cur.append((m.group(1), (m.group(2) or "").rsplit("/", 1)[-1],
                        int(m.group(3)) if m.group(3) else 0))
    return stacks or None


def source_frames(frames, source):
    """[(function, line)] of the frames in the file named `source`."""
    return [(short(f), l) for f, fl, l in frames if fl == source]


def functions(frames):
    return [short(f) for f, _, _ in frames]


def debug_counters(stderr):
    """The native sampler's stop line at debug level, as numbers."""
    m = re.search(r"native sampler: (\d+) rounds, (\d+) stacks taken by signal, (\d+) read asleep "
                  r"without one, (\d+) reused .*?; (\d+) asleep fell back to a signal \(([^)]*)\); "
                  r"(\d+) stacks cut", stderr)
    if not m:
        return None
    return {"rounds": int(m.group(1)), "signalled": int(m.group(2)), "asleep": int(m.group(3)),
            "reused": int(m.group(4)), "fallbacks": int(m.group(5)), "why": m.group(6),
            "cut": int(m.group(7))}


def agent_run_env(lib, out):
    """An empty output directory `out`, and the environment of a host run
    with the agent preloaded: text output there, 100 ms rounds, debug lines
    (the sampler's counters at exit)."""
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.unlink(os.path.join(out, f))
    return dict(os.environ, LD_PRELOAD=lib, SPLUNK_PROFILER_ENABLED="true",
                STACKSHOT_OUTPUT_DIR=out, SPLUNK_PROFILER_CALL_STACK_INTERVAL="100",
                STACKSHOT_EXPORTERS="text", STACKSHOT_LOG_LEVEL="debug")
