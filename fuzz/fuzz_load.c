/* libFuzzer target for the pipelined loader: open an arbitrary byte string
 * and load it with tzr_load, into the host sink reading in place and into
 * the null sink, verifying, from a source whose reads are requests
 * (pack_reads, as HTTP/S3): coalesced and packed units, compressed units
 * with their headers, the frame directory and phase 1 all run on hostile
 * input. Bad input must give an error with a message, never a crash, a
 * hang or a huge allocation. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tzr.h"
#include "tzr_load.h"

#define MAX_TOTAL ((uint64_t)64 << 20) /* cap on the tensor bytes one input may ask for */

typedef struct costly {
    tzr_source base;
    tzr_source *inner;
} costly;

static int costly_read(tzr_source *s, void *buf, size_t len, uint64_t off) {
    costly *c = (costly *)s;
    return c->inner->read_at(c->inner, buf, len, off);
}

static void costly_destroy(tzr_source *s) {
    costly *c = (costly *)s;
    tzr_source_free(c->inner);
    free(c);
}

static void load(const uint8_t *data, size_t size, int remote) {
    tzr_source *src = NULL;
    if (tzr_source_open_memory(&src, data, size, "fuzz") != 0) return;
    if (remote) {
        costly *c = calloc(1, sizeof *c);
        if (!c) {
            tzr_source_free(src);
            return;
        }
        c->inner = src;
        c->base = *src;
        c->base.read_at = costly_read;
        c->base.readv_at = NULL;
        c->base.destroy = costly_destroy;
        c->base.pack_reads = 1;
        c->base.ctx = c;
        src = &c->base;
    }
    tzr_reader *r = NULL;
    int rc = tzr_reader_open_source(&r, src, NULL);
    if (rc) {
        if (tzr_last_error()[0] == 0 || tzr_last_error_code() != rc) abort();
        return;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < tzr_reader_count(r); i++) {
        uint64_t nb = tzr_reader_tensor(r, i)->nbytes;
        total = nb > MAX_TOTAL - total ? MAX_TOTAL + 1 : total + nb;
        if (total > MAX_TOTAL) break;
    }
    if (total <= MAX_TOTAL) {
        tzr_sink *sink = NULL;
        if (remote ? tzr_sink_null_new(&sink) : tzr_sink_host_new(&sink, NULL, NULL)) abort();
        tzr_load_options lo = TZR_LOAD_OPTIONS_INIT;
        lo.threads = 2;
        lo.chunk_bytes = 8192;
        lo.ring_bytes = 1 << 20;
        lo.verify = remote;
        rc = tzr_load(r, sink, &lo, NULL);
        if (rc && (tzr_last_error()[0] == 0 || tzr_last_error_code() != rc)) abort();
        tzr_sink_free(sink);
    }
    tzr_reader_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load(data, size, 0);
    load(data, size, 1);
    return 0;
}
