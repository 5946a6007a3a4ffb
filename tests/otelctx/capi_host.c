/* capi_host.c: a program using the public C API (linked with
 * libstackshot.so). It sets a span on its main thread, prints
 * "ready <pid> <address of its otel_thread_ctx_v1>" and waits for a line
 * on stdin; then clears the span, prints "cleared" and waits for another.
 * With "fork", a child does the same with its own span (printed with the
 * word "child"), and the parent then waits for it. */
#include "include/stackshot.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern __thread void *otel_thread_ctx_v1;

static void wait_line(void) {
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        return;
}

static void run(const char *who, uint8_t first) {
    uint8_t trace[16], span[8];
    for (int i = 0; i < 16; i++)
        trace[i] = (uint8_t)(first + i);
    for (int i = 0; i < 8; i++)
        span[i] = (uint8_t)(0xb0 + first + i);
    stackshot_set_span_context_flags(trace, span, 1);
    printf("%s %d %p\n", who, (int)getpid(), (void *)&otel_thread_ctx_v1);
    fflush(stdout);
    wait_line();
    stackshot_clear_span_context();
    printf("cleared\n");
    fflush(stdout);
    wait_line();
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "fork") == 0) {
        pid_t c = fork();
        if (c == 0) {
            run("child", 0x40);
            return 0;
        }
        int st;
        waitpid(c, &st, 0);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    }
    run("ready", 0x10);
    return 0;
}
