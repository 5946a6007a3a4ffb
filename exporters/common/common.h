/*
 * common.h: the small pieces several exporters share (exporters/common/).
 *
 *   - the thread-dump text of one thread (the body format of the Splunk
 *     call-stack logs), written by the text exporter and by otlp_logs;
 *   - safe creation of local output files (text, pprof, flame graphs);
 *   - gzip (pprof files, pprof log bodies);
 *   - modules: the libraries only some exporters need (gRPC, libcurl...)
 *     live in libstackshot-<name>.so next to the core, opened on first use.
 *
 * The other shared pieces have a header each: pb.h (protobuf writer),
 * aggregate.h (a period's samples in interned tables) and pprof.h (pprof
 * encoding). Nothing in this folder includes an exporter's folder.
 */
#ifndef SS_EXPORTERS_COMMON_H
#define SS_EXPORTERS_COMMON_H

#include "agent/kept_fd.h"
#include "agent/buf.h"
#include "agent/round.h"
#include "agent/stack_memo.h"

/* Append the thread-dump block of one thread: the metadata line, the state
 * line, one "\tat ..." line per frame, each ending in "\n" (no blank line
 * after). Returns 0 or -ENOMEM. */
int ss_text_format_thread(const ss_round *r, const ss_thread_sample *t, ss_buf *out);

/* The two parts of ss_text_format_thread: the metadata and state lines
 * (CPU time, state: they change while a thread sleeps in one place), and
 * the frame lines, a function of the frames alone (ss_thread_sample.
 * stack_id): exporters keep the latter for a stack that did not change. */
int ss_text_format_thread_head(const ss_round *r, const ss_thread_sample *t, ss_buf *out);
int ss_text_format_thread_frames(const ss_round *r, const ss_thread_sample *t, ss_buf *out);

/* The same, with the metadata line as jstack prints it on JDK 21 and
 * later: the os thread id after the number ("#<id> [<nid>] "), and nid
 * in decimal. */
int ss_text_format_thread_jdk21(const ss_round *r, const ss_thread_sample *t, ss_buf *out);

/* Append the round header line of the text file:
 * "Full thread dump stackshot round <seq> at <ISO-8601 UTC> (pid <pid>, <n> threads)\n" */
/* The frame lines of t from memo (a stack unchanged since the last round)
 * or formatted, fixed by fix (may be NULL) and kept in memo. */
typedef size_t (*ss_text_fix_fn)(char *s, size_t n);
void ss_text_format_frames_memo(const ss_round *r, const ss_thread_sample *t,
                                ss_stack_memo *memo, ss_text_fix_fn fix, ss_buf *out);
int ss_text_format_round_header(const ss_round *r, ss_buf *out);

/* Create the output directory (mode 0700) if needed and open `name` in it
 * for appending (or truncating), mode 0600, refusing symlinks. `dir` is a
 * template (STACKSHOT_OUTPUT_DIR): %u the effective uid now, %p the pid,
 * %% a percent sign. Returns an fd or a negative errno (after one error
 * line naming the path). */
int ss_output_open(const char *dir, const char *name, bool append);
/* The directory a template names now. 0 or -ENAMETOOLONG. */
int ss_output_dir_expand(const char *tmpl, char *out, size_t n);
/* "<program name>.<pid>": how local files of this process begin. */
void ss_output_file_stem(char *out, size_t n);

/* How many writes ss_output_open refused (symlink at the directory or the
 * name, not ours, not a regular file, cannot create) since start. */
uint64_t ss_output_refused(void);

/* Write all of buf to fd, retrying short writes. 0 or -errno. */
int ss_write_all(int fd, const void *buf, size_t len);

