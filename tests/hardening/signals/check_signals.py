#!/usr/bin/env python3
"""Signal-conflict cases of the native sampler, end to end.

usage: check_signals.py <case> <sig_host> <libstackshot.so> <tmpdir> [preload-prefix]
cases: late, chain, blocked, blocked_late, prof, prof_signal, eintr, sleep5, quiet,
undumpable, altstack, forkalt, edge, coro, sigwait, sigwait_python

Each case runs sig_host with the agent preloaded and the text exporter,
then checks the host's own result line, the agent's stderr and the text
rounds. See docs/safety/signals.md for what each case proves."""
import datetime
import os
import re
import subprocess
import sys

case, host, lib, tmp = sys.argv[1:5]
preload = (sys.argv[5] + " " if len(sys.argv) > 5 and sys.argv[5] else "") + lib
scale = float(os.environ.get("SS_TIME_SCALE", "1"))
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def run(args, env_extra, agent=True, prefix=(), program=None):
    """prefix: a command that runs the host (the agent is preloaded into
    the host only, through env, never into the prefix). program: another
    host than sig_host."""
    os.makedirs(tmp, exist_ok=True)
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    env = dict(os.environ, SPLUNK_PROFILER_ENABLED="true", STACKSHOT_OUTPUT_DIR=tmp,
               STACKSHOT_EXPORTERS="text", STACKSHOT_LOG_LEVEL="warn")
    env.update(env_extra)
    cmd = [program or host] + args
    if agent and prefix:
        cmd = list(prefix) + ["env", "LD_PRELOAD=" + preload] + cmd
    elif agent:
        env["LD_PRELOAD"] = preload
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, "%s: exit code %d, stderr: %s" % (args, p.returncode, p.stderr[-2000:]))
    print("$", " ".join(args), "->", p.stdout.strip())
    if p.stderr.strip():
        print("stderr:", p.stderr.strip())
    return p


def result(p, tag):
    m = re.search(r"^%s: (.*)$" % tag, p.stdout, re.M)
    if not check(m, "no '%s:' line in %r" % (tag, p.stdout)):
        return {}
    return {k: float(v) for k, v in re.findall(r"(\w+)=(-?[\d.]+)", m.group(1))}


def rounds():
    """[{time_ms, skipped, blocked, threads: {name: [frames]}}] of the text file."""
    out = []
    files = [f for f in os.listdir(tmp) if f.endswith(".txt")]
    for f in files:
        with open(os.path.join(tmp, f), errors="replace") as fh:
            for line in fh:
                m = re.match(r"^Full thread dump stackshot round \d+ at (\S+)Z \(pid \d+, (\d+) threads, "
                             r"(\d+) skipped(?:, (\d+) blocking the signal)?\)", line)
                if m:
                    t = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc)
                    out.append({"time_ms": t.timestamp() * 1000, "skipped": int(m.group(3)),
                                "blocked": int(m.group(4) or 0), "threads": {}})
                    continue
                m = re.match(r'^"(.*)" #\d+ ', line)
                if m and out:
                    cur = out[-1]["threads"].setdefault(m.group(1), [])
                    continue
                m = re.match(r"^\tat (.*)\(", line)
                if m and out and out[-1]["threads"]:
                    name = list(out[-1]["threads"])[-1]
                    out[-1]["threads"][name].append(m.group(1).split(".", 1)[-1])
    out.sort(key=lambda r: r["time_ms"])
    return out


def lines_with(text, needle):
    return [l for l in text.splitlines() if needle in l]


def agent_lines(text):
    """The agent's lines (a sanitizer runtime may print its own reports)."""
    return [l for l in text.splitlines() if l.startswith("stackshot:")]


TAKEOVER = "installed its own handler for signal"

if case == "late":
    # the host puts its own handler on the agent's signal after 5 rounds
    p = run(["late"], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "10"})
    r = result(p, "late")
    rs = rounds()
    check(len(lines_with(p.stderr, TAKEOVER)) == 1, "one line about the takeover expected: %r" % p.stderr)
    check(len(agent_lines(p.stderr)) == 1, "no other agent line: %r" % p.stderr)
    check(len(rs) >= 5, "sampled before the takeover: %d rounds" % len(rs))
    check(any("host-busy" in x["threads"] for x in rs), "host-busy sampled before the takeover")
    # signals of the round in flight at the sigaction (one per thread) may
    # still land, late on a loaded machine; no round signals after that
    check(r.get("agent_signals", 99) <= 3, "the host's handler got %s agent signals" % r.get("agent_signals"))
    check(r.get("last_after_ms", 999) <= 200, "an agent signal %s ms after the takeover" % r.get("last_after_ms"))
    if rs and "installed_wall_ms" in r:
        late = [x for x in rs if x["time_ms"] > r["installed_wall_ms"] + 200]
        check(not late, "%d rounds taken after the takeover" % len(late))

