/* grpc_client.c: unary gRPC calls on gRPC C core, for the OTLP exporters:
 * the module libstackshot-grpc.so (the only file that includes gRPC). Its
 * one exported symbol, ss_module_grpc_entry, returns the table of
 * grpc_module.h; the core's grpc.c is the ss_grpc_* API over it.
 *
 * One channel and one completion queue per client; the exporter thread that
 * created the client is the only one that uses it, so nothing here locks.
 * A call is one batch (send metadata, message, close; receive metadata,
 * message, status) and waits on the queue: gRPC's own threads do the I/O,
 * the caller waits as long as it likes (call_poll) or until the call's
 * deadline ends it.
 *
 * gRPC is initialised on first use, on the calling (exporter) thread, and
 * shut down only when the agent leaves a process that goes on (a host
 * short of threads: loader/loader_short.c), never at exit, where
 * grpc_shutdown can block. grpc_init and grpc_shutdown count: a host that
 * uses gRPC too keeps its threads. The threads
 * gRPC starts have names of their own ("grpc_global_tim", "event_engine")
 * but inherit the exporter thread's all-blocked signal mask, which is how
 * they are found and registered as internal (register_grpc_threads). */
#include "agent/module_abi.h"
#include "exporters/otlp/grpc_module.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/compression.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A channel that failed to connect is replaced, at most this often. */
#define RECONNECT_NS 1000000000ull

/* How long the exit path waits for gRPC to finish a cancelled call, or to
 * drain the completion queue, before leaving them to gRPC (leaked): on a
 * starved machine gRPC's threads may take that long to run at all, and an
 * exporter that is not back by the shutdown deadline is abandoned with
 * its counters incomplete. */
#define EXIT_WAIT_NS 100000000ull

struct ss_grpc_client {
    char target[1024];
    char user_agent[64];
    grpc_arg args[8];
    grpc_channel_args chargs;
    grpc_channel_credentials *creds;
    grpc_channel *channel;
    uint64_t channel_born_ns;
    bool replace_channel; /* the last call found no connection */
    nlink_t scanned_nlink; /* threads + 2 at the last register_grpc_threads */
    bool unconfirmed;      /* it left candidates to confirm at the next call */
    grpc_completion_queue *cq;
    grpc_metadata *md; /* ep->headers as metadata, sent on every call */
    size_t n_md;
    bool leaked_call; /* a cancelled call gRPC did not finish in EXIT_WAIT_NS */
};

/* gRPC initialised by this module (and not shut down since), and the
 * clients alive, under grpc_lock */
static pthread_mutex_t grpc_lock = PTHREAD_MUTEX_INITIALIZER;
static bool grpc_inited;
static unsigned live_clients;

/* gRPC names its threads ("grpc_global_tim", "event_engine", ...) and
 * starts some of them lazily, from whichever agent thread first needs
 * them; they inherit that thread's mask, which blocks every signal. A
 * thread of this process with exactly the mask of an agent thread is
 * gRPC's (a host thread blocking every signal could not be sampled by
 * signal anyway), with one exception: glibc starts every new thread with
 * all signals blocked until it runs the thread's function, so a host
 * thread caught inside pthread_create matches for a moment. A thread is
 * therefore registered as internal only when two scans at least
 * CONFIRM_NS apart both see the agent's mask; until then it is a
 * candidate (and counted as blocking the signal, as it does). */
#define CONFIRM_NS 20000000ull
#define MAX_CANDIDATES 128

typedef struct {
    pid_t tid;
    uint64_t first_ns;
} grpc_candidate;

static pthread_mutex_t scan_lock = PTHREAD_MUTEX_INITIALIZER;
static grpc_candidate candidates[MAX_CANDIDATES];
static size_t n_candidates;

static uint64_t candidate_since(pid_t tid, uint64_t now) {
    for (size_t i = 0; i < n_candidates; i++)
        if (candidates[i].tid == tid)
            return candidates[i].first_ns;
    return now;
}

/* Returns true while some thread awaits its confirming scan. The masks
 * and the thread list come from proc/ (SigBlk of each task's status). */
