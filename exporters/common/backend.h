/*
 * backend.h: what a network exporter knows of its backend from its last
 * calls, and what that earns the backend at the host's exit. Shared by the
 * OTLP sender, the Zorka sender and the Qubership client, so every network
 * exporter keeps the same promise: a host's exit is never held by a
 * backend that is down or silent.
 *
 *   unknown  no call has ended yet (a short-lived process's first call);
 *   healthy  the last call succeeded;
 *   refused  the last call could not connect (nobody listens there);
 *   failing  the last call failed otherwise (an error answer, a reset,
 *            bytes that are not the protocol);
 *   stalled  the last call timed out, or the call in flight has gone the
 *            unproven budget without an answer.
 *
 * At exit (ss_backend_exit_until): a healthy backend gets up to the
 * shutdown deadline (STACKSHOT_SHUTDOWN_TIMEOUT, the ceiling); one never
 * heard from gets STACKSHOT_SHUTDOWN_UNPROVEN (500 ms) from its call's
 * start, or from now when none is in flight; a refused, failing or stalled
 * one gets nothing, and what it holds is dropped and counted at once.
 *
 * A call's start and end are recorded by the thread making it; the state
 * is read by any (the exit runs on another thread for Zorka): atomics.
 */
#ifndef SS_BACKEND_H
#define SS_BACKEND_H


typedef enum ss_backend_state {
    SS_BACKEND_UNKNOWN = 0,
    SS_BACKEND_HEALTHY,
    SS_BACKEND_REFUSED,
    SS_BACKEND_FAILING,
    SS_BACKEND_STALLED,
} ss_backend_state;

typedef struct ss_backend {
    _Atomic int last;              /* ss_backend_state the last ended call left */
    _Atomic uint64_t call_since;   /* monotonic start of the call in flight; 0: none */
    uint64_t unproven_ns;          /* STACKSHOT_SHUTDOWN_UNPROVEN */
} ss_backend;

/* Unknown, no call in flight; reads STACKSHOT_SHUTDOWN_UNPROVEN. */
void ss_backend_init(ss_backend *b);

/* A call (a connection, a request) starts / ended in state st. */
void ss_backend_call_start(ss_backend *b);
void ss_backend_call_end(ss_backend *b, ss_backend_state st);

/* The state a call's -errno result leaves (0: healthy; a refused or
 * unreachable connection: refused; a timeout: stalled; else failing). */
ss_backend_state ss_backend_state_of_rc(int rc);

/* The state at `now` (monotonic): the last call's, or stalled when the
 * call in flight has gone the unproven budget without an answer. */
ss_backend_state ss_backend_state_at(const ss_backend *b, uint64_t now);

/* Until when (monotonic) an exit that began at `now` with the shutdown
 * deadline deadline_ns may still send to it, as the backend was then:
 * deadline_ns when healthy, the unproven budget from its call's start (or
 * from `now`) when unknown, `now` (nothing) otherwise. The same answer
 * whenever it is asked during that exit. */
uint64_t ss_backend_exit_until(const ss_backend *b, uint64_t now, uint64_t deadline_ns);

/* A wait's deadline bounded by the exit: deadline_ns while the exporters
 * run; once their stop has begun (ss_exporters_exit_deadline), no later
 * than what the exit gives this backend (its state when the exit began).
 * For waits that cannot otherwise hear of the exit (the Qubership
 * client's, on the exporter thread, which the exit waits for). */
uint64_t ss_backend_bound(const ss_backend *b, uint64_t deadline_ns);

/* Words for lines: "healthy", "never heard from", "refusing connections",
 * "failing", "not answering". */
const char *ss_backend_describe(ss_backend_state st);

/* What an exit's drop line adds: " (the backend was failing)" (refused or
 * failing), " (the backend did not answer)" (stalled), " (the backend did
 * not answer in time)" (never heard from), "" (healthy: the deadline). */
const char *ss_backend_exit_why(ss_backend_state st);

#endif /* SS_BACKEND_H */
