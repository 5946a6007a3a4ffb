/* sender.c: closed traces -> the collector, on a thread of its own
 * ("stackshot-zksnd"), so that a slow or dead collector holds neither the
 * exporter thread (which keeps turning rounds into traces) nor the exit
 * (the call in flight is cancelled at the shutdown deadline).
 *
 * Each trace is one exchange on the client's kept-alive connection, as
 * the Zorka agent does it (spec §7): POST /agent/submit/agd with the
 * definitions the trace needs that this session has not had (skipped when
 * there are none), then POST /agent/submit/trc. Any answer but 2xx, and
 * any failure to get one, resets the session (marks and method numbering
 * cleared: the next agd carries everything, with Reset: true), and the
 * same trace is encoded and sent again after 125 ms, then 250 ms, ...
 * (10 retries by default); after the last one it is dropped and counted:
 * "rejected" when the collector answered, "dropped" when it could not be
 * reached. The backoff is the collector's, not the trace's: while it
 * fails, the next trace waits it out too, so a collector down from the
 * start costs one attempt per backoff period (doubling up to
 * BACKOFF_MAX_MS) and one line. Waiting traces are bounded in bytes; past
 * the bound the oldest go (counted). At exit what is left goes only to a
 * collector whose last call succeeded (exporters/common/backend.h). */
#include "agent/module_abi.h"
#include "exporters/zorka/zorka.h"
#include "exporters/common/backend.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define ZK_CONTENT_TYPE "Content-Type: application/zorka+cbor+v1"
#define ZK_MAX_ANSWER 1024
#define LOUD_FIRST 3     /* the first drops of a kind are all said ... */
#define LOUD_EVERY 100   /* ... then one in this many */
#define BACKOFF_MAX_MS 30000 /* the longest wait between attempts */

struct zk_sender {
    zk_sender_config cfg;
    ss_exporter_stats *stats;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    zk_trace *head, *tail;  /* waiting, oldest first */
    size_t queued_bytes;
    bool stopping, finished, started;
    int start_rc;
    uint64_t stop_deadline;
    ss_http_client *client; /* created and used by the sender thread; freed by stop */
    zk_session *session;
    char sid[17];
    char agd_url[1100], trc_url[1100], shown[1100];
    ss_buf agd, trc;
    uint64_t failures, drops, overflow; /* for rate-limited lines */
    _Atomic uint64_t late;              /* dropped by the shutdown deadline */
    ss_round_loss lost;                 /* rounds whose data did not all arrive */
    bool failing;
    int failing_rc;                     /* the failure last said, to say a new one */
    uint64_t wait_ns, next_try_ns;      /* the collector's backoff (sender thread) */
    _Atomic bool overflow_told;         /* once per outage */
    ss_backend backend;                 /* what an exit gives the collector */
};

/* ---- small helpers ---------------------------------------------------------- */

