/* CRC32 (zlib's polynomial and values; computed by ISA-L, combined by
 * zlib) and SHA-256 (OpenSSL) over hashable-header || data, the way
 * tensorizer hashes a tensor. */
#ifndef TZR_HASH_H
#define TZR_HASH_H
#include "internal.h"

typedef struct tzr_hasher {
    int want_crc, want_sha;
    uint32_t crc;
    void *sha; /* EVP_MD_CTX */
} tzr_hasher;

TZR_HIDDEN int tzr_hasher_init(tzr_hasher *h, int want_crc, int want_sha);
TZR_HIDDEN void tzr_hasher_update(tzr_hasher *h, const void *data, size_t len);
/* The next len bytes, whose CRC32 the caller computed on its own
 * (tzr_crc32(0, ...)), so pieces can be hashed apart and in parallel. Only
 * for a hasher without SHA-256, which needs the bytes themselves. */
TZR_HIDDEN void tzr_hasher_add_crc(tzr_hasher *h, uint32_t crc, uint64_t len);
/* Writes the results; frees the state. sha may be NULL when not wanted. */
TZR_HIDDEN int tzr_hasher_final(tzr_hasher *h, uint32_t *crc, uint8_t sha[32]);
TZR_HIDDEN void tzr_hasher_free(tzr_hasher *h);
/* zlib's crc32(crc, data, len): continues a running CRC. */
TZR_HIDDEN uint32_t tzr_crc32(uint32_t crc, const void *data, size_t len);
/* The CRC32 of A || B from crc_a = CRC32(A) and crc_b = CRC32(B), B being
 * len_b bytes long: exact, O(log len_b). */
TZR_HIDDEN uint32_t tzr_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
TZR_HIDDEN void tzr_sha256(const void *data, size_t len, uint8_t out[32]);
#endif
