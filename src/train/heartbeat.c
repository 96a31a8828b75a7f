#include "train/heartbeat.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void cf_heartbeat(int rank, int64_t step) {
    const char *dir = getenv("CFORMERS_HEARTBEAT_DIR");
    if (!dir || !*dir) return;
    char path[4096], line[32];
    snprintf(path, sizeof path, "%s/rank%d", dir, rank);
    int n = snprintf(line, sizeof line, "%" PRId64 "\n", step);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (write(fd, line, (size_t)n) != n) { /* ignored: see the header */
    }
    close(fd);
}
