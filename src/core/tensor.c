#include "cformers/tensor.h"

#include <stdio.h>

char *cf_tensor_shape_str(const cf_tensor *t, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < t->ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ", %lld" : "%lld", (long long)t->shape[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}
