/*
 * stackshot.h: the `stackshot` command's pieces.
 *
 *   main.c      subcommand dispatch, --help, --version
 *   settings.c  the options run and attach share, mapped to the agent's
 *               documented keys; where libstackshot.so is
 *   run.c       stackshot run: exec a program with the agent
 *   attach.c    stackshot attach and stop: HotSpot's dynamic attach protocol
 *
 * Exit status of the command itself: 0 done, 1 failed (a message says
 * why), 2 bad usage (one line); `run` returns the program's status.
 */
#ifndef SS_CMD_H
#define SS_CMD_H

#include <stdbool.h>
#include <stddef.h>

#define SS_CMD_MAX_KEYS 64

/* What the options asked for: KEY=value pairs in the order given (a later
 * one for the same key wins, as it does in the agent), and the command's
 * own settings. */
typedef struct {
    const char *key[SS_CMD_MAX_KEYS];
    const char *value[SS_CMD_MAX_KEYS];
    int n;
    const char *lib;      /* --lib, or NULL: found next to the command */
    char duration[24];     /* -d in ms, the value of STACKSHOT_DURATION */
    long long timeout_ms;  /* attach -t */
} ss_cmd_settings;

/* Parse the options shared by run and attach from argv[*i] on; stops at
 * "--" (skipped) or the first argument that is not an option. Returns 0,
 * 2 after a usage line, or 3 for --help (the caller prints its help).
 * `extra` names options only this subcommand takes ("t" timeout). */
int ss_cmd_parse(int argc, char **argv, int *i, ss_cmd_settings *s, const char *extra,
                 const char *sub);

/* Set KEY=value (replacing an earlier value of KEY). 0, or -1 when full. */
int ss_cmd_set(ss_cmd_settings *s, const char *key, const char *value);

/* The absolute path of libstackshot.so into `out`: --lib, else
 * $STACKSHOT_LIB, else next to this command (../<libdir>/, ../lib/, and
 * the build tree). 0, or -1 with a message printed. */
int ss_cmd_find_lib(const ss_cmd_settings *s, char *out, size_t n);

/* "30", "30s", "500ms", "2m", "1h" -> milliseconds; -1 if malformed. */
long long ss_cmd_parse_duration(const char *s);

int ss_cmd_run(int argc, char **argv);
int ss_cmd_attach(int argc, char **argv);
int ss_cmd_stop(int argc, char **argv); /* attach.c: the same protocol */
int ss_dump_main(int argc, char **argv); /* tools/stackshot-dump/dump_main.c */

#endif
