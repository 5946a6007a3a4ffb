/*
 * agent/dir.h: a directory listed without opendir (agent/dir.c).
 */
#ifndef SS_AGENT_DIR_H
#define SS_AGENT_DIR_H

/* Call fn with each name in the directory path (relative to dirfd), "."
 * and ".." left out, without opendir (which allocates on the calling
 * thread: agent/dir.c). fn returns 0 to go on, anything else to stop.
 * 0, or -errno when the directory cannot be read. */
int ss_dir_each(int dirfd, const char *path, int (*fn)(const char *name, void *arg), void *arg);

#endif /* SS_AGENT_DIR_H */
