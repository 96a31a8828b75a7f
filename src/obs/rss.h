/* Resident memory of this process, for the memory report of a training run. */
#ifndef CFORMERS_OBS_RSS_H
#define CFORMERS_OBS_RSS_H

#include <stddef.h>

/* Highest resident set size so far (getrusage), in bytes. */
size_t cf_peak_rss_bytes(void);
/* Resident set size now (/proc/self/statm), in bytes; 0 where /proc is unavailable. */
size_t cf_current_rss_bytes(void);

#endif
