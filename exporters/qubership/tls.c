/* tls.c: TLS to the collector (REMOTE_DUMP_PORT_SSL, conventionally 1717),
 * with OpenSSL, over the TCP client's non-blocking socket. The protocol
 * inside is the plain one, byte for byte (spec §3.1).
 *
 * Whom to trust, in this order:
 *   - TLS_CERT_DIR (what diagtools reads): ca.crt the trusted roots,
 *     tls.crt + tls.key a client certificate;
 *   - the Java agent's PKCS#12 keystore, NC_DIAGNOSTIC_KEYSTORE (or
 *     TLS_KEYSTORE_PATH) with NC_DIAGNOSTIC_KEYSTORE_PASSWD (or
 *     TLS_KEYSTORE_PWD): its certificates are trusted and its key is the
 *     client's, as the Java agent loads it for both;
 *   - otherwise the system's roots.
 * Verification is on by default, as in the Java agent (which refuses a
 * server its keystore does not vouch for). STACKSHOT_QUBERSHIP_TLS_VERIFY:
 * "full" (default) checks the chain and that the certificate names the
 * host (stricter than the Java agent, whose socket checks no name);
 * "chain" checks the chain only, as the Java agent; "none" checks nothing
 * (one warning line). TLS 1.2 at least.
 *
 * Every call is non-blocking: a call that needs the socket readable or
 * writable returns -EAGAIN and says which (qbm_tls_want), and the client
 * polls for that, within its deadlines. This file is in the module
 * libstackshot-qubership.so (qb_module.h): OpenSSL is mapped only by a
 * process that uses TLS (or a zip, zip.c). */
#include "agent/module_abi.h"
#include "exporters/qubership/qb_module.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pkcs12.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct qb_tls_ctx {
    SSL_CTX *ctx;
    int verify; /* 2 full, 1 chain, 0 none */
};

struct qb_tls {
    SSL *ssl;
    short want;
};

/* The last OpenSSL error as one phrase. */
static void ssl_error(char *why, size_t n, const char *what) {
    unsigned long e = ERR_get_error();
    char buf[200] = "";
    if (e)
        ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    snprintf(why, n, "%s%s%s", what, buf[0] ? ": " : "", buf);
}

static int load_cert_dir(SSL_CTX *ctx, const char *dir, char *why, size_t n) {
    char ca[1100], crt[1100], key[1100];
    snprintf(ca, sizeof ca, "%s/ca.crt", dir);
    snprintf(crt, sizeof crt, "%s/tls.crt", dir);
    snprintf(key, sizeof key, "%s/tls.key", dir);
    if (access(ca, R_OK) == 0 && SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
        ssl_error(why, n, ca);
        return -EINVAL;
    }
    if (access(ca, R_OK) != 0 && SSL_CTX_set_default_verify_paths(ctx) != 1) {
        ssl_error(why, n, "the system's trusted roots");
        return -EINVAL;
    }
    if (access(crt, R_OK) == 0 && access(key, R_OK) == 0 &&
        (SSL_CTX_use_certificate_chain_file(ctx, crt) != 1 ||
         SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)) {
        ssl_error(why, n, crt);
        return -EINVAL;
    }
    return 0;
}

static int load_keystore(SSL_CTX *ctx, const char *path, const char *password, char *why,
                         size_t n) {
    FILE *f = fopen(path, "rbe");
    if (!f) {
        snprintf(why, n, "%s: %s", path, strerror(errno));
        return -errno;
    }
    PKCS12 *p12 = d2i_PKCS12_fp(f, NULL);
    fclose(f);
    EVP_PKEY *key = NULL;
    X509 *cert = NULL;
    STACK_OF(X509) *cas = NULL;
    if (!p12 || PKCS12_parse(p12, password, &key, &cert, &cas) != 1) {
        PKCS12_free(p12);
        ssl_error(why, n, path);
        return -EINVAL;
    }
    PKCS12_free(p12);
    int rc = 0;
    X509_STORE *store = SSL_CTX_get_cert_store(ctx);
    for (int i = 0; i < sk_X509_num(cas); i++)
        X509_STORE_add_cert(store, sk_X509_value(cas, i));
    if (cert) {
        X509_STORE_add_cert(store, cert);
        if (key && (SSL_CTX_use_certificate(ctx, cert) != 1 || SSL_CTX_use_PrivateKey(ctx, key) != 1)) {
            ssl_error(why, n, path);
            rc = -EINVAL;
        }
    }
    if (rc == 0 && !cert && sk_X509_num(cas) == 0) {
        snprintf(why, n, "%s: no certificate in the keystore", path);
        rc = -EINVAL;
    }
    ERR_clear_error(); /* adding a certificate twice is no error here */
    X509_free(cert);
    EVP_PKEY_free(key);
    sk_X509_pop_free(cas, X509_free);
    return rc;
}

