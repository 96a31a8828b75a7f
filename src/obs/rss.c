#include "obs/rss.h"

#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

size_t cf_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024; /* Linux reports kilobytes */
}

size_t cf_current_rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long size_pages, resident_pages;
    int n = fscanf(f, "%lu %lu", &size_pages, &resident_pages);
    fclose(f);
    return n == 2 ? (size_t)resident_pages * (size_t)sysconf(_SC_PAGESIZE) : 0;
}
