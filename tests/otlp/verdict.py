"""verdict.py: how the python tests of tests/otlp end: each failure on a
FAIL line, then OK or the count; the exit code (0 pass, 1 fail)."""


def verdict(failures):
    for f in failures:
        print("FAIL: " + f)
    print("OK" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0