/* A local file the agent writes through a descriptor it keeps (the text
 * exporter's file across rounds, a profile file while it is written).
 * The host may close every descriptor >= 3 at any moment and get the
 * number back for a file of its own: before every write of at most
 * SS_OUTPUT_CHUNK bytes the descriptor is checked (ss_kept_fd: fstat
 * identity); when the number is no longer ours it is forgotten, never
 * written nor closed, and the agent's own file is opened again (same
 * path, same checks as ss_output_open, appending) to go on with the rest.
 * Not thread-safe: one writer per file. */
#define SS_OUTPUT_CHUNK 32768
typedef struct ss_output_file {
    ss_kept_fd kept;
    char dir[1024];  /* the STACKSHOT_OUTPUT_DIR template */
    char name[400];
    bool append;     /* the first open: append (else truncate) */
    bool opened;     /* opened once: a reopen appends */
    uint64_t reopens; /* times the host took the descriptor over */
    /* Rotation (ss_output_file_limit): before a write that would take the
     * file past max_bytes, name becomes name.1 (name.1 name.2, ... up to
     * name.<keep>, the oldest removed) and a new file is started; a write
     * is never split between two files. 0: no limit. */
    uint64_t max_bytes;
    uint32_t keep;
    uint64_t size;      /* bytes in the current file */
    uint64_t rotations;
    bool rotate_told;
} ss_output_file;

void ss_output_file_init(ss_output_file *f, const char *dir, const char *name, bool append);
/* Rotate at max_bytes, keeping `keep` older files (see above). */
void ss_output_file_limit(ss_output_file *f, uint64_t max_bytes, uint32_t keep);
/* STACKSHOT_OUTPUT_MAX_BYTES and STACKSHOT_OUTPUT_KEEP (read once). */
uint64_t ss_output_max_bytes(void);
uint32_t ss_output_keep(void);
/* Write all of buf (opening the file at the first call, again when the
 * host took the descriptor over). 0 or -errno: then the write failed and
 * an unknown part of buf reached the file. */
int ss_output_file_write(ss_output_file *f, const void *buf, size_t len);
/* Close it if the descriptor is still ours; forget it either way. */
void ss_output_file_close(ss_output_file *f);
/* Descriptors of local output files found taken over by the host and
 * opened again, since start. */
uint64_t ss_output_reopened(void);

/* Retention, once per process and output directory, at its first file:
 * files of this agent's naming (<program>.<pid>.txt[.N],
 * <program>.<pid>.<seq>.pb.gz|.collapsed|.html) whose pid is not alive
 * go when older than STACKSHOT_OUTPUT_MAX_AGE seconds, and, oldest first,
 * while the directory's files of that naming pass STACKSHOT_OUTPUT_MAX_TOTAL
 * bytes. Only regular files of this user with one link. Returns the
 * number removed (tests). */
int ss_output_retention(int dfd, const char *dir);

/* Append the gzip (RFC 1952) compression of in[0..n) to out. 0 or -ENOMEM
 * / -EIO. */
int ss_gzip(const void *in, size_t n, ss_buf *out);

/* The API table of module <name> (libstackshot-<name>.so next to the core,
 * whose ss_module_<name>_entry returns it), opening the module on first
 * use; NULL when it cannot be opened: then one error line, once per module,
 * names `user` (who is off without it: "otlp_logs") and the loader's
 * reason. A program linked with the static core (tests, benchmarks) has
 * every module linked in. Thread-safe; modules are never closed. The
 * caller checks the table's version (its first field is its size). */
const void *ss_module_api(const char *name, const char *user);

/* ss_module_api's two backends, one per build of the core:
 * module_dl.c (libstackshot-core.so: dlopen next to the core) and the
 * generated modules_linked.c (the static core). NULL and *why on failure. */
const void *ss_module_open(const char *name, char *why, size_t why_len);
/* The path of the module's helper program, stackshot-<name>-helper next to
 * the core (exporters/otlp/grpc_helper.c), into out: 0 when it is there
 * and executable, else -errno (the static core has none: -ENOENT). */
int ss_module_helper_path(const char *name, char *out, size_t n);

#endif /* SS_EXPORTERS_COMMON_H */