static bool register_grpc_threads(void) {
    uint64_t own, mask;
    if (ss_proc_sigblk(ss_gettid(), &own) != 0)
        return false;
    pid_t *tids = NULL;
    size_t cap = 0;
    int n = ss_proc_list_tids(&tids, &cap);
    if (n < 0)
        return false;
    pthread_mutex_lock(&scan_lock);
    grpc_candidate next[MAX_CANDIDATES];
    size_t n_next = 0;
    uint64_t now = ss_mono_ns();
    for (int i = 0; i < n; i++) {
        pid_t tid = tids[i];
        if (tid <= 0 || ss_internal_thread_is(tid))
            continue;
        if (ss_proc_sigblk(tid, &mask) != 0 || mask != own)
            continue;
        uint64_t since = candidate_since(tid, now);
        if (now - since >= CONFIRM_NS)
            ss_internal_thread_add(tid);
        else if (n_next < MAX_CANDIDATES)
            next[n_next++] = (grpc_candidate){tid, since};
    }
    memcpy(candidates, next, n_next * sizeof next[0]);
    n_candidates = n_next;
    pthread_mutex_unlock(&scan_lock);
    free(tids);
    return n_next > 0;
}

/* the process that initialised gRPC; read by any exporter's thread
 * (started_pid), written under grpc_lock */
static _Atomic pid_t grpc_pid;

/* With grpc_lock held. */
static void grpc_init_once(void) {
    if (grpc_inited)
        return;
    ss_internal_threads_lazy(); /* gRPC's threads, before they exist */
    grpc_init();
    grpc_inited = true;
    atomic_store(&grpc_pid, getpid());
}

static void module_release(void) {
    pthread_mutex_lock(&grpc_lock);
    if (grpc_inited && live_clients == 0 && atomic_load(&grpc_pid) == getpid()) {
        grpc_shutdown();
        grpc_inited = false;
    }
    pthread_mutex_unlock(&grpc_lock);
}

/* ---- channel ------------------------------------------------------- */

/* TLS that does not verify the server (https:// with INSECURE=true, the
 * user's explicit choice): gRPC's TLS credentials with a no-op verifier,
 * no server-certificate check and no host-name check. The connection is
 * still encrypted; only the server's identity is taken on trust. */
static grpc_channel_credentials *make_unverified_tls(const ss_otlp_endpoint *ep) {
    grpc_tls_credentials_options *o = grpc_tls_credentials_options_create();
    if (!o)
        return NULL;
    grpc_tls_certificate_verifier *v = grpc_tls_certificate_verifier_no_op_create();
    grpc_tls_credentials_options_set_certificate_verifier(o, v); /* takes a ref */
    grpc_tls_certificate_verifier_release(v);
    grpc_tls_credentials_options_set_verify_server_cert(o, 0);
    grpc_tls_credentials_options_set_check_call_host(o, 0);
    if (ep->client_key_pem && ep->client_cert_pem) {
        grpc_tls_identity_pairs *pairs = grpc_tls_identity_pairs_create();
        grpc_tls_identity_pairs_add_pair(pairs, ep->client_key_pem, ep->client_cert_pem);
        grpc_tls_certificate_provider *p =
            grpc_tls_certificate_provider_static_data_create(NULL, pairs); /* owns pairs */
        grpc_tls_credentials_options_set_certificate_provider(o, p); /* takes a ref */
        grpc_tls_certificate_provider_release(p);
        grpc_tls_credentials_options_watch_identity_key_cert_pairs(o);
    }
    return grpc_tls_credentials_create(o); /* owns o */
}

static grpc_channel_credentials *make_credentials(const ss_otlp_endpoint *ep) {
    if (!ep->tls)
        return grpc_insecure_credentials_create();
    if (ep->skip_verify)
        return make_unverified_tls(ep);
    grpc_ssl_pem_key_cert_pair pair = {ep->client_key_pem, ep->client_cert_pem};
    bool mtls = ep->client_key_pem && ep->client_cert_pem;
    /* NULL roots: gRPC's default roots (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH,
     * else the bundled /usr/share/grpc/roots.pem on Debian). */
    return grpc_ssl_credentials_create(ep->root_certs_pem, mtls ? &pair : NULL, NULL, NULL);
}

static int make_metadata(ss_grpc_client *c, const ss_otlp_endpoint *ep) {
    if (ep->n_headers == 0)
        return 0;
    c->md = calloc(ep->n_headers, sizeof *c->md);
    if (!c->md)
        return -ENOMEM;
    for (size_t i = 0; i < ep->n_headers; i++) {
        c->md[i].key = grpc_slice_from_copied_string(ep->headers[i].key);
        c->md[i].value = grpc_slice_from_copied_string(ep->headers[i].value);
    }
    c->n_md = ep->n_headers;
    return 0;
}

