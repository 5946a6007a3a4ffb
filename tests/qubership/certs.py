#!/usr/bin/env python3
"""Test certificates, made at test time with the openssl command: a test
CA ("ca"), a server certificate signed by it for localhost and 127.0.0.1
("srv") and one for another name ("other"), a second CA the agent must
not trust ("rogue"), and the test CA in a PKCS#12 keystore (the Java
agent's kind, password "changeit")."""
import os
import subprocess


def openssl(*argv):
    subprocess.run(["openssl"] + list(argv), check=True, capture_output=True, timeout=60)


def make_certs(d):
    """Writes the files into d (see the module's comment)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "rogue"):
        os.makedirs(os.path.join(d, ca))
        openssl("req", "-x509", *ec, "-keyout", os.path.join(d, ca, "ca.key"),
                "-out", os.path.join(d, ca, "ca.crt"), "-days", "2", "-subj", "/CN=stackshot test " + ca)
    for name, san in (("srv", "DNS:localhost,IP:127.0.0.1"), ("other", "DNS:other.example")):
        key, csr, crt = (os.path.join(d, name + x) for x in (".key", ".csr", ".crt"))
        ext = os.path.join(d, name + ".ext")
        with open(ext, "w") as f:
            f.write("subjectAltName=%s\n" % san)
        openssl("req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=" + san.split(":")[1].split(",")[0])
        openssl("x509", "-req", "-in", csr, "-CA", os.path.join(d, "ca", "ca.crt"),
                "-CAkey", os.path.join(d, "ca", "ca.key"), "-CAcreateserial", "-out", crt,
                "-days", "2", "-extfile", ext)
    openssl("pkcs12", "-export", "-nokeys", "-in", os.path.join(d, "ca", "ca.crt"),
            "-out", os.path.join(d, "keystore.p12"), "-passout", "pass:changeit")
