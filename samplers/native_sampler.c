/* placeholder until the native sampler lands */
#include "ss_samplers.h"
#include <errno.h>
static int start(const ss_config *c) { (void)c; return -ENOSYS; }
static void stop(uint64_t d) { (void)d; }
const ss_source_ops ss_native_source = {.name = "native", .start = start, .stop = stop};
