/* `cformers launch --hostfile`: the Open MPI hostfile parser (dist/hostfile.c), on the
 * input as the file's text. Every host it returns has a name without blanks, slots in
 * 1..max (the default where the line has none) and its line without comment or CR. */
#include <stdlib.h>
#include <string.h>

#include "dist/hostfile.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static cf_host_entry hosts[CF_HOSTFILE_MAX_HOSTS];
    enum { CORES = 3, MAX_SLOTS = 1 << 20 };
    cf_error *err = fuzz_err();
    int n = cf_hostfile_parse((const char *)data, size, "fuzz.hosts", CORES, MAX_SLOTS, hosts, err);
    if (fuzz_failed(n < 0, err, "cf_hostfile_parse")) return 0;
    if (n < 1 || n > CF_HOSTFILE_MAX_HOSTS) abort();
    for (int i = 0; i < n; i++) {
        const cf_host_entry *h = &hosts[i];
        if (!h->name[0] || strpbrk(h->name, " \t#\r\n") || h->slots < 1 || h->slots > MAX_SLOTS ||
            strpbrk(h->line, "#\r\n") || !strstr(h->line, h->name))
            abort(); /* a finding: a host mpirun would read differently */
    }
    cf_hostfile_free(hosts, n);
    return 0;
}