static void wait_until_locked(zk_sender *s, uint64_t deadline_ns) {
    uint64_t now = ss_mono_ns();
    if (deadline_ns <= now)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t abs = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + (deadline_ns - now);
    ts.tv_sec = (time_t)(abs / 1000000000ull);
    ts.tv_nsec = (long)(abs % 1000000000ull);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

static bool loud(uint64_t n) { return n <= LOUD_FIRST || n % LOUD_EVERY == 0; }

static void drop(zk_sender *s, zk_trace *t, bool rejected) {
    atomic_fetch_add(rejected ? &s->stats->records_rejected : &s->stats->records_dropped, 1);
    ss_round_loss_mark(&s->lost, s->stats, t->round_lo, t->round_hi);
    zk_trace_free(t);
}

/* The stop deadline when stopping, else 0. */
static uint64_t stop_deadline(zk_sender *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t d = s->stopping ? s->stop_deadline : 0;
    pthread_mutex_unlock(&s->mu);
    return d;
}

static bool stopping(zk_sender *s) {
    pthread_mutex_lock(&s->mu);
    bool stop = s->stopping;
    pthread_mutex_unlock(&s->mu);
    return stop;
}

/* Sleep until `until` (monotonic). 1: slept; 0: the exporter is stopping
 * (at once, or during the wait): no time for politeness, try once more
 * now; -1: the stop deadline has passed. */
static int backoff(zk_sender *s, uint64_t until) {
    pthread_mutex_lock(&s->mu);
    int rc = 1;
    while (ss_mono_ns() < until) {
        if (s->stopping) {
            rc = ss_mono_ns() < s->stop_deadline ? 0 : -1;
            break;
        }
        wait_until_locked(s, until);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* ---- one exchange ---------------------------------------------------------- */

/* POST body to url. 0 (2xx), else -errno, or the HTTP status (> 0). */
static int post(zk_sender *s, const char *url, const char *const *headers, const ss_buf *body,
                char *why, size_t why_len) {
    uint64_t deadline = ss_mono_ns() + (uint64_t)s->cfg.timeout_ms * 1000000ull;
    uint64_t stop = stop_deadline(s);
    if (stop && stop < deadline)
        deadline = stop;
    ss_http_request req = {.method = "POST", .url = url, .headers = headers,
                           .body = body->data ? body->data : "", .body_len = body->len,
                           .connect_timeout_ms = s->cfg.timeout_ms, .deadline_ns = deadline,
                           .max_response = ZK_MAX_ANSWER};
    ss_http_response resp;
    ss_backend_call_start(&s->backend);
    int rc = ss_http_perform(s->client, &req, &resp);
    ss_buf_free(&resp.body);
    if (rc != 0) {
        ss_backend_call_end(&s->backend, ss_backend_state_of_rc(rc));
        snprintf(why, why_len, "%s", resp.error);
        return rc;
    }
    if (resp.status < 200 || resp.status > 299) {
        ss_backend_call_end(&s->backend, SS_BACKEND_FAILING);
        snprintf(why, why_len, "HTTP %d", resp.status);
        return resp.status;
    }
    ss_backend_call_end(&s->backend, SS_BACKEND_HEALTHY);
    atomic_fetch_add(&s->stats->bytes_sent, body->len);
    return 0;
}

/* Encode t for the session and send agd (when needed) and trc. 0, the
 * failing HTTP status (> 0), -errno; -ENOMEM means the trace cannot be
 * encoded at all. */
static int exchange(zk_sender *s, const zk_trace *t, char *why, size_t why_len) {
    ss_buf_reset(&s->agd);
    ss_buf_reset(&s->trc);
    bool reset = zk_session_reset_pending(s->session);
    int rc = zk_encode_trace(s->session, &s->cfg.process, t, &s->agd, &s->trc);
    if (rc != 0) {
        snprintf(why, why_len, "%s", rc == -E2BIG ? "it needs more symbols than ZICO can number"
                                                  : "out of memory encoding it");
        return -ENOMEM; /* cannot be sent, however often it is tried */
    }
    char sid[64], tid[64];
    snprintf(sid, sizeof sid, "X-Zorka-Session-ID: %s", s->sid);
    if (s->agd.len || reset) {
        const char *headers[] = {ZK_CONTENT_TYPE, sid,
                                 reset ? "X-Zorka-Session-Reset: true"
                                       : "X-Zorka-Session-Reset: false",
                                 NULL};
        rc = post(s, s->agd_url, headers, &s->agd, why, why_len);
        if (rc)
            return rc;
        zk_session_reset_done(s->session);
    }
    char id[33];
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        id[2 * i] = digits[t->header_id[i] >> 4];
        id[2 * i + 1] = digits[t->header_id[i] & 15];
    }
    id[32] = '\0';
    snprintf(tid, sizeof tid, "X-Zorka-Trace-ID: %s", id);
    const char *headers[] = {ZK_CONTENT_TYPE, sid, "X-Zorka-Session-Reset: false", tid, NULL};
    return post(s, s->trc_url, headers, &s->trc, why, why_len);
}

/* Once the exporter is stopping there is no time for politeness: a trace
 * is tried at once, twice when the collector answered the first time (an
 * expired session needs the attempt with the reset), once when it could
 * not be reached. */
#define STOP_TRIES_ANSWERED 2
#define STOP_TRIES_UNREACHED 1

/* A failed attempt: said when the collector starts failing or fails in a
 * new way (the rest at debug: counted, and the exit's line sums them). */
static void tell_failure(zk_sender *s, int rc, const char *why, bool last) {
    ss_log(s->failing && rc == s->failing_rc ? SS_LOG_DEBUG : SS_LOG_WARN,
           "zorka: export to %s failed: %s; %s", s->shown, why,
           last ? "giving the trace up" : "resetting the session and retrying");
    s->failing = true;
    s->failing_rc = rc;
}

/* The collector failed: the next attempt, of this trace or the next, waits
 * the backoff, which doubles up to BACKOFF_MAX_MS. */
static void back_off(zk_sender *s) {
    uint64_t first = (uint64_t)s->cfg.retry_ms * 1000000ull;
    if (s->wait_ns < first)
        s->wait_ns = first;
    s->next_try_ns = ss_mono_ns() + s->wait_ns;
    s->wait_ns *= 2;
    if (s->wait_ns > BACKOFF_MAX_MS * 1000000ull)
        s->wait_ns = BACKOFF_MAX_MS * 1000000ull;
}

/* One trace, with the agent's retry rule; frees it. */
static void send_trace(zk_sender *s, zk_trace *t) {
    uint32_t stop_tries = 0;
    for (uint32_t attempt = 0;; attempt++) {
        char why[200] = "";
        /* a failing collector's backoff holds for every trace */
        int slept = 1;
        if (s->failing && stop_tries == 0 && (slept = backoff(s, s->next_try_ns)) < 0) {
            atomic_fetch_add(&s->late, 1);
            drop(s, t, false); /* stopping: its last chance is gone */
            return;
        }
        if (attempt > 0)
            atomic_fetch_add(&s->stats->retries, 1);
        if (stopping(s))
            stop_tries++;
        int rc = exchange(s, t, why, sizeof why);
        if (rc == 0) {
            atomic_fetch_add(&s->stats->records_exported, 1);
            if (s->failing) {
                ss_info("zorka: export to %s works again", s->shown);
                s->failing = false;
            }
            s->wait_ns = 0;
            s->next_try_ns = 0;
            atomic_store(&s->overflow_told, false);
            zk_trace_free(t);
            return;
        }
        /* whatever went wrong, the collector may have lost or never had
         * the session: everything is sent again, with a reset (spec §7.3) */
        zk_session_reset(s->session);
        atomic_fetch_add(&s->stats->failures, 1);
        if (rc == -ENOMEM || rc == -ECANCELED) {
            if (rc == -ECANCELED)
                atomic_fetch_add(&s->late, 1);
            else if (loud(++s->drops))
                ss_warn("zorka: a trace of %" PRIu32 " samples dropped: %s", t->n_samples, why);
            drop(s, t, false);
            return;
        }
        bool last = attempt >= s->cfg.retries;
        tell_failure(s, rc, why, last);
        back_off(s);
        if (last) {
            ++s->drops;
            ss_log(SS_LOG_DEBUG, "zorka: a trace of %" PRIu32 " samples dropped after %" PRIu32
                   " attempts (%" PRIu64 " so far)", t->n_samples, attempt + 1, s->drops);
            drop(s, t, rc > 0);
            return;
        }
        if (stop_tries >= (rc > 0 ? STOP_TRIES_ANSWERED : STOP_TRIES_UNREACHED)) {
            atomic_fetch_add(&s->late, 1);
            drop(s, t, false); /* stopping: its last chance is gone */
            return;
        }
        (void)slept;
    }
}

/* ---- the thread ------------------------------------------------------------- */

static void *sender_main(void *arg) {
    zk_sender *s = arg;
    s->client = ss_http_client_new(&s->cfg.tls);
    s->session = zk_session_new();
    pthread_mutex_lock(&s->mu);
    s->start_rc = s->client && s->session ? 0 : -ENOMEM;
    s->started = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->start_rc)
        return NULL;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->head && !s->stopping)
            pthread_cond_wait(&s->cv, &s->mu);
        zk_trace *t = s->head;
        if (t) {
            s->head = t->next;
            if (!s->head)
                s->tail = NULL;
            s->queued_bytes -= t->bytes;
        }
        bool late = s->stopping && ss_mono_ns() >= s->stop_deadline;
        pthread_mutex_unlock(&s->mu);
        if (!t)
            break; /* stopping, nothing left */
        if (late) {
            atomic_fetch_add(&s->late, 1);
            drop(s, t, false);
        }
        else
            send_trace(s, t);
    }
    pthread_mutex_lock(&s->mu);
    s->finished = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- public ----------------------------------------------------------------- */