elif case == "chain":
    # the host installs its own handler on the agent's signal after 5
    # rounds, but passes the signals it does not use on (as HotSpot's
    # libjsig does): judged by answer, it is no takeover; sampling goes on
    p = run(["chain"], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "20", "STACKSHOT_LOG_LEVEL": "info"})
    r = result(p, "chain")
    after = [x for x in rounds() if x["time_ms"] > r.get("installed_wall_ms", 0) + 100]
    print("chained handler saw %s agent signals; %d rounds after it came" % (r.get("seen"), len(after)))
    check("does not pass it on" not in p.stderr,
          "the chaining handler was taken for a takeover: %r" % p.stderr)
    check(len(lines_with(p.stderr, "passes the agent's signal on")) == 1,
          "one line saying the handler passes the signal on: %r" % p.stderr)
    check(len(after) >= 8, "rounds after the host's handler came: %d" % len(after))
    check(r.get("seen", 0) >= 5, "the host's handler saw (and passed on) %s signals" % r.get("seen"))
    check(sum(1 for x in after if any("busy" in f for f in x["threads"].get("host-busy", []))) >=
          len(after) // 2, "host-busy sampled (by signal) after the handler came")

elif case == "blocked_many":
    # 10 spinners block the signal: the kernel samples 8 of them at a time
    # at most (its rings count against the user's locked memory); the
    # others are counted as blocking
    p = run([case, "0"], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "20"})
    r = result(p, "blocked")
    rs = [x for x in rounds() if x["time_ms"] <= r.get("blocked_wall_ms", 0) + 1400]
    names = set(k for x in rs for k, f in x["threads"].items()
                if k.startswith("blockspin-") and f and "blocking_spinner" in f[0])
    most = max([sum(1 for k in x["threads"] if k.startswith("blockspin-")) for x in rs] or [0])
    print("spinners ever listed: %s; at most %d in a round" % (sorted(names), most))
    check(len(names) == 8 and most <= 8, "8 spinners sampled by the kernel, no more: %s" % sorted(names))
    check(r.get("pending", 99) == 0, "no signal left pending: %s" % r.get("pending"))
    check(all(x["blocked"] >= 2 for x in rs[1:]), "the other 2 counted as blocking in every round: %s"
          % [x["blocked"] for x in rs][:20])

elif case == "blocked_turns":
    # 8 threads that block the signal spin for 0.5 s, then nap; 2 more
    # start to spin at 0.6 s. The 8 held the kernel's 8 events; an event
    # that gives no sample for 16 rounds is closed, so the 2 late spinners
    # are sampled once the early ones nap (from about 0.6 + 16 x 20 ms)
    p = run([case], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "20"})
    r = result(p, "turns")
    t0 = r.get("started_wall_ms", 0)
    rs = rounds()
    early = [x for x in rs if t0 + 100 <= x["time_ms"] <= t0 + 450]
    # (16 rounds of 20 ms after 0.5 s, later on a loaded machine)
    late = [x for x in rs if t0 + 1400 <= x["time_ms"] <= t0 + 2300]
    def listed(x, prefix, fn):
        return sum(1 for k, f in x["threads"].items() if k.startswith(prefix) and f and fn in f[0])
    e = [listed(x, "earlyspin-", "early_spin") for x in early]
    l = [listed(x, "latespin-", "late_spin") for x in late]
    print("early spinners listed per round %s; late spinners from 1.4 s %s" % (e, l))
    names = set(k for x in early for k, f in x["threads"].items()
                if k.startswith("earlyspin-") and f and "early_spin" in f[0])
    check(len(names) == 8, "the 8 early spinners sampled by the kernel while they spin: %s, %s"
          % (sorted(names), e))
    check(late and sum(l) >= 2 * len(late) * 0.5,
          "the 2 late spinners sampled once the early ones nap: %s" % l)

