/* Open MPI hostfiles, as `cformers launch --hostfile` reads them: one host a line,
 * `NAME [slots=S] [other words]`, # starts a comment, blank lines are skipped. */
#ifndef CFORMERS_DIST_HOSTFILE_H
#define CFORMERS_DIST_HOSTFILE_H

#include <stddef.h>

#include "cformers/error.h"

enum { CF_HOSTFILE_MAX_HOSTS = 4096 };

/* One line of a hostfile: the host, its slots, and the line as written (comment cut). */
typedef struct cf_host_entry {
    char *name, *line;
    long slots;
} cf_host_entry;

/* Parses `size` bytes of hostfile text (`path` names it in errors) into hosts[] (room for
 * CF_HOSTFILE_MAX_HOSTS): per host its slots= (in 1..max_slots), or `cores` where the line
 * has none. A line ends at '\n' (or a NUL byte, as a C string would). Returns the host
 * count (cf_hostfile_free them), or -1 with err: no hosts, too many, a bad slots= value. */
int cf_hostfile_parse(const char *text, size_t size, const char *path, long cores, long max_slots, cf_host_entry *hosts,
                      cf_error *err);
/* The same, from the file at `path` (-1 with err when it cannot be read). */
int cf_hostfile_read(const char *path, long cores, long max_slots, cf_host_entry *hosts, cf_error *err);
void cf_hostfile_free(cf_host_entry *hosts, int n);

#endif
