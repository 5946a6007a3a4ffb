/*
 * ss_exporters.h: what exporters/ offers the rest of the agent.
 *
 *   - the registry of exporters (ss_exporter_find, declared in ss_agent.h);
 *   - the thread-dump text of one thread (the body format of the Splunk
 *     call-stack logs), shared by the text file and the OTLP logs exporter;
 *   - safe creation of local output files.
 */
#ifndef SS_EXPORTERS_H
#define SS_EXPORTERS_H

#include "../agent/ss_agent.h"

/* Append the thread-dump block of one thread: the metadata line, the state
 * line, one "\tat ..." line per frame, each ending in "\n" (no blank line
 * after). Returns 0 or -ENOMEM. */
int ss_text_format_thread(const ss_round *r, const ss_thread_sample *t, ss_buf *out);

/* Append the round header line of the text file:
 * "Full thread dump stackshot round <seq> at <ISO-8601 UTC> (pid <pid>, <n> threads)\n" */
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

#endif /* SS_EXPORTERS_H */
