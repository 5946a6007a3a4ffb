#!/usr/bin/env python3
"""Writes docs/man/stackshot.7 from docs/configuration.md's tables (exporters, core
keys, keys by area). Run it from the repository root after changing those tables;
tests/packaging/command.py checks that every core key of that page is in the man page."""
import re

readme = open("docs/configuration.md").read()


def table(after):
    i = readme.index(after)
    rows = []
    for line in readme[i:].splitlines()[1:]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split(" | ")])
        elif rows:
            break
    return rows[2:]


def roff(s):
    # links of docs/configuration.md are relative to docs/; the page names them from the root
    s = re.sub(r"\]\((?![a-z]+:|/|#)", "](docs/", s)
    s = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r"\1 (\2)", s)
    s = s.replace("\\", "\\\\")
    s = re.sub(r"`([^`]+)`", r"\\fB\1\\fR", s)
    s = re.sub(r"\*\*([^*]+)\*\*", r"\1", s)
    return s.replace("-", "\\-")


out = [
    '.\\" stackshot(7): written by docs/man/keys7.py from docs/configuration.md\'s tables',
    '.TH STACKSHOT 7 "2026-11" "stackshot 0.1.0" "stackshot"',
    ".SH NAME\nstackshot \\- the environment keys of the stackshot profiling agent",
    ".SH DESCRIPTION",
    "The stackshot agent (\\fBlibstackshot.so\\fR, loaded with \\fBLD_PRELOAD\\fR into a native "
    "program or with \\fB\\-agentpath\\fR into a JVM) is configured by environment variables. "
    "For a JVM, the \\fB\\-agentpath\\fR option string (\\fBKEY=value,...\\fR), or the options "
    "of \\fBstackshot attach\\fR, may set the same keys and win over the environment. A bad "
    "value never stops the host: the agent prints one line (\\fBstackshot: KEY=value: why; "
    "what it does instead\\fR) and uses the default, or turns off only the part that needs it.",
    ".PP\nThe agent is off unless \\fBSPLUNK_PROFILER_ENABLED=true\\fR. When off it starts no "
    "thread, installs no signal handler and does not load its own libraries.",
    ".PP\nHost\\-wide, a line naming the loader in \\fB/etc/ld.so.preload\\fR loads it into "
    "every dynamically linked program of the host; only those with "
    "\\fBSPLUNK_PROFILER_ENABLED=true\\fR in their environment are profiled (native programs "
    "and JVMs alike), never a set\\-user\\-ID, set\\-group\\-ID or file\\-capability "
    "program. Read the risks in \\fBstackshot\\fR(1), HOST\\-WIDE USE, first.",
    ".SH CORE KEYS",
]
for k, d, m in table("## Core"):
    out.append(".TP\n" + roff(k) + " (default " + roff(d) + ")\n" + roff(m))
out.append(".SH EXPORTERS")
out.append("\\fBSTACKSHOT_EXPORTERS\\fR is a comma list of:")
for row in table("| exporter (`STACKSHOT_EXPORTERS`)"):
    out.append(".TP\n" + roff(row[0]) + "\n" + roff(row[1]) + "; read by " + roff(row[2]) + ".")
out.append(".SH OTHER KEYS BY AREA")
out.append("Each area's page (in the source tree's \\fBdocs/\\fR, installed in "
           "\\fB/usr/share/doc/stackshot/docs/\\fR by the package) has the table of its keys: "
           "default, range and what a bad value does.")
for area, page, keys in table("| area | page | keys |"):
    out.append(".TP\n" + roff(area) + " \\- " + roff(page) + "\n" + roff(keys))
out.append(".SH SEE ALSO\n.BR stackshot (1)")
open("docs/man/stackshot.7", "w").write("\n".join(out) + "\n")
