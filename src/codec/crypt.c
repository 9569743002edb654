#include "crypt.h"

#include <sodium.h>
#include <string.h>

int tzr_crypt_init(void) {
    if (sodium_init() < 0) return tzr_fail(TZR_ECRYPT, "libsodium failed to initialise");
    return 0;
}

void tzr_random_bytes(void *buf, size_t len) { randombytes_buf(buf, len); }

int tzr_crypt_derive(uint8_t key[32], const char *pw, size_t pw_len, const uint8_t *salt, size_t salt_len,
                     uint64_t ops, uint64_t mem, int32_t alg) {
    if (tzr_crypt_init()) return TZR_ECRYPT;
    if (alg != crypto_pwhash_ALG_ARGON2ID13)
        return tzr_fail(TZR_ECRYPT, "key derivation algorithm %d is not Argon2id13", alg);
    if (salt_len != crypto_pwhash_SALTBYTES)
        return tzr_fail(TZR_ECRYPT, "key derivation salt is %zu bytes, expected %d", salt_len,
                        crypto_pwhash_SALTBYTES);
    /* Untrusted limits: refuse values libsodium would reject or that would
     * make a corrupt file allocate absurd memory. */
    if (ops < crypto_pwhash_OPSLIMIT_MIN || ops > 64 || mem < crypto_pwhash_MEMLIMIT_MIN ||
        mem > (uint64_t)4 << 30)
        return tzr_fail(TZR_ECRYPT, "key derivation limits out of range (ops %llu, mem %llu)",
                        (unsigned long long)ops, (unsigned long long)mem);
    if (crypto_pwhash(key, 32, pw, pw_len, salt, ops, (size_t)mem, alg) != 0)
        return tzr_fail(TZR_ENOMEM, "Argon2id key derivation failed (out of memory?)");
    return 0;
}

int tzr_key_derive(uint8_t key[TZR_KEY_BYTES], const char *password, size_t password_len,
                   const uint8_t salt[TZR_SALT_BYTES], uint64_t opslimit, uint64_t memlimit) {
    if (!key || !password || !salt) return tzr_fail(TZR_EINVAL, "tzr_key_derive: NULL argument");
    return tzr_crypt_derive(key, password, password_len, salt, TZR_SALT_BYTES, opslimit ? opslimit : 3,
                            memlimit ? memlimit : 268435456, crypto_pwhash_ALG_ARGON2ID13);
}

uint64_t tzr_crypt_num_chunks(uint64_t len, uint64_t chunk_size) {
    return len / chunk_size + (len % chunk_size != 0);
}

static void nonce_at(uint8_t out[24], const uint8_t nonce0[24], uint64_t index) {
    /* nonce_0 + index as a 192-bit little-endian integer (sodium_increment
     * applied index times). */
    memcpy(out, nonce0, 24);
    uint64_t carry = index;
    for (int i = 0; i < 24 && carry; i++) {
        uint64_t v = (uint64_t)out[i] + (carry & 0xFF);
        out[i] = (uint8_t)v;
        carry = (carry >> 8) + (v >> 8);
    }
}

int tzr_crypt_open(const tzr_crypt_info *ci, const uint8_t key[32], uint64_t data_length, uint64_t first_chunk,
                   uint8_t *buf, size_t len) {
    if (!ci->encrypted) return tzr_fail(TZR_ECRYPT, "tensor is not encrypted");
    if (data_length == 0) return 0;
    /* One MAC: the whole buffer is one secretbox, whatever chunk_size says. */
    if (ci->chunk_type == TZR_CHUNK_XSALSA_SEQUENTIAL || ci->num_macs == 1) {
        if (first_chunk != 0 || len != data_length)
            return tzr_fail(TZR_EINVAL, "single-MAC tensor must be decrypted whole");
        if (crypto_secretbox_open_detached(buf, buf, ci->macs, len, ci->nonce, key) != 0)
            return tzr_fail(TZR_ECRYPT, "decryption failed (wrong key or corrupt data)");
        return 0;
    }
    if (tzr_crypt_num_chunks(data_length, ci->chunk_size) != ci->num_macs)
        return tzr_fail(TZR_EFORMAT, "%llu MACs for %llu bytes in %llu-byte chunks",
                        (unsigned long long)ci->num_macs, (unsigned long long)data_length,
                        (unsigned long long)ci->chunk_size);
    uint64_t chunk = first_chunk;
    uint64_t off = first_chunk * ci->chunk_size;
    size_t done = 0;
    while (done < len) {
        if (chunk >= ci->num_macs) return tzr_fail(TZR_EINVAL, "decrypt range past the tensor");
        uint64_t n = data_length - off < ci->chunk_size ? data_length - off : ci->chunk_size;
        if (n > len - done) return tzr_fail(TZR_EINVAL, "decrypt range ends inside a chunk");
        uint8_t nonce[24];
        nonce_at(nonce, ci->nonce, chunk);
        if (crypto_secretbox_open_detached(buf + done, buf + done, ci->macs + chunk * 16, n, nonce, key) != 0)
            return tzr_fail(TZR_ECRYPT, "decryption failed at byte %llu of the data (wrong key or corrupt data)",
                            (unsigned long long)off);
        done += n;
        off += n;
        chunk++;
    }
    return 0;
}

int tzr_crypt_seal_chunk(const uint8_t nonce0[24], uint64_t chunk_index, const uint8_t key[32], uint8_t *buf,
                         size_t len, uint8_t mac[16]) {
    uint8_t nonce[24];
    nonce_at(nonce, nonce0, chunk_index);
    if (crypto_secretbox_detached(buf, mac, buf, len, nonce, key) != 0)
        return tzr_fail(TZR_ECRYPT, "encryption failed");
    return 0;
}
