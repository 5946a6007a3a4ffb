/* http_redact.h: private to the HTTP client (exporters/common/http_*.c). */
#ifndef SS_HTTP_REDACT_H
#define SS_HTTP_REDACT_H

#include "exporters/common/http_client.h"

/* Replace in msg (a NUL-terminated string in a buffer of cap bytes) every
 * piece of the URL's userinfo, its query and fragment, and every header
 * value of 4 characters or more, by "***". */
void ss_http_scrub(char *msg, size_t cap, const char *url, const char *const *headers);

#endif