elif case in ("blocked", "blocked_late", "blocked_filtered"):
    # n threads block the signal (from birth, or after 5 rounds) and sleep
    # in a loop, 2 more block it and spin. The sleepers are sampled without
    # a signal (their stacks, read from /proc, show the host's blocker());
    # the spinners are never signalled, never waited for (rounds every
    # 20 ms keep coming): the kernel samples them (a perf event on their
    # CPU clock), from the round after the one that found them blocking.
    # blocked_filtered: every thread, the agent's too, runs under a seccomp
    # filter, where the agent opens no perf event: the spinners are only
    # counted as blocking, in every round, and one line says why
    n = 50
    filtered = case == "blocked_filtered"
    p = run([case, str(n)], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "20",
                             "STACKSHOT_LOG_LEVEL": "info" if filtered else "warn"})
    r = result(p, "blocked")
    since = r.get("blocked_wall_ms", 0) + (300 if case == "blocked_late" else 0)
    # (until the host's 1.5 s are over: then its threads exit)
    rs = [x for x in rounds() if since <= x["time_ms"] <= r.get("blocked_wall_ms", 0) + 1400]
    # a signal sent to a thread that blocks it stays pending: none was
    # sent (blocked_late: one may slip through when a thread starts
    # blocking between our look at its mask and the signal)
    check(r.get("pending", 99) <= (0 if case != "blocked_late" else 2),
          "signals left pending in blocking threads: %s" % r.get("pending"))
    counts = [x["blocked"] for x in rs]
    spun = [sum(1 for k, f in x["threads"].items()
                if k.startswith("blockspin-") and f and "blocking_spinner" in f[0]) for x in rs]
    print("blocking counts per round %s; spinners listed in blocking_spinner() %s" %
          (counts[:20], spun[:20]))
    refused = lines_with(p.stderr, "are counted, not sampled")
    if filtered:
        # counted in every round (with the sleepers caught between two
        # naps: the 50 wake together every 10 ms, so on 2 cores a round
        # may truthfully find many of them running or runnable)
        check(len(rs) >= 5 and all(2 <= c <= n + 2 for c in counts),
              "rounds counting the 2 spinners as blocking: counts %s" % counts)
        check(not any(k.startswith("blockspin-") for x in rs for k in x["threads"]),
              "a spinner was listed")
        check(len(refused) == 1 and "seccomp filter" in refused[0],
              "one line says why the spinners are not sampled: %r" % p.stderr[-2000:])
    else:
        # each spinner in its own function (the leaf, where it spins), in
        # most rounds after the first that found it blocking
        later = spun[2:]
        check(len(rs) >= 5 and sum(later) >= 2 * len(later) * 0.8,
              "the spinners listed in blocking_spinner() in %d of %d thread-rounds" %
              (sum(later), 2 * len(later)))
        check(not refused, "perf events refused: %r" % refused)
    # the sleepers are sampled (they used to be counted and left out):
    # listed with their own frame, most of the time
    listed = [sum(1 for k, f in x["threads"].items() if k.startswith("blocker-") and "blocker" in f)
              for x in rs]
    share = sum(listed) / float(max(1, n * len(rs)))
    print("rounds with the blockers: %d; sleepers listed in blocker() per round %s; share %.2f" %
          (len(rs), listed[:20], share))
    check(share >= 0.5, "the sleeping blockers were listed in blocker() %.0f%% of the time" %
          (100 * share))
    check(any("host-napper" in x["threads"] for x in rs), "the other thread is sampled")
    # not waited for: the default answer timeout is 100 ms; waiting for
    # silent threads would space the rounds 100 ms or more apart. The median
    # gap between rounds (the first one reads symbols and may be late on a
    # loaded machine) must stay near the 20 ms interval.
    gaps = sorted(b["time_ms"] - a["time_ms"] for a, b in zip(rs, rs[1:]))
    median = gaps[len(gaps) // 2] if gaps else 1e9
    print("median gap %.0f ms" % median)
    check(median <= 90, "median gap between rounds %.0f ms (want <= 90)" % median)

elif case == "prof":
    # ITIMER_PROF ticks with the agent sampling every 10 ms vs without it
    base = result(run(["prof"], {}, agent=False), "prof")
    p = run(["prof", "wait"], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "10"})
    got = result(p, "prof")
    rs = rounds()
    ratio = got.get("ticks_per_cpu_s", 0) / max(base.get("ticks_per_cpu_s", 1), 1)
    print("ITIMER_PROF ticks per CPU second: %.1f with the agent, %.1f without (ratio %.2f)" %
          (got.get("ticks_per_cpu_s", 0), base.get("ticks_per_cpu_s", 0), ratio))
    # within noise: measured 1.00 on a quiet machine; ITIMER_PROF ticks on
    # a loaded VM (and the sanitizer runtime's CPU) drift by 20-30 %. A
    # profiler broken by the agent would see few or no ticks.
    lo, hi = (0.7, 1.4) if scale == 1 else (0.5, 2.0)
    check(lo <= ratio <= hi, "tick rate ratio %.2f (want %.1f-%.1f)" % (ratio, lo, hi))
    check(got.get("agent_signals", 1) == 0, "the host's SIGPROF handler got agent signals")
    check(not agent_lines(p.stderr), "no agent line expected: %r" % p.stderr)
    check(len(rs) >= 10, "the agent sampled: %d rounds" % len(rs))
    check(any("spin_for_prof" in f for x in rs for f in x["threads"].get("ss_sig_host", [])),
          "main sampled in spin_for_prof")

