/* process_ctx.c: the payload of the OpenTelemetry process context (OTEP
 * 4719) the agent publishes (agent/otel_proc.c publishes it; this file
 * only encodes it, from the same resource every OTLP export carries).
 *
 * ProcessContext (opentelemetry.proto.profiles.v1development, as the
 * OTEP's reference implementation and OTEP 4947 use it):
 *   1 resource          Resource{attributes=1}: ss_otlp_resource_build
 *   2 extra_attributes  KeyValue: threadlocal.schema_version
 *                       "tlsdesc_v1_dev" and threadlocal.attribute_key_map
 *                       (an array of strings: the agent's own writer puts
 *                       no attributes in its records, so the list is
 *                       empty), which OTEP 4947 keeps here. */
#include "agent/buf.h"
#include "agent/span.h"
#include "exporters/otlp/otlp.h"
#include "exporters/common/pb.h"

#include <errno.h>

enum {
    PC_RESOURCE = 1,
    PC_EXTRA = 2,
    KV_KEY = 1,
    KV_VALUE = 2,
    AV_ARRAY = 5,
};

int ss_otel_proc_payload(ss_buf *b) {
    ss_otlp_resource r;
    int rc = ss_otlp_resource_build(&r);
    if (rc != 0)
        return rc;
    ss_otlp_put_resource(b, PC_RESOURCE, &r);
    ss_otlp_resource_free(&r);
    static const char schema[] = "tlsdesc_v1_dev";
    ss_otlp_put_kv_str(b, PC_EXTRA, "threadlocal.schema_version", schema, sizeof schema - 1);
    size_t kv = pb_begin(b, PC_EXTRA);
    pb_string(b, KV_KEY, "threadlocal.attribute_key_map");
    size_t any = pb_begin(b, KV_VALUE);
    size_t arr = pb_begin(b, AV_ARRAY); /* ArrayValue{values=1}: none */
    pb_end(b, arr);
    pb_end(b, any);
    pb_end(b, kv);
    return b->failed ? -ENOMEM : 0;
}
