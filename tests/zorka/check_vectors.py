#!/usr/bin/env python3
"""Every expected file of the Zorka/ZICO vectors (tests/zorka/vectors,
copied from the shared vectors: real captured requests and the spec's
examples, with what the original Java readers printed for them) against
`stackshot-dump zorka`, byte for byte. Standard library only.

    check_vectors.py --dump stackshot-dump --vectors DIR
"""
import argparse
import difflib
import os
import subprocess
import sys

# expected file -> (arguments, input files); the Gen C example was decoded
# by the oracle with session 00000000deadbeef and this trace ID
CASES = {
    "example-genC.expected.txt": (
        ["--session", "00000000deadbeef", "--reset", "true",
         "--trace-id", "0123456789abcdeffedcba9876543210"],
        ["example-genC.agd.hex", "example-genC.trc.hex"]),
    "zico-2020-traces1.expected.txt": ([], ["zico-2020-traces1.jsonl"]),
    "zico-2019-traces1.expected.txt": ([], ["zico-2019-traces1.jsonl"]),
    "tdb-2017-sampled.expected.txt": ([], ["tdb-2017-sampled.agd.b64", "tdb-2017-sampled.trc.b64"]),
    "example-genB.expected.txt": ([], ["example-genB.trc.hex", "example-genB-le.trc.hex",
                                       "example-genB-longcalls.trc.hex"]),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--vectors", required=True)
    a = ap.parse_args()
    expected = sorted(f for f in os.listdir(a.vectors) if f.endswith(".expected.txt"))
    failed = 0
    for name in expected:
        if name not in CASES:
            print("FAIL %s: no case for it" % name)
            failed += 1
            continue
        args, files = CASES[name]
        p = subprocess.run([a.dump, "zorka"] + args + [os.path.join(a.vectors, f) for f in files],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        got = p.stdout.decode(errors="replace")
        with open(os.path.join(a.vectors, name), encoding="utf-8") as f:
            want = f.read()
        if p.returncode != 0 or got.rstrip("\n") != want.rstrip("\n"):
            failed += 1
            print("FAIL %s (exit %d)" % (name, p.returncode))
            sys.stdout.writelines(difflib.unified_diff(
                want.splitlines(True), got.splitlines(True), "expected", "stackshot-dump"))
        else:
            print("ok   %s (%d lines)" % (name, want.count("\n") + 1))
    print("%d of %d expected files reproduced" % (len(expected) - failed, len(expected)))
    return 1 if failed or not expected else 0


if __name__ == "__main__":
    sys.exit(main())