elif case == "prof_signal":
    # STACKSHOT_SIGNAL=SIGPROF in a host that profiles itself: the host's
    # handler (installed after the agent's) is left alone, one line
    p = run(["prof"], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "10", "STACKSHOT_SIGNAL": "SIGPROF"})
    got = result(p, "prof")
    # the agent starts when its first round is due: the host's handler may
    # already be there (refused at start) or come after (a takeover)
    said = lines_with(p.stderr, TAKEOVER) + lines_with(p.stderr, "already has a handler")
    check(len(said) == 1, "one line about SIGPROF expected: %r" % p.stderr)
    check(len(agent_lines(p.stderr)) == 1, "no other agent line: %r" % p.stderr)
    check(got.get("agent_signals", 99) <= 3, "agent signals reached the host: %s" % got.get("agent_signals"))
    check(got.get("ticks_per_cpu_s", 0) >= 50, "the host's profiler still ticks: %s" % got.get("ticks_per_cpu_s"))

elif case == "eintr":
    # how often the agent's signal ends a host nanosleep early
    secs = 3
    p = run(["eintr", str(secs)], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "100"})
    r = result(p, "eintr")
    n = len(rounds())
    print("EINTR over %d rounds: loop of nanosleep(50 ms): %d in %d sleeps; one long nanosleep: %d" %
          (n, r.get("loop_eintr", -1), r.get("loops", -1), r.get("long_eintr", -1)))
    check(n >= 10, "rounds: %d" % n)
    # at most one signal per thread per round
    # (n counts the rounds in the file; one more may have been taken as the
    # process exited)
    check(r.get("loop_eintr", 99) <= n + 2, "loop sleeper: %s EINTR in %d rounds" % (r.get("loop_eintr"), n))
    # an idle thread is signalled until its stack is settled (two equal
    # stacks, little CPU after our handler: on a loaded machine the first
    # check may miss), then reused without a signal
    check(r.get("long_eintr", 99) <= 5, "long sleeper: %s EINTR in %d rounds" % (r.get("long_eintr"), n))

elif case == "sleep5":
    # a program that calls sleep(5) once, at a 100 ms interval: it sleeps
    # its 5 s (it used to wake at the first round: EINTR)
    p = run(["sleep5"], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "100"})
    r = result(p, "sleep5")
    n = len(rounds())
    print("sleep(5) under the agent: slept %.0f ms, %d s left, %d rounds" %
          (r.get("slept_ms", 0), r.get("left_s", -1), n))
    check(r.get("slept_ms", 0) >= 4950 and r.get("left_s", 1) == 0,
          "sleep(5) slept %s ms (%s s left)" % (r.get("slept_ms"), r.get("left_s")))
    check(n >= 20, "the agent sampled meanwhile: %d rounds" % n)
    main_frames = [f for x in rounds() for f in x["threads"].get("ss_sig_host", [])]
    check(any("mode_sleep5" in f for f in main_frames), "main sampled in mode_sleep5")

