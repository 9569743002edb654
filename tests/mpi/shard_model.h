/* A small model checkpoint for the shard tests (tests/test_shard.c and the
 * MPI program tests/mpi/mpi_load.c): 2-D tensors split on dim 0 and dim 1,
 * 1-D, replicated, 0-d, bf16, a structured name, an uneven split with
 * empty parts. Expected bytes of any slice come from the generator by
 * per-element index arithmetic, independently of the library. */
#ifndef TZR_SHARD_MODEL_H
#define TZR_SHARD_MODEL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tzr.h"

typedef struct sm_tensor {
    const char *name;
    size_t name_len;
    tzr_dtype dtype;
    uint32_t ndim;
    uint64_t shape[3];
    int dim; /* split dim after tzr_shard_split with SM_RULES (-1 replicated) */
} sm_tensor;

#define SM_S(s) s, sizeof(s) - 1
static const sm_tensor SM[] = {
    {SM_S("model.embed.weight"), TZR_DTYPE_F32, 2, {24, 10}, 1},
    {SM_S("layers.0.attn.weight"), TZR_DTYPE_F32, 2, {16, 12}, 0},
    {SM_S("layers.0.mlp.weight"), TZR_DTYPE_BF16, 2, {40, 6}, 0},
    {SM_S("layers.0.bias"), TZR_DTYPE_F32, 1, {37}, 0},
    {SM_S("layers.0.norm.weight"), TZR_DTYPE_F32, 1, {12}, -1},
    {SM_S("scale"), TZR_DTYPE_F64, 0, {0}, -1},
    {SM_S("big.weight"), TZR_DTYPE_U8, 2, {2048, 1024}, 0}, /* default rule: >= 1 MiB, 2048 % 8 == 0 */
    {SM_S("small.odd"), TZR_DTYPE_I64, 2, {3, 5}, 1},       /* 5 into 8: three empty parts */
    {SM_S("\x1e[\"layers\",1,\"w\"]"), TZR_DTYPE_F16, 3, {2, 8, 3}, 1},
    {SM_S("tiny.weight"), TZR_DTYPE_F32, 2, {3, 4}, -1},    /* small, no rule: replicated */
};
#define SM_COUNT (sizeof SM / sizeof SM[0])
/* Rules for tzr_shard_split giving the dims above (big.weight by default). */
#define SM_RULES "*embed*=1,*norm*=replicate,*bias=0,small.odd=1,*\"w\"]=1,*attn*=0,*mlp*=0"

static inline uint64_t sm_numel(const sm_tensor *t) {
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static inline uint8_t sm_byte(size_t t, uint64_t b) {
    uint64_t x = (t + 1) * 0x9E3779B97F4A7C15ull + b * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return (uint8_t)(x & 0x0F); /* 4 bits of noise: zstd can shrink it */
}

/* The split the tests expect: the first len % parts parts get one more. */
static inline void sm_chunk(uint64_t len, int parts, int p, uint64_t *off, uint64_t *n) {
    uint64_t base = len / parts, extra = len % parts;
    *off = 0;
    for (int q = 0; q < p; q++) *off += base + ((uint64_t)q < extra ? 1 : 0);
    *n = base + ((uint64_t)p < extra ? 1 : 0);
}

/* Expected bytes of the slice [off, off+len) of dim (or the whole tensor
 * when dim < 0): element by element, coordinates by div/mod. */
static inline uint8_t *sm_expected(size_t i, int dim, uint64_t off, uint64_t len, uint64_t *nbytes) {
    const sm_tensor *t = &SM[i];
    uint32_t is = tzr_dtype_size(t->dtype);
    uint64_t local[3] = {t->shape[0], t->shape[1], t->shape[2]};
    if (dim >= 0) local[dim] = len;
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->ndim; d++) n *= local[d];
    *nbytes = n * is;
    uint8_t *out = malloc(*nbytes ? *nbytes : 1);
    for (uint64_t e = 0; e < n; e++) {
        uint64_t c[3] = {0, 0, 0}, rest = e;
        for (int d = (int)t->ndim - 1; d >= 0; d--) {
            c[d] = rest % local[d];
            rest /= local[d];
        }
        if (dim >= 0) c[dim] += off;
        uint64_t g = 0;
        for (uint32_t d = 0; d < t->ndim; d++) g = g * t->shape[d] + c[d];
        for (uint32_t k = 0; k < is; k++) out[e * is + k] = sm_byte(i, g * is + k);
    }
    return out;
}

/* Write the whole (unsharded) checkpoint; o (may be NULL) encrypts or
 * compresses. */
static inline int sm_write_with(const char *path, const tzr_writer_options *o) {
    tzr_writer *w = NULL;
    int rc = tzr_writer_open(&w, path, o);
    for (size_t i = 0; i < SM_COUNT && !rc; i++) {
        uint64_t nb;
        uint8_t *data = sm_expected(i, -1, 0, 0, &nb);
        tzr_tensor_desc d = {SM[i].name, SM[i].name_len, SM[i].name[0] == 0x1E ? TZR_STATE_DICT : TZR_PARAM, 0, NULL, 0, SM[i].dtype, SM[i].ndim,
                             SM[i].shape, 0, sizeof(tzr_tensor_desc)};
        rc = tzr_writer_add(w, &d, data);
        free(data);
    }
    if (rc) {
        if (w) tzr_writer_abort(w);
        return rc;
    }
    return tzr_writer_close(w);
}
static inline int sm_write(const char *path) { return sm_write_with(path, NULL); }

#endif