static void make_session_id(char out[17]) {
    uint64_t v = 0;
    while (v == 0)
        if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v)
            v = ss_mono_ns() * 0x9E3779B97F4A7C15ull ^ (uint64_t)ss_process()->pid;
    snprintf(out, 17, "%016" PRIx64, v);
}

static void free_sender(zk_sender *s) {
    ss_http_client_free(s->client);
    zk_session_free(s->session);
    ss_buf_free(&s->agd);
    ss_buf_free(&s->trc);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    ss_round_loss_destroy(&s->lost);
    free(s);
}

zk_sender *zk_sender_start(const zk_sender_config *cfg, ss_exporter_stats *stats) {
    zk_sender *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->cfg = *cfg;
    s->cfg.tls.ca_file = s->cfg.ca_file[0] ? s->cfg.ca_file : NULL;
    s->cfg.tls.cert_file = s->cfg.cert_file[0] ? s->cfg.cert_file : NULL;
    s->cfg.tls.key_file = s->cfg.key_file[0] ? s->cfg.key_file : NULL;
    s->stats = stats;
    snprintf(s->agd_url, sizeof s->agd_url, "%s/agent/submit/agd", cfg->base_url);
    snprintf(s->trc_url, sizeof s->trc_url, "%s/agent/submit/trc", cfg->base_url);
    ss_http_url_for_messages(cfg->base_url, s->shown, sizeof s->shown);
    make_session_id(s->sid);
    ss_buf_init(&s->agd);
    ss_buf_init(&s->trc);
    ss_round_loss_init(&s->lost);
    ss_backend_init(&s->backend);
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = ss_thread_start(&s->thread, "zksnd", sender_main, s);
    if (rc != 0) {
        ss_error("zorka: cannot start the sender thread (%s)", strerror(-rc));
        free_sender(s);
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    while (!s->started)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    if (s->start_rc) {
        ss_error("zorka: cannot create the HTTP client (libcurl unusable or out of memory)");
        pthread_join(s->thread, NULL);
        free_sender(s);
        return NULL;
    }
    return s;
}

void zk_sender_push(zk_sender *s, zk_trace *t) {
    zk_trace *gone = NULL;
    pthread_mutex_lock(&s->mu);
    t->next = NULL;
    if (s->tail)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    s->queued_bytes += t->bytes;
    /* over the bound: the oldest waiting traces go (the newest stays, even
     * when it alone is over: a bound of bytes, not of traces) */
    while (s->queued_bytes > s->cfg.max_queued && s->head != t) {
        zk_trace *old = s->head;
        s->head = old->next;
        s->queued_bytes -= old->bytes;
        old->next = gone;
        gone = old;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (zk_trace *n; gone; gone = n) {
        n = gone->next;
        ++s->overflow;
        if (!atomic_exchange(&s->overflow_told, true))
            ss_warn("zorka: traces waiting for the collector passed %zu bytes; dropping the "
                    "oldest (%" PRIu64 " so far)",
                    s->cfg.max_queued, s->overflow);
        drop(s, gone, false);
    }
}

void zk_sender_stop(zk_sender *s, uint64_t deadline_ns) {
    /* what the collector earned: healthy, up to the deadline (less the time
     * the cancelled call takes to return); never heard from, the unproven
     * budget; refused, failing or stalled, nothing */
    uint64_t began = ss_mono_ns();
    ss_backend_state state = ss_backend_state_at(&s->backend, began);
    uint64_t until =
        ss_backend_exit_until(&s->backend, began, ss_shutdown_send_until(deadline_ns));
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    s->stop_deadline = until;
    pthread_cond_broadcast(&s->cv);
    while (!s->finished && ss_mono_ns() < until)
        wait_until_locked(s, until);
    bool finished = s->finished;
    pthread_mutex_unlock(&s->mu);
    if (!finished)
        ss_http_client_cancel(s->client); /* the call in flight returns now */
    /* the fan-out waits for the exporter until the deadline + 100 ms */
    if (ss_thread_join(s->thread, deadline_ns + 50000000ull) != 0) {
        ss_warn("zorka: the sender did not stop in time; abandoning what it holds");
        return; /* still running: never free what it uses */
    }
    for (zk_trace *t = s->head, *n; t; t = n) { /* none, unless it could not start */
        n = t->next;
        atomic_fetch_add(&s->late, 1);
        drop(s, t, false);
    }
    if (atomic_load(&s->late))
        ss_warn("zorka: %" PRIu64 " records not delivered before the shutdown deadline%s",
                (uint64_t)atomic_load(&s->late),
                ss_backend_exit_why(s->failing ? SS_BACKEND_FAILING : state));
    free_sender(s);
}

const char *zk_sender_session_id(const zk_sender *s) { return s->sid; }
