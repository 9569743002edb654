/* tensorizer's encryption with libsodium: XSalsa20-Poly1305 secretbox in
 * detached form, one MAC per plaintext chunk, nonces counted up as
 * little-endian integers; keys from 32 raw bytes or Argon2id. */
#ifndef TZR_CRYPT_H
#define TZR_CRYPT_H
#include "format.h"

TZR_HIDDEN int tzr_crypt_init(void);
/* Argon2id13 key derivation. */
TZR_HIDDEN int tzr_crypt_derive(uint8_t key[32], const char *pw, size_t pw_len, const uint8_t *salt,
                                size_t salt_len, uint64_t ops, uint64_t mem, int32_t alg);
/* Number of MACs for len bytes under chunk_size. */
TZR_HIDDEN uint64_t tzr_crypt_num_chunks(uint64_t len, uint64_t chunk_size);
/* Decrypt in place. buf holds bytes [first_chunk*chunk_size, ...) of the
 * tensor: a whole number of chunks, or the tail. Only for parallel-chunk
 * tensors with num_macs > 1 may first_chunk be non-zero. */
TZR_HIDDEN int tzr_crypt_open(const tzr_crypt_info *ci, const uint8_t key[32], uint64_t data_length,
                              uint64_t first_chunk, uint8_t *buf, size_t len);
/* Encrypt one chunk in place with nonce_0 + chunk_index; writes its MAC. */
TZR_HIDDEN int tzr_crypt_seal_chunk(const uint8_t nonce0[24], uint64_t chunk_index, const uint8_t key[32],
                                    uint8_t *buf, size_t len, uint8_t mac[16]);
TZR_HIDDEN void tzr_random_bytes(void *buf, size_t len);
#endif
