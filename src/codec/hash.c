#include "hash.h"

#include <isa-l/crc.h>
#include <openssl/evp.h>
#include <openssl/opensslv.h>
#include <pthread.h>
#include <zlib.h>

/* ISA-L rather than zlib or libdeflate: its folding CRC uses VPCLMULQDQ
 * where the CPU has it, several times their speed (docs/benchmarks.md). */
uint32_t tzr_crc32(uint32_t crc, const void *data, size_t len) {
    if (len == 0) return crc;
    return crc32_gzip_refl(crc, data, len);
}

uint32_t tzr_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
    return (uint32_t)crc32_combine64(crc_a, crc_b, (z_off64_t)len_b);
}

/* SHA-256 fetched from its provider once: EVP_sha256() in every init had
 * OpenSSL 3 look it up again under a lock, per tensor (a tenth of a
 * verify of 100k small tensors, both workers queueing). Never freed: one
 * per process, as OpenSSL's own; fetched with the default properties in
 * force at the first hash. */
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;
static void fetch_sha256(void) { sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL); }

static const EVP_MD *sha256(void) {
    pthread_once(&sha256_once, fetch_sha256);
    return sha256_md ? sha256_md : EVP_sha256();
}
#else
static const EVP_MD *sha256(void) { return EVP_sha256(); } /* (OpenSSL 1.1 looks nothing up) */
#endif

void tzr_sha256(const void *data, size_t len, uint8_t out[32]) {
    unsigned int n = 32;
    EVP_Digest(data, len, out, &n, sha256(), NULL);
}

int tzr_hasher_init(tzr_hasher *h, int want_crc, int want_sha) {
    h->want_crc = want_crc;
    h->want_sha = want_sha;
    h->crc = 0;
    h->sha = NULL;
    if (want_sha) {
        EVP_MD_CTX *ctx = EVP_MD_CTX_new();
        if (!ctx || EVP_DigestInit_ex(ctx, sha256(), NULL) != 1) {
            EVP_MD_CTX_free(ctx);
            return tzr_fail(TZR_ENOMEM, "cannot create a SHA-256 context");
        }
        h->sha = ctx;
    }
    return 0;
}

void tzr_hasher_update(tzr_hasher *h, const void *data, size_t len) {
    if (len == 0) return;
    if (h->want_crc) h->crc = tzr_crc32(h->crc, data, len);
    if (h->want_sha) EVP_DigestUpdate(h->sha, data, len);
}

void tzr_hasher_add_crc(tzr_hasher *h, uint32_t crc, uint64_t len) {
    if (h->want_crc && len) h->crc = tzr_crc32_combine(h->crc, crc, len);
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
