/* suspend.c: the pause detector of the suspend stream (spec §4.3).
 *
 * Like the Java agent's timer thread, a thread sleeps a short tick and
 * measures how late it wakes up. A wake-up later than the threshold means
 * the whole process (or the machine) was paused: a GC safepoint in a JVM,
 * a stop signal, a starved VM. The pause ends when the thread wakes; its
 * length is the lateness. Adjacent pauses merge, as the agent merges them.
 * Pauses wait in a fixed ring until the exporter takes them; when the
 * ring is full the oldest is lost and counted. */
#include "agent/thread.h"
#include "agent/time.h"
#include "exporters/qubership/qb.h"

#include <stdlib.h>
#include <string.h>

#define RING 1024

struct qb_suspend {
    pthread_t thread;
    pthread_mutex_t mu;
    _Atomic bool stop;
    uint32_t threshold_ms, tick_ms;
    qb_pause ring[RING];
    size_t head, count;
    uint64_t lost;
};

static void push(qb_suspend *s, int64_t end_ms, uint32_t dur) {
    pthread_mutex_lock(&s->mu);
    if (s->count) {
        qb_pause *last = &s->ring[(s->head + s->count - 1) % RING];
        /* this pause began where (or before) the previous one ended */
        if (end_ms - (int64_t)dur <= last->end_ms + 1) {
            int64_t start = last->end_ms - last->duration_ms;
            last->end_ms = end_ms;
            last->duration_ms = (uint32_t)(end_ms - start);
            pthread_mutex_unlock(&s->mu);
            return;
        }
    }
    if (s->count == RING) {
        s->head = (s->head + 1) % RING;
        s->count--;
        s->lost++;
    }
    s->ring[(s->head + s->count++) % RING] = (qb_pause){end_ms, dur};
    pthread_mutex_unlock(&s->mu);
}

static void *suspend_main(void *arg) {
    qb_suspend *s = arg;
    uint64_t tick_ns = (uint64_t)s->tick_ms * 1000000u;
    while (!atomic_load(&s->stop)) {
        uint64_t before = ss_mono_ns();
        ss_sleep_ns(tick_ns);
        uint64_t late_ns = ss_mono_ns() - before;
        late_ns = late_ns > tick_ns ? late_ns - tick_ns : 0;
        uint32_t late_ms = (uint32_t)(late_ns / 1000000u);
        if (late_ms > s->threshold_ms)
            push(s, (int64_t)(ss_wall_ns() / 1000000u), late_ms);
    }
    return NULL;
}

qb_suspend *qb_suspend_start(uint32_t threshold_ms, uint32_t tick_ms) {
    qb_suspend *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->mu, NULL);
    s->threshold_ms = threshold_ms;
    s->tick_ms = tick_ms ? tick_ms : 1;
    if (ss_thread_start(&s->thread, "qsusp", suspend_main, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return NULL;
    }
    return s;
}

size_t qb_suspend_take(qb_suspend *s, qb_pause *out, size_t max, uint64_t *lost) {
    pthread_mutex_lock(&s->mu);
    size_t n = 0;
    /* the newest pause stays while the next one may still merge with it */
    int64_t now_ms = (int64_t)(ss_wall_ns() / 1000000u);
    while (n < max && (s->count > 1 ||
                       (s->count == 1 && now_ms - s->ring[s->head].end_ms > 100))) {
        out[n++] = s->ring[s->head];
        s->head = (s->head + 1) % RING;
        s->count--;
    }
    *lost = s->lost;
    s->lost = 0;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void qb_suspend_stop(qb_suspend *s) {
    if (!s)
        return;
    atomic_store(&s->stop, true);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
