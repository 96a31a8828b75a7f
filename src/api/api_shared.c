/* The shared library's own translation unit: libcformers.so is the whole engine archive
 * (linked whole, so every cf_api_* entry point and what it needs is in it). */
#include "cformers/api.h"

int cf_api_shared_library(void);
int cf_api_shared_library(void) { return CF_API_VERSION; }
