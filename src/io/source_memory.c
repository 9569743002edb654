/* A source over caller-owned memory (tests, fuzzing, embedded blobs). */
#include "internal.h"

#include <string.h>

typedef struct mem_source {
    tzr_source base;
    const uint8_t *data;
    char *name;
} mem_source;

static int mem_read_at(tzr_source *s, void *buf, size_t len, uint64_t off) {
    mem_source *m = (mem_source *)s;
    if (off > s->size || len > s->size - off) {
        return tzr_fail(TZR_ETRUNC, "%s: read of %zu bytes at offset %llu past the end (%llu bytes)",
                        s->name, len, (unsigned long long)off, (unsigned long long)s->size);
    }
    if (len) memcpy(buf, m->data + off, len);
    return 0;
}

static int mem_is_cached(tzr_source *s, uint64_t off, uint64_t len) {
    (void)s; (void)off; (void)len;
    return 1;
}

static void mem_destroy(tzr_source *s) {
    mem_source *m = (mem_source *)s;
    free(m->name);
    free(m);
}

int tzr_source_open_memory(tzr_source **out, const void *data, size_t len, const char *name) {
    *out = NULL;
    if (!data && len) return tzr_fail(TZR_EINVAL, "memory source: NULL data");
    mem_source *m = calloc(1, sizeof *m);
    if (!m) return tzr_fail(TZR_ENOMEM, "out of memory");
    m->name = strdup(name ? name : "<memory>");
    if (!m->name) {
        free(m);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    m->data = data;
    m->base.read_at = mem_read_at;
    m->base.struct_size = sizeof m->base;
    m->base.destroy = mem_destroy;
    m->base.is_cached = mem_is_cached;
    m->base.size = len;
    m->base.name = m->name;
    m->base.ctx = m;
    *out = &m->base;
    return 0;
}

void tzr_source_free(tzr_source *src) {
    TZR_KEEP_ERROR;
    if (src && src->destroy) src->destroy(src);
}
