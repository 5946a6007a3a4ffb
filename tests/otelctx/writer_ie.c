/* writer_ie.c: writer.c with the initial-exec model, linked into the test
 * executable itself. */
#define WRITER_IE 1
#include "tests/otelctx/writer.c"
