#include "gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t tensor_len(const gen_spec *s, size_t i) {
    if (s->with_meta && i == 5) return 0;
    if (i % 7 == 6) return s->big_bytes;
    uint64_t x = (i + 1) * 2654435761u;
    return 1 + x % (s->small_max ? s->small_max : 1);
}

uint8_t *gen_expected(const gen_spec *s, size_t i, uint64_t *len, int *meta) {
    *len = tensor_len(s, i);
    *meta = s->with_meta && i == 3;
    uint8_t *b = malloc(*len ? *len : 1);
    uint64_t x = 0x9E3779B97F4A7C15ull ^ (i * 0x100000001B3ull);
    for (uint64_t k = 0; k < *len; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b[k] = *meta ? 0 : (uint8_t)x;
    }
    return b;
}

int gen_write_from(const char *path, size_t count, gen_bytes_fn bytes, void *ctx, const tzr_writer_options *o) {
    tzr_writer *w;
    int rc = tzr_writer_open(&w, path, o);
    if (rc) return rc;
    for (size_t i = 0; i < count && !rc; i++) {
        uint64_t len;
        int meta;
        uint8_t *data = bytes(ctx, i, &len, &meta);
        char name[64];
        snprintf(name, sizeof name, "layers.%zu.weight", i);
        uint64_t shape[1] = {len};
        tzr_tensor_desc d = {name, strlen(name), TZR_PARAM, (uint16_t)(i % 5), NULL, 0, TZR_DTYPE_U8, 1, shape, meta, sizeof(tzr_tensor_desc)};
        rc = tzr_writer_add(w, &d, data);
        free(data);
    }
    if (rc) {
        tzr_writer_abort(w);
        return rc;
    }
    return tzr_writer_close(w);
}

static uint8_t *spec_bytes(void *ctx, size_t i, uint64_t *len, int *meta) { return gen_expected(ctx, i, len, meta); }

int gen_write(const gen_spec *s, const char *path) {
    tzr_writer_options o = TZR_WRITER_OPTIONS_INIT;
    o.crypt.key = s->key;
    if (s->count * 64 > 200000) o.metadata_size = s->count * 64;
    return gen_write_from(path, s->count, spec_bytes, (void *)s, &o);
}