elif case == "quiet":
    # threads waiting with timeouts in nanosleep, poll, epoll_wait and
    # select, for 50 rounds at 100 ms: not one EINTR
    want = 50
    p = run(["quiet", str(want)], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "100"})
    r = result(p, "quiet")
    rs = rounds()
    print("EINTR over %d rounds: nanosleep %s, poll %s, epoll_wait %s, select %s (%s nanosleeps)" %
          (len(rs), r.get("nanosleep"), r.get("poll"), r.get("epoll"), r.get("select"), r.get("loops")))
    check(r.get("rounds", 0) >= want and len(rs) >= want, "rounds: %s" % r.get("rounds"))
    for k in ("nanosleep", "poll", "epoll", "select"):
        check(r.get(k, 1) == 0, "%s saw %s EINTR" % (k, r.get(k)))
    # and they are sampled, not left alone to stay quiet (a thread waiting
    # for a CPU when its round looks at it is left out of that round and
    # counted as skipped: on a saturated machine, a few rounds)
    for name in ("q-nanosleep", "q-poll", "q-epoll", "q-select"):
        seen = sum(1 for x in rs if x["threads"].get(name))
        check(seen >= 0.8 * len(rs), "%s sampled in %d of %d rounds" % (name, seen, len(rs)))

elif case == "undumpable":
    # a host that made itself non-dumpable, run as an unprivileged user:
    # its task files (syscall) belong to root, so where a thread sleeps is
    # unknown to the agent. A thread asleep in nanosleep is not signalled
    # (a signal would end the sleep with EINTR): its stack is the one frame
    # stackshot.asleep(<the kernel's wait>); caught running it is
    # signalled and sampled in its own function, as the busy thread is.
    # Before: every nap that followed a run was signalled (EINTR 10-20
    # times a run)
    import pwd
    import shutil
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        print("skipped: needs root and setpriv to run the host as nobody")
        sys.exit(77)
    nobody = pwd.getpwnam("nobody")
    os.makedirs(tmp, exist_ok=True)
    os.chown(tmp, nobody.pw_uid, nobody.pw_gid)
    os.chmod(tmp, 0o700)
    p = run(["undumpable", "8"], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "50"},
            prefix=("setpriv", "--reuid=%d" % nobody.pw_uid, "--regid=%d" % nobody.pw_gid,
                    "--clear-groups"))
    r = result(p, "undumpable")
    rs = rounds()
    check(r.get("dumpable", 1) == 0, "the host is not dumpable: %s" % r)
    check(len(rs) >= 8, "rounds: %d" % len(rs))
    # (one at most: a thread read running may enter its nap in the
    # microseconds before the signal, as any thread may: signals.md)
    check(0 <= r.get("eintr", -1) <= 1, "no sleep of the host ended with EINTR: %s" % r)
    with open([os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".txt")][0],
              errors="replace") as fh:
        text = fh.read()
    check(re.search(r"stackshot\.asleep\(\w*nanosleep\w*\)", text),
          "the not signalled napper's frame names the kernel's wait (wchan)")
    seen = [x for x in rs[2:] if any("busy" in f for f in x["threads"].get("ud-busy", []))]
    check(len(seen) >= len(rs[2:]) // 2,
          "ud-busy sampled in busy() in %d of %d rounds" % (len(seen), len(rs[2:])))
    nap = [x["threads"].get("ud-napper", []) for x in rs[2:]]
    # a round may miss the napper under load (caught running, it did not
    # answer the signal before the round's deadline: counted as late)
    missing = [f for f in nap if not f]
    check(len(missing) <= len(nap) // 3, "ud-napper missing in %d of %d rounds" % (
        len(missing), len(nap)))
    nap = [f for f in nap if f]
    asleep = [f for f in nap if f == ["asleep"]]  # stackshot.asleep(<wchan>)
    own = [f for f in nap if any("ud_napper" in g for g in f)]
    print("ud-napper: asleep in rounds %d, in its own function %d, of %d" % (
        len(asleep), len(own), len(nap)))
    check(len(asleep) + len(own) == len(nap) and asleep,
          "ud-napper: each round either asleep in nanosleep (not signalled) or in ud_napper(): %s"
          % [f for f in nap if f not in asleep and f not in own])