static void set_args(ss_grpc_client *c, const ss_otlp_endpoint *ep) {
    grpc_arg *args = c->args;
    int n = 0;
    args[n++] = (grpc_arg){.type = GRPC_ARG_STRING,
                           .key = (char *)GRPC_ARG_PRIMARY_USER_AGENT_STRING,
                           .value.string = c->user_agent};
    /* We retry ourselves, by the OTLP rules, and count every attempt. */
    args[n++] = (grpc_arg){.type = GRPC_ARG_INTEGER, .key = (char *)GRPC_ARG_ENABLE_RETRIES,
                           .value.integer = 0};
    /* Channels are replaced when they cannot connect (see maybe_replace_channel):
     * a private subchannel pool makes the new channel really connect anew
     * instead of sharing the old one's backoff. */
    args[n++] = (grpc_arg){.type = GRPC_ARG_INTEGER,
                           .key = (char *)GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL,
                           .value.integer = 1};
    args[n++] = (grpc_arg){.type = GRPC_ARG_INTEGER,
                           .key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                           .value.integer = 4 << 20};
    if (ep->compression == SS_OTLP_COMPRESS_GZIP)
        args[n++] = (grpc_arg){.type = GRPC_ARG_INTEGER,
                               .key = (char *)GRPC_COMPRESSION_CHANNEL_DEFAULT_ALGORITHM,
                               .value.integer = GRPC_COMPRESS_GZIP};
    c->chargs = (grpc_channel_args){.num_args = (size_t)n, .args = args};
}

/* While a channel backs off from a failed connect, its calls fail at once
 * (UNAVAILABLE) without trying, and gRPC C core 1.51 may take several
 * seconds (up to minutes: its backoff grows to 120 s) to try again; a
 * collector that restarts would be ignored that long. A fresh channel
 * connects on its first call, so a channel whose call found no connection
 * is replaced before the next call, at most once a second. */
static void maybe_replace_channel(ss_grpc_client *c) {
    if (!c->replace_channel || ss_mono_ns() - c->channel_born_ns < RECONNECT_NS)
        return;
    grpc_channel *fresh = grpc_channel_create(c->target, c->creds, &c->chargs);
    if (!fresh)
        return;
    grpc_channel_destroy(c->channel);
    c->channel = fresh;
    c->channel_born_ns = ss_mono_ns();
    c->replace_channel = false;
}

/* gRPC starts threads on the first calls, and later ones on demand (timer
 * threads, executors): rescan whenever the number of threads of the
 * process changed (one stat: /proc/self/task's link count is the number of
 * threads + 2). */
static void client_note_threads(ss_grpc_client *c) {
    struct stat st;
    if (stat("/proc/self/task", &st) == 0 &&
        (st.st_nlink != c->scanned_nlink || c->unconfirmed)) {
        c->unconfirmed = register_grpc_threads();
        c->scanned_nlink = st.st_nlink;
    }
}

static void client_destroy(ss_grpc_client *c);

static ss_grpc_client *client_create(const ss_otlp_endpoint *ep) {
    pthread_mutex_lock(&grpc_lock);
    grpc_init_once();
    pthread_mutex_unlock(&grpc_lock);
    if (atomic_load(&grpc_pid) != getpid()) {
        /* A forked child inherits gRPC's state but none of its threads;
         * without gRPC's fork support (which would make the host's own
         * fork() wait for gRPC) it cannot be used again here. */
        ss_error("otlp: gRPC was started in pid %d and cannot be used in this forked "
                 "child (pid %d); OTLP export disabled here",
                 (int)atomic_load(&grpc_pid), (int)getpid());
        return NULL;
    }
    ss_grpc_client *c = calloc(1, sizeof *c);
    if (!c) {
        ss_error("otlp: out of memory creating the gRPC client");
        return NULL;
    }
    pthread_mutex_lock(&grpc_lock);
    live_clients++; /* until client_destroy, which a failure below calls */
    pthread_mutex_unlock(&grpc_lock);
    snprintf(c->target, sizeof c->target, "%s", ep->target);
    if (make_metadata(c, ep) != 0) {
        ss_error("otlp: out of memory creating the gRPC client");
        client_destroy(c);
        return NULL;
    }
    snprintf(c->user_agent, sizeof c->user_agent, "%s/%s", SS_NAME, SS_VERSION);
    set_args(c, ep);
    c->creds = make_credentials(ep);
    if (!c->creds) {
        ss_error("otlp: cannot create %s credentials for %s", ep->tls ? "TLS" : "plaintext",
                 c->target);
        client_destroy(c);
        return NULL;
    }
    c->channel = grpc_channel_create(c->target, c->creds, &c->chargs);
    c->channel_born_ns = ss_mono_ns();
    c->cq = grpc_completion_queue_create_for_next(NULL);
    if (!c->channel || !c->cq) {
        ss_error("otlp: cannot create a gRPC channel to %s", c->target);
        client_destroy(c);
        return NULL;
    }
    return c;
}

