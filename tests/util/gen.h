/* Builds test checkpoints with the writer: deterministic pseudo-random
 * data, a mix of tiny, small and multi-chunk tensors, a meta tensor and a
 * zero-size one. The expected bytes are regenerated from the same seed,
 * independently of the reader. */
#ifndef TZR_TEST_GEN_H
#define TZR_TEST_GEN_H
#include <stddef.h>
#include <stdint.h>

#include "tzr.h"

typedef struct gen_spec {
    size_t count;        /* tensors */
    uint64_t big_bytes;  /* size of every 7th tensor */
    uint64_t small_max;  /* others: 1..small_max bytes */
    int with_meta;       /* tensor 3 is meta, tensor 5 is zero-size */
    const uint8_t *key;  /* encrypt with this key */
} gen_spec;

/* Expected bytes of tensor i (malloc'd) and its length. */
uint8_t *gen_expected(const gen_spec *s, size_t i, uint64_t *len, int *meta);
/* Write the file; returns 0 or a TZR code. */
int gen_write(const gen_spec *s, const char *path);
/* Tensor i's bytes (malloc'd), their length and whether it is meta. */
typedef uint8_t *(*gen_bytes_fn)(void *ctx, size_t i, uint64_t *len, int *meta);
/* The file gen_write writes (count tensors "layers.<i>.weight", 1-D u8,
 * module i % 5) with the bytes `bytes` gives; o may be NULL. */
int gen_write_from(const char *path, size_t count, gen_bytes_fn bytes, void *ctx, const tzr_writer_options *o);
#endif