elif case == "altstack":
    # the loader gives the main thread and every new thread an alternate
    # signal stack of its own size while the agent is enabled (unmapped at
    # thread exit), none while it is disabled; a thread that installs its own keeps it and is
    # sampled; a thread that disables its stack is no longer signalled
    # (counted) and gets no signal frame on its own stack
    sanitizer = len(sys.argv) > 5 and bool(sys.argv[5])
    off = result(run(["altstack", "0"], {"SPLUNK_PROFILER_ENABLED": "false"}), "altstack")
    check(off.get("main_on") == 0 and off.get("thread_on") == 0 or sanitizer,
          "agent disabled: no alternate stack expected: %s" % off)
    p = run(["altstack", "8"], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "20",
                                "STACKSHOT_LOG_LEVEL": "debug"})
    r = result(p, "altstack")
    check(r.get("main_on") == 1 and r.get("thread_on") == 1,
          "agent enabled: main and new threads have an alternate stack: %s" % r)
    if not sanitizer:  # a sanitizer runtime installs its own first: that one is kept
        check(r.get("main_size") == r.get("want_size") and r.get("thread_size") == r.get("want_size"),
              "the agent's alternate stacks measure %s: %s" % (r.get("want_size"), r))
    check(r.get("own_kept") == 1, "the thread's own alternate stack stayed in place: %s" % r)
    # 200 threads created and joined: their stacks are unmapped at exit
    check(r.get("churn_maps", 999) <= 20, "200 threads left %s mappings" % r.get("churn_maps"))
    check(r.get("off_clobbered", 1) == 0,
          "%s bytes below the stack pointer of the thread without an alternate stack changed"
          % r.get("off_clobbered"))
    check(r.get("rounds", 0) >= 8, "rounds: %s" % r.get("rounds"))
    rs = rounds()
    check(any(any("own_spin" in f for f in x["threads"].get("alt-own", [])) for x in rs),
          "the thread on its own alternate stack is sampled in own_spin")
    m = re.findall(r"(\d+) running with no alternate signal stack known", p.stderr)
    print("threads left out for want of an alternate stack: %s" % m)
    check(m and int(m[-1]) >= 4, "the thread without an alternate stack counted: %s" % m)
    # not signalled, but sampled by the kernel (a perf event: nothing is
    # written on its stack, off_clobbered above) where the kernel allows
    off_rounds = [x for x in rs if any("alt_off" in f for f in x["threads"].get("alt-off", []))]
    refused = lines_with(p.stderr, "are counted, not sampled")
    print("the thread without an alternate stack sampled by the kernel in %d rounds; %s" %
          (len(off_rounds), refused))
    check(refused or sanitizer or len(off_rounds) >= 2,
          "the thread without an alternate stack sampled by the kernel in alt_off")
    # one disabled its stack by the raw system call: the registry does not
    # know, it is signalled, and its handler answers without copying
    o = re.findall(r"(\d+) answers refused off an alternate stack", p.stderr)
    print("answers refused off an alternate stack: %s" % o)
    check(o and int(o[-1]) >= 4, "the handlers off an alternate stack counted: %s" % o)
    check(not any(any("raw_spin" in f for f in x["threads"].get("alt-raw", [])) for x in rs),
          "the thread off its alternate stack was not sampled (its handler refused)")

elif case == "forkalt":
    # after fork the registry holds the calling thread alone, under its new
    # tid: the child's main thread, spinning, is sampled by its own agent
    p = run(["forkalt", "6"], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "20"})
    r = result(p, "forkalt")
    c = result(p, "forkalt-child")
    check(r.get("child_exit") == 0, "the child exited %s" % r.get("child_exit"))
    check(c.get("alt_on") == 1 and c.get("rounds", 0) >= 6, "the child: %s" % c)
    mine = [x for x in rounds() if x["threads"].get("ss_sig_host") is not None]
    spun = [x for x in mine if any("child_spin" in f for f in x["threads"]["ss_sig_host"])]
    print("rounds with the child's main thread in child_spin: %d" % len(spun))
    check(len(spun) >= 3, "the child's main thread sampled in child_spin: %d rounds" % len(spun))

