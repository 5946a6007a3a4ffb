/* backend.c: a network backend's state from its last calls (backend.h). */
#include "agent/config.h"
#include "agent/exporter.h"
#include "agent/time.h"
#include "exporters/common/backend.h"

#include <errno.h>

void ss_backend_init(ss_backend *b) {
    atomic_store(&b->last, SS_BACKEND_UNKNOWN);
    atomic_store(&b->call_since, 0);
    b->unproven_ns =
        (uint64_t)ss_config_int("STACKSHOT_SHUTDOWN_UNPROVEN", 500, 0, 60000) * 1000000ull;
}

void ss_backend_call_start(ss_backend *b) {
    uint64_t now = ss_mono_ns();
    atomic_store(&b->call_since, now ? now : 1);
}

void ss_backend_call_end(ss_backend *b, ss_backend_state st) {
    atomic_store(&b->last, (int)st);
    atomic_store(&b->call_since, 0);
}

ss_backend_state ss_backend_state_of_rc(int rc) {
    switch (rc) {
    case 0:
        return SS_BACKEND_HEALTHY;
    case -ECONNREFUSED:
    case -EHOSTUNREACH:
    case -ENETUNREACH:
    case -EADDRNOTAVAIL:
    case -EHOSTDOWN:
        return SS_BACKEND_REFUSED;
    case -ETIMEDOUT:
        return SS_BACKEND_STALLED;
    default:
        return SS_BACKEND_FAILING;
    }
}

ss_backend_state ss_backend_state_at(const ss_backend *b, uint64_t now) {
    uint64_t since = atomic_load(&b->call_since);
    if (since && now > since && now - since >= b->unproven_ns)
        return SS_BACKEND_STALLED;
    return (ss_backend_state)atomic_load(&b->last);
}

/* Judged as the exit found it (`now`: when it began): a healthy backend
 * whose call in flight had gone silent past the unproven budget then is
 * stalled (a collector that stops answering mid-run must not hold the exit
 * for the whole shutdown timeout); one that was healthy keeps its deadline
 * even when a call of the exit is slow (a loaded collector is not down). */
uint64_t ss_backend_exit_until(const ss_backend *b, uint64_t now, uint64_t deadline_ns) {
    switch (ss_backend_state_at(b, now)) {
    case SS_BACKEND_HEALTHY:
        return deadline_ns;
    case SS_BACKEND_UNKNOWN: {
        uint64_t since = atomic_load(&b->call_since);
        uint64_t until = (since ? since : now) + b->unproven_ns;
        return until < deadline_ns ? until : deadline_ns;
    }
    default:
        return now < deadline_ns ? now : deadline_ns;
    }
}

uint64_t ss_backend_bound(const ss_backend *b, uint64_t deadline_ns) {
    uint64_t began;
    uint64_t exit = ss_exporters_exit_deadline(&began);
    if (!exit)
        return deadline_ns;
    uint64_t until = ss_backend_exit_until(b, began, ss_shutdown_send_until(exit));
    return until < deadline_ns ? until : deadline_ns;
}

const char *ss_backend_describe(ss_backend_state st) {
    switch (st) {
    case SS_BACKEND_HEALTHY:
        return "healthy";
    case SS_BACKEND_REFUSED:
        return "refusing connections";
    case SS_BACKEND_FAILING:
        return "failing";
    case SS_BACKEND_STALLED:
        return "not answering";
    default:
        return "never heard from";
    }
}

const char *ss_backend_exit_why(ss_backend_state st) {
    switch (st) {
    case SS_BACKEND_HEALTHY:
        return "";
    case SS_BACKEND_REFUSED:
    case SS_BACKEND_FAILING:
        return " (the backend was failing)";
    case SS_BACKEND_STALLED:
        return " (the backend did not answer)";
    default:
        return " (the backend did not answer in time)";
    }
}
