#include "hash.h"

#include <libdeflate.h>
#include <openssl/evp.h>

uint32_t tzr_crc32(uint32_t crc, const void *data, size_t len) {
    return libdeflate_crc32(crc, data, len);
}

void tzr_sha256(const void *data, size_t len, uint8_t out[32]) {
    unsigned int n = 32;
    EVP_Digest(data, len, out, &n, EVP_sha256(), NULL);
}

int tzr_hasher_init(tzr_hasher *h, int want_crc, int want_sha) {
    h->want_crc = want_crc;
    h->want_sha = want_sha;
    h->crc = 0;
    h->sha = NULL;
    if (want_sha) {
        EVP_MD_CTX *ctx = EVP_MD_CTX_new();
        if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
            EVP_MD_CTX_free(ctx);
            return tzr_fail(TZR_ENOMEM, "cannot create a SHA-256 context");
        }
        h->sha = ctx;
    }
    return 0;
}

void tzr_hasher_update(tzr_hasher *h, const void *data, size_t len) {
    if (len == 0) return; /* libdeflate_crc32(crc, NULL, 0) would reset */
    if (h->want_crc) h->crc = libdeflate_crc32(h->crc, data, len);
    if (h->want_sha) EVP_DigestUpdate(h->sha, data, len);
}

int tzr_hasher_final(tzr_hasher *h, uint32_t *crc, uint8_t sha[32]) {
    if (h->want_crc && crc) *crc = h->crc;
    if (h->want_sha) {
        unsigned int n = 32;
        uint8_t tmp[32];
        EVP_DigestFinal_ex(h->sha, sha ? sha : tmp, &n);
    }
    tzr_hasher_free(h);
    return 0;
}

void tzr_hasher_free(tzr_hasher *h) {
    EVP_MD_CTX_free(h->sha);
    h->sha = NULL;
}