elif case == "edge":
    # a thread with ~2,000 bytes of stack left, spinning through rounds:
    # the signal frame (~3.3 KiB with AVX-512) used to land below its end
    # (SIGSEGV); on the alternate stack it survives, and is sampled
    p = run(["edge", "5"], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "20"})
    r = result(p, "edge")
    print("stack left: %s bytes" % r.get("left"))
    check(0 < r.get("left", 0) <= 2600, "stack left %s bytes" % r.get("left"))
    check(r.get("rounds", 0) >= 5, "rounds: %s" % r.get("rounds"))
    check(any(any("edge_spin" in f for f in x["threads"].get("edge", [])) for x in rounds()),
          "the thread at its stack's end is sampled in edge_spin")

elif case == "coro":
    # makecontext coroutines on 8 and 16 KiB heap stacks, ~2,000 bytes
    # left, spinning through rounds at 20 ms: the canary words below the
    # stacks stay untouched (a signal frame on the coroutine's stack used
    # to overwrite them: heap corruption)
    p = run(["coro", "5"], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "20"})
    r = result(p, "coro")
    check(r.get("rounds", 0) >= 10, "rounds: %s" % r.get("rounds"))
    check(r.get("changed8", 1) == 0 and r.get("changed16", 1) == 0,
          "canary words changed below the coroutine stacks: %s" % r)

elif case == "sigwait":
    # every signal blocked in every thread; workers compute and wait in
    # turns in sigtimedwait on every signal, in ppoll and in sigsuspend
    # with an empty mask (the waits unblock for their time only), for 100
    # rounds at 10 ms: no wait ever gets the agent's signal (the process
    # sends none of its own). Before, the sampler read the wait's mask as
    # the thread's: 20-40 signals taken by sigtimedwait and 10-30 EINTR a run
    want = 100
    p = run(["sigwait", str(want)], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "10"})
    r = result(p, "sigwait")
    rs = rounds()
    check(r.get("rounds", 0) >= want and len(rs) >= want, "rounds: %s" % r.get("rounds"))
    check(r.get("waits", 0) >= 100, "waits: %s" % r.get("waits"))
    check(r.get("taken", 1) == 0,
          "sigtimedwait took %s signals (last %s)" % (r.get("taken"), r.get("last_sig")))
    check(r.get("eintr_ppoll", 1) == 0, "ppoll saw %s EINTR" % r.get("eintr_ppoll"))
    check(r.get("eintr_suspend", 1) == 0,
          "sigsuspend woken %s times by a signal not its own" % r.get("eintr_suspend"))
    # the waiters are still sampled, read asleep in their waits, and the
    # rounds count the threads that block the signal while they compute
    for name, fn in (("sw-timedwait-0", "sw_timedwait"), ("sw-ppoll", "sw_ppoll")):
        seen = sum(1 for x in rs if fn in " ".join(x["threads"].get(name) or []))
        check(seen >= 0.2 * len(rs), "%s sampled in %s() in %d of %d rounds" %
              (name, fn, seen, len(rs)))
    check(any(x.get("blocked", 0) >= 1 for x in rs), "no round counts a thread blocking the signal")

elif case == "sigwait_python":
    # the same shape in a program of someone else's: Python's interpreter,
    # two threads computing and waiting in signal.sigtimedwait on every
    # signal, all blocked, for 2 s at 10 ms. Before: 3-5 signals taken.
    script = (
        "import signal, threading, time\n"
        "every = signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, every)\n"
        "taken, waits = [], [0]\n"
        "def worker():\n"
        "    end = time.monotonic() + 2.0\n"
        "    while time.monotonic() < end:\n"
        "        t = time.perf_counter()\n"
        "        while time.perf_counter() - t < 0.003: pass\n"
        "        got = signal.sigtimedwait(every, 0.003)\n"
        "        waits[0] += 1\n"
        "        if got: taken.append(got.si_signo)\n"
        "ts = [threading.Thread(target=worker) for _ in range(2)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "print('sigwait_python: waits=%d taken=%d' % (waits[0], len(taken)))\n")
    p = run(["-c", script], {"SPLUNK_PROFILER_CALL_STACK_INTERVAL": "10"}, program="python3")
    r = result(p, "sigwait_python")
    rs = rounds()
    check(len(rs) >= 50, "rounds: %d" % len(rs))
    check(r.get("waits", 0) >= 100, "waits: %s" % r.get("waits"))
    check(r.get("taken", 1) == 0, "sigtimedwait took %s signals" % r.get("taken"))

else:
    sys.exit("unknown case " + case)

if failures:
    print("FAILED:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("ok:", case)