static void client_destroy(ss_grpc_client *c) {
    if (!c)
        return;
    /* a client whose call gRPC still holds (leaked_call) stays counted:
     * gRPC is then never shut down under it */
    if (!c->leaked_call) {
        pthread_mutex_lock(&grpc_lock);
        live_clients--;
        pthread_mutex_unlock(&grpc_lock);
    }
    if (c->channel)
        grpc_channel_destroy(c->channel);
    if (c->creds)
        grpc_channel_credentials_release(c->creds);
    if (c->cq && !c->leaked_call) {
        /* the queue is destroyed only once drained; if gRPC is too slow to
         * say so, it stays (a leak at exit, never a wait past the deadline) */
        grpc_completion_queue_shutdown(c->cq);
        gpr_timespec until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                          gpr_time_from_nanos(EXIT_WAIT_NS, GPR_TIMESPAN));
        grpc_event ev;
        do
            ev = grpc_completion_queue_next(c->cq, until, NULL);
        while (ev.type == GRPC_OP_COMPLETE);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            grpc_completion_queue_destroy(c->cq);
    }
    if (c->leaked_call)
        return; /* the call gRPC still holds may read c->md: leave it all */
    for (size_t i = 0; i < c->n_md; i++) {
        grpc_slice_unref(c->md[i].key);
        grpc_slice_unref(c->md[i].value);
    }
    free(c->md);
    free(c);
}

/* ---- one call ------------------------------------------------------ */

static gpr_timespec call_deadline(uint64_t deadline_ns) {
    if (deadline_ns == 0)
        return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    uint64_t now = ss_mono_ns();
    uint64_t left = deadline_ns > now ? deadline_ns - now : 0;
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_nanos((int64_t)left, GPR_TIMESPAN));
}

static void copy_slice(char *dst, size_t n, grpc_slice s) {
    size_t len = GRPC_SLICE_LENGTH(s);
    if (len >= n)
        len = n - 1;
    memcpy(dst, GRPC_SLICE_START_PTR(s), len);
    dst[len] = '\0';
}

static void read_response(grpc_byte_buffer *bb, ss_buf *out) {
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, bb))
        return;
    grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
    ss_buf_append(out, GRPC_SLICE_START_PTR(all), GRPC_SLICE_LENGTH(all));
    grpc_slice_unref(all);
    grpc_byte_buffer_reader_destroy(&reader);
}

/* The grpc-status-details-bin trailer, raw: the core decodes it. */
static void copy_details(const grpc_metadata_array *trailers, ss_grpc_result *r) {
    for (size_t i = 0; i < trailers->count; i++) {
        const grpc_metadata *m = &trailers->metadata[i];
        if (!grpc_slice_str_cmp(m->key, "grpc-status-details-bin")) {
            ss_buf_append(&r->details, GRPC_SLICE_START_PTR(m->value),
                          GRPC_SLICE_LENGTH(m->value));
            return;
        }
    }
}

/* One call in flight: what its batch fills in, until it completes. The
 * struct's address is the completion-queue tag. */
struct ss_grpc_call {
    grpc_call *call;
    grpc_byte_buffer *send_bb, *recv_bb;
    grpc_metadata_array initial, trailing;
    grpc_status_code status;
    grpc_slice details;
};

static void call_free(ss_grpc_call *k) {
    grpc_slice_unref(k->details);
    grpc_metadata_array_destroy(&k->initial);
    grpc_metadata_array_destroy(&k->trailing);
    grpc_byte_buffer_destroy(k->send_bb);
    if (k->recv_bb)
        grpc_byte_buffer_destroy(k->recv_bb);
    grpc_call_unref(k->call);
    free(k);
}

