#!/usr/bin/env python3
"""The README and docs/ stay a map that holds: every relative link of README.md and
docs/**/*.md reaches an existing file (and, for a .md target, an existing heading), every
configuration key the code reads is documented in docs/configuration.md, the README keeps the
two set-up commands and the exporter table of docs/configuration.md, and docs/man/stackshot.7
is what docs/man/keys7.py writes from docs/configuration.md today.

    docs_links.py --src REPOSITORY_ROOT
Exit 0 when all hold; 1 with one line per fault."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Keys read by the code: the agent's own, OpenTelemetry's and Splunk's, and the Qubership
# collector's and diagtools' names the qubership exporters share with the Java agent.
KEY = re.compile(r'"((?:STACKSHOT|SPLUNK|OTEL|REMOTE_DUMP|NC|DIAGNOSTIC|TLS)_[A-Z0-9_]+'
                 r'|POD_NAME|MICROSERVICE_NAME|CLOUD_NAMESPACE|NAMESPACE)"')
# Strings of that shape that are not keys: a prefix the per-signal keys are built from, and the
# name of the OTEP 4719 process context mapping (docs/otel-context.md).
NOT_KEYS = {"OTEL_EXPORTER_OTLP_", "OTEL_CTX"}
# Folders whose code is not the product: keys named there are test or benchmark settings.
NOT_CODE = {"tests", "bench", "examples", "docs", "cmake", ".git", ".ci"}
SETUP = [".ci/install-deps && examples/run-demo.sh", ".ci/install-deps && tests/run.sh"]
# Pages a link may name before they are merged (they land with their own change): a missing one
# is reported but is no fault. Empty this set once they are in.
PENDING = set()
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)\)")

faults = []


def fault(msg):
    faults.append(msg)
    print("docs_links: " + msg)


def prose(text):
    """The text outside fenced code blocks and inline code, line numbers kept."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "``", line))
    return out


def slug(heading):
    """GitHub's anchor of a heading: its text without markup, lowercased, punctuation other
    than '-' and '_' dropped, spaces made '-'."""
    t = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    t = t.replace("`", "").replace("*", "").strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, found, fenced = {}, set(), False
        for line in open(path, encoding="utf-8").read().split("\n"):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            m = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                s = slug(m.group(1))
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else "%s-%d" % (s, n))
        cache[path] = found
    return cache[path]


def check_links(root, pages):
    count = 0
    for page in pages:
        rel = os.path.relpath(page, root)
        for no, line in enumerate(prose(open(page, encoding="utf-8").read()), 1):
            for target in LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):
                    continue  # http:, https:, mailto:
                count += 1
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path \
                    else page
                if not os.path.exists(dest) and os.path.relpath(dest, root) in PENDING:
                    print("docs_links: %s:%d: %s not merged yet" % (rel, no, target))
                elif not os.path.exists(dest):
                    fault("%s:%d: link to %s: no such file" % (rel, no, target))
                elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    fault("%s:%d: link to %s: no heading with that anchor in %s"
                          % (rel, no, target, os.path.relpath(dest, root)))
    return count


def code_keys(root):
    keys = set()
    for top in sorted(os.listdir(root)):
        if top in NOT_CODE or top.startswith("build") or not os.path.isdir(os.path.join(root, top)):
            continue
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = [x for x in dirs if x != "node_modules"]
            for f in files:
                if f.endswith((".c", ".h", ".cc", ".cpp", ".java")):
                    text = open(os.path.join(d, f), encoding="utf-8", errors="replace").read()
                    keys.update(KEY.findall(text))
    return keys - NOT_KEYS


def table_after(text, marker):
    i = text.find(marker)
    if i < 0:
        return None
    rows = []
    for line in text[i:].split("\n"):
        if not line.startswith("|"):
            break
        rows.append(line.rstrip())
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    root = os.path.abspath(ap.parse_args().src)
    readme_path = os.path.join(root, "README.md")
    conf_path = os.path.join(root, "docs", "configuration.md")
    pages = [readme_path]
    for d, _, files in os.walk(os.path.join(root, "docs")):
        pages += [os.path.join(d, f) for f in sorted(files) if f.endswith(".md")]

    n = check_links(root, pages)
    if n < 20:
        fault("only %d relative links found in %d pages: the parser is broken" % (n, len(pages)))

    conf = open(conf_path, encoding="utf-8").read()
    documented = set(re.findall(r"`([A-Z_][A-Z0-9_]*)`", conf))
    keys = code_keys(root)
    if len(keys) < 50:
        fault("only %d keys found in the code: the scan is broken" % len(keys))
    for k in sorted(keys - documented):
        fault("key %s is read by the code but not documented in docs/configuration.md" % k)

    readme = open(readme_path, encoding="utf-8").read()
    for cmd in SETUP:
        if cmd not in readme:
            fault("README.md lost the set-up command %r" % cmd)
    marker = "| exporter (`STACKSHOT_EXPORTERS`)"
    a, b = table_after(readme, marker), table_after(conf, marker)
    if not a or a != b:
        fault("README.md's exporter table is not docs/configuration.md's")

    # stackshot(7) as keys7.py would write it now, in a scratch copy of the tree's inputs
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "docs", "man"))
        shutil.copy(conf_path, os.path.join(tmp, "docs"))
        r = subprocess.run([sys.executable, os.path.join(root, "docs", "man", "keys7.py")],
                           cwd=tmp, capture_output=True, text=True)
        made = os.path.join(tmp, "docs", "man", "stackshot.7")
        if r.returncode != 0 or not os.path.exists(made):
            fault("docs/man/keys7.py failed: %s" % r.stderr.strip()[-300:])
        elif open(made).read() != open(os.path.join(root, "docs", "man", "stackshot.7")).read():
            fault("docs/man/stackshot.7 is stale: run python3 docs/man/keys7.py")

    print("docs_links: %d pages, %d relative links, %d keys read by the code: %s"
          % (len(pages), n, len(keys), "FAIL" if faults else "ok"))
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
