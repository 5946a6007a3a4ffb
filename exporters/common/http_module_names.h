/* http_module_names.h: included first (-include) when http_client.c is
 * compiled into the HTTP module (libstackshot-http.so). The module's
 * client functions take other names than the core's forwarding functions
 * of the same API (http.c), so that both can be linked into one program:
 * the static core of the tests has every module linked in. */
#define ss_http_client_new ss_httpm_client_new
#define ss_http_client_free ss_httpm_client_free
#define ss_http_perform ss_httpm_perform
#define ss_http_client_cancel ss_httpm_client_cancel
#define ss_http_client_uncancel ss_httpm_client_uncancel