static ss_grpc_call *call_start(ss_grpc_client *c, const char *method_path, const void *bytes,
                                size_t len, uint64_t deadline_ns, ss_grpc_result *result) {
    maybe_replace_channel(c);
    ss_grpc_call *k = calloc(1, sizeof *k);
    grpc_slice method = grpc_slice_from_static_string(method_path);
    grpc_call *call = k ? grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS,
                                                   c->cq, method, NULL,
                                                   call_deadline(deadline_ns), NULL)
                        : NULL;
    if (!call) {
        free(k);
        result->status = SS_GRPC_INTERNAL;
        snprintf(result->message, sizeof result->message, "cannot create a call");
        return NULL;
    }
    k->call = call;
    grpc_slice payload = grpc_slice_from_copied_buffer(bytes, len);
    k->send_bb = grpc_raw_byte_buffer_create(&payload, 1);
    grpc_slice_unref(payload);
    grpc_metadata_array_init(&k->initial);
    grpc_metadata_array_init(&k->trailing);
    k->status = GRPC_STATUS_UNKNOWN;
    k->details = grpc_empty_slice();

    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = c->n_md;
    ops[0].data.send_initial_metadata.metadata = c->md;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = k->send_bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &k->initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &k->recv_bb;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &k->trailing;
    ops[5].data.recv_status_on_client.status = &k->status;
    ops[5].data.recv_status_on_client.status_details = &k->details;
    grpc_call_error err = grpc_call_start_batch(call, ops, 6, k, NULL);
    if (err != GRPC_CALL_OK) {
        result->status = SS_GRPC_INTERNAL;
        snprintf(result->message, sizeof result->message, "call rejected locally (%s)",
                 grpc_call_error_to_string(err));
        call_free(k);
        return NULL;
    }
    return k;
}

/* The call completed: its outcome into *result, then free it. */
static void call_finish(ss_grpc_client *c, ss_grpc_call *k, ss_grpc_result *result) {
    result->status = (int)k->status;
    copy_slice(result->message, sizeof result->message, k->details);
    if (k->status == GRPC_STATUS_OK && k->recv_bb)
        read_response(k->recv_bb, &result->response);
    if (k->status != GRPC_STATUS_OK)
        copy_details(&k->trailing, result);
    if (k->status == GRPC_STATUS_UNAVAILABLE &&
        grpc_channel_check_connectivity_state(c->channel, 0) != GRPC_CHANNEL_READY)
        c->replace_channel = true;
    call_free(k);
    client_note_threads(c);
}

static bool call_poll(ss_grpc_client *c, ss_grpc_call *k, uint64_t wait_ns,
                      ss_grpc_result *result) {
    gpr_timespec until = wait_ns == UINT64_MAX
                             ? gpr_inf_future(GPR_CLOCK_MONOTONIC)
                             : gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                            gpr_time_from_nanos((int64_t)wait_ns, GPR_TIMESPAN));
    for (;;) {
        /* Only this client's calls use its queue, one at a time: the one
         * completion that can come is this call's. */
        grpc_event ev = grpc_completion_queue_next(c->cq, until, NULL);
        if (ev.type == GRPC_QUEUE_TIMEOUT)
            return false;
        if (ev.type == GRPC_OP_COMPLETE && ev.tag == k) {
            call_finish(c, k, result);
            return true;
        }
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            return false;
    }
}

static void call_cancel(ss_grpc_client *c, ss_grpc_call *k, ss_grpc_result *result) {
    grpc_call_cancel(k->call, NULL);
    /* a cancelled call completes promptly (CANCELLED), unless gRPC's
     * threads are starved: then the call, and the queue it completes on,
     * are left to gRPC rather than hold the exit */
    if (!call_poll(c, k, EXIT_WAIT_NS, result)) {
        c->leaked_call = true;
        result->status = SS_GRPC_CANCELLED;
        snprintf(result->message, sizeof result->message, "cancelled");
    }
}

static pid_t started_pid(void) { return atomic_load(&grpc_pid); }

static const ss_grpc_module module = {
    .size = sizeof(ss_grpc_module),
    .client_create = client_create,
    .client_destroy = client_destroy,
    .note_threads = client_note_threads,
    .call_start = call_start,
    .call_poll = call_poll,
    .call_cancel = call_cancel,
    .started_pid = started_pid,
    .release = module_release,
};

__attribute__((visibility("default"))) const void *ss_module_grpc_entry(void) {
    return &module;
}
