#ifndef TZR_NAMES_H
#define TZR_NAMES_H
#include "internal.h"

#include <stdint.h>
#include <string.h>

/* The hash every name table uses (reader, writer, safetensors, shard
 * sets): eight bytes a round, then a full mix, so both halves are good
 * (tables take the low bits for the bucket and the high half as a tag).
 * FNV-1a's byte loop, which it replaced, was a third of a 100k-tensor
 * open's name indexing. */
static inline uint64_t tzr_name_hash(const char *p, size_t n) {
    const uint64_t k = 0xff51afd7ed558ccdull;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n, w;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * k;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * k;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}
/* 1 if the bytes are valid UTF-8. */
TZR_HIDDEN int tzr_utf8_valid(const char *s, size_t n);
/* Validate a stored name; *structured set for 0x1E JSON names. */
TZR_HIDDEN int tzr_name_check(const char *name, size_t len, int *structured);
/* A quoted JSON string (Python ensure_ascii style); malloc'd. */
TZR_HIDDEN int tzr_json_string(const char *s, size_t n, char **out, size_t *out_len);
#endif
