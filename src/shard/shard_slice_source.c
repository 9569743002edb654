/* A source presenting one slice of a row-major tensor, cut along a
 * dimension other than the first, as contiguous bytes: the slice is
 * `outer` runs of `run` bytes, one every `stride` bytes of the tensor.
 * The shard writers stream such slices straight from the input with
 * tzr_writer_add_from; reads come from worker threads at once, so the
 * source keeps no state but its geometry. */
#include "shard_internal.h"

#include <stdio.h>
#include <string.h>

typedef struct slice_view {
    tzr_source *base;
    uint64_t first; /* input offset of the first run */
    uint64_t run, stride;
    char name[4200];
} slice_view;

/* Short runs packed densely (other shards' runs between them no longer
 * than four of ours) are gathered from one read of the span holding them,
 * at most GATHER_SPAN, rather than read one syscall each. */
#define GATHER_RUN ((uint64_t)64 << 10)
#define GATHER_SPAN ((uint64_t)16 << 20)

static int view_read(tzr_source *src, void *buf, size_t len, uint64_t off) {
    slice_view *v = src->ctx;
    uint8_t *dst = buf;
    if (off > src->size || len > src->size - off)
        return tzr_fail(TZR_ETRUNC, "%s: read [%llu, +%zu) past the slice's %llu bytes", src->name,
                        (unsigned long long)off, len, (unsigned long long)src->size);
    int gather = v->run < GATHER_RUN && v->stride <= 4 * v->run;
    int rc = 0;
    while (len && !rc) {
        uint64_t row = off / v->run, in_row = off % v->run;
        uint64_t at = v->first + row * v->stride + in_row;
        uint64_t first_take = v->run - in_row < len ? v->run - in_row : len;
        uint64_t rest = len - first_take, more = (rest + v->run - 1) / v->run; /* rows after this one */
        uint64_t fit = (GATHER_SPAN - v->run + in_row) / v->stride;
        uint64_t m = gather ? (more < fit ? more : fit) : 0;
        if (m == 0) {
            rc = v->base->read_at(v->base, dst, (size_t)first_take, at);
            dst += first_take, off += first_take, len -= first_take;
            continue;
        }
        uint64_t last_take = m == more ? rest - (m - 1) * v->run : v->run;
        uint64_t span_len = m * v->stride - in_row + last_take;
        uint8_t *span = malloc((size_t)span_len);
        if (!span) return tzr_fail(TZR_ENOMEM, "out of memory");
        rc = v->base->read_at(v->base, span, (size_t)span_len, at);
        for (uint64_t r = 0; r <= m && !rc; r++) {
            uint64_t from = r ? r * v->stride - in_row : 0, n = r == 0 ? first_take : r == m ? last_take : v->run;
            memcpy(dst, span + from, (size_t)n);
            dst += n, off += n, len -= n;
        }
        free(span);
    }
    return rc;
}

static void view_destroy(tzr_source *src) {
    free(src->ctx);
    free(src);
}

int shard_slice_source_open(tzr_source **out, tzr_source *base, uint64_t first, uint64_t outer, uint64_t run,
                            uint64_t stride) {
    *out = NULL;
    tzr_source *s = calloc(1, sizeof *s);
    slice_view *v = calloc(1, sizeof *v);
    if (!s || !v) {
        free(s), free(v);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    v->base = base, v->first = first, v->run = run, v->stride = stride;
    snprintf(v->name, sizeof v->name, "%s", base->name);
    s->ctx = v;
    s->name = v->name;
    s->size = outer * run;
    s->read_at = view_read;
    s->struct_size = sizeof *s;
    s->destroy = view_destroy;
    *out = s;
    return 0;
}