qb_tls_ctx *qbm_tls_ctx_new(char *why, size_t n) {
    qb_tls_ctx *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(why, n, "out of memory");
        return NULL;
    }
    const char *v = ss_config_str("STACKSHOT_QUBERSHIP_TLS_VERIFY", "full");
    t->verify = strcmp(v, "none") == 0 ? 0 : strcmp(v, "chain") == 0 ? 1 : 2;
    if (t->verify == 2 && strcmp(v, "full") != 0)
        ss_config_bad("STACKSHOT_QUBERSHIP_TLS_VERIFY", v, "not full, chain or none", "using full");
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (!t->ctx) {
        ssl_error(why, n, "SSL_CTX_new");
        free(t);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    const char *dir = ss_config_str("TLS_CERT_DIR", "");
    const char *ks = ss_config_str("NC_DIAGNOSTIC_KEYSTORE", ss_config_str("TLS_KEYSTORE_PATH", ""));
    const char *pw = ss_config_str("NC_DIAGNOSTIC_KEYSTORE_PASSWD",
                                   ss_config_str("TLS_KEYSTORE_PWD", ""));
    int rc = *dir  ? load_cert_dir(t->ctx, dir, why, n)
             : *ks ? load_keystore(t->ctx, ks, pw, why, n)
                   : (SSL_CTX_set_default_verify_paths(t->ctx) == 1 ? 0 : -EINVAL);
    if (rc != 0) {
        if (!why[0])
            ssl_error(why, n, "the system's trusted roots");
        SSL_CTX_free(t->ctx);
        free(t);
        return NULL;
    }
    SSL_CTX_set_verify(t->ctx, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    if (!t->verify)
        ss_warn("qubership: STACKSHOT_QUBERSHIP_TLS_VERIFY=none: the collector's certificate is "
                "not checked");
    return t;
}

void qbm_tls_ctx_free(qb_tls_ctx *t) {
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    free(t);
}

qb_tls *qbm_tls_new(qb_tls_ctx *ctx, int fd, const char *host) {
    qb_tls *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->ssl = SSL_new(ctx->ctx);
    if (!t->ssl || SSL_set_fd(t->ssl, fd) != 1) {
        SSL_free(t->ssl);
        free(t);
        return NULL;
    }
    /* a name, not an address: it goes in the SNI extension */
    bool is_ip = strspn(host, "0123456789.") == strlen(host) || strchr(host, ':');
    if (!is_ip)
        SSL_set_tlsext_host_name(t->ssl, host);
    if (ctx->verify == 2) {
        X509_VERIFY_PARAM *param = SSL_get0_param(t->ssl);
        X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        if (is_ip)
            X509_VERIFY_PARAM_set1_ip_asc(param, host);
        else
            X509_VERIFY_PARAM_set1_host(param, host, 0);
    }
    return t;
}

/* Map an OpenSSL result: n >= 0 done, or -EAGAIN (want set), -EPIPE, -EPROTO. */
static int result(qb_tls *t, int r, char *why, size_t n) {
    int e = SSL_get_error(t->ssl, r);
    switch (e) {
    case SSL_ERROR_WANT_READ:
        t->want = POLLIN;
        return -EAGAIN;
    case SSL_ERROR_WANT_WRITE:
        t->want = POLLOUT;
        return -EAGAIN;
    case SSL_ERROR_ZERO_RETURN:
        return -EPIPE;
    case SSL_ERROR_SYSCALL:
        ERR_clear_error();
        if (why)
            snprintf(why, n, "the connection broke during TLS");
        return errno ? -errno : -EPIPE;
    default: {
        long v = SSL_get_verify_result(t->ssl);
        if (why && v != X509_V_OK)
            snprintf(why, n, "TLS: the collector's certificate: %s",
                     X509_verify_cert_error_string(v));
        else if (why)
            ssl_error(why, n, "TLS");
        ERR_clear_error();
        return -EPROTO;
    }
    }
}

int qbm_tls_handshake(qb_tls *t, char *why, size_t n) {
    ERR_clear_error();
    int r = SSL_connect(t->ssl);
    return r == 1 ? 0 : result(t, r, why, n);
}

ssize_t qbm_tls_send(qb_tls *t, const void *p, size_t n) {
    ERR_clear_error();
    size_t done = 0;
    int r = SSL_write_ex(t->ssl, p, n, &done);
    return r == 1 ? (ssize_t)done : result(t, r, NULL, 0);
}

ssize_t qbm_tls_recv(qb_tls *t, void *p, size_t n) {
    ERR_clear_error();
    size_t got = 0;
    int r = SSL_read_ex(t->ssl, p, n, &got);
    return r == 1 ? (ssize_t)got : result(t, r, NULL, 0);
}

short qbm_tls_want(const qb_tls *t) { return t->want; }

void qbm_tls_free(qb_tls *t, bool graceful) {
    if (!t)
        return;
    if (graceful)
        SSL_shutdown(t->ssl); /* one close_notify, not waiting for the answer */
    ERR_clear_error();
    SSL_free(t->ssl);
    free(t);
}
