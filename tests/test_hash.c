/* CRC32 as tensorizer stores it (zlib's): known values, a running CRC over
 * uneven pieces, and pieces hashed apart then combined in order (what a
 * crc32-level load does) all equal the one-shot value. The oracle is a
 * bit-at-a-time CRC written here and published check values, never the
 * code under test. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "hash.h"

/* Reflected CRC-32, polynomial 0xEDB88320, one bit at a time. */
static uint32_t crc_bitwise(uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1)));
    }
    return ~crc;
}

static uint8_t *pseudo_random(size_t n) {
    uint8_t *b = malloc(n ? n : 1);
    uint64_t x = 0x9E3779B97F4A7C15u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b[i] = (uint8_t)(x >> 24);
    }
    return b;
}

static void known_values(void) {
    CHECK(tzr_crc32(0, "123456789", 9) == 0xCBF43926u); /* the CRC-32 check value */
    const char *fox = "The quick brown fox jumps over the lazy dog";
    CHECK(tzr_crc32(0, fox, strlen(fox)) == 0x414FA339u);
    CHECK(tzr_crc32(0, "", 0) == 0);
    CHECK(tzr_crc32(0x12345678u, NULL, 0) == 0x12345678u); /* nothing to add: unchanged */
    /* Running: "1234" then "56789". */
    CHECK(tzr_crc32(tzr_crc32(0, "1234", 4), "56789", 5) == 0xCBF43926u);
    /* Combined: CRC("1234") with CRC("56789") of 5 bytes. */
    CHECK(tzr_crc32_combine(tzr_crc32(0, "1234", 4), tzr_crc32(0, "56789", 5), 5) == 0xCBF43926u);
    CHECK(tzr_crc32_combine(0xCBF43926u, 0, 0) == 0xCBF43926u);
}

/* Lengths around the vector widths and folding blocks of a fast CRC. */
static const size_t cuts[] = {1, 2, 3, 7, 15, 16, 17, 31, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 1023, 4095,
                              4096, 4097, 65535, 65536, 65537, 1 << 20, (1 << 20) + 3};

static void one_shot_matches_bitwise(void) {
    size_t n = 3 << 20;
    uint8_t *b = pseudo_random(n);
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++)
        for (size_t start = 0; start < 4; start++) /* unaligned starts too */
            CHECKF(tzr_crc32(0, b + start, cuts[k]) == crc_bitwise(0, b + start, cuts[k]), "len %zu at +%zu",
                   cuts[k], start);
    CHECK(tzr_crc32(0, b, n) == crc_bitwise(0, b, n));
    free(b);
}

static void uneven_pieces(void) {
    size_t n = (3 << 20) + 12345;
    uint8_t *b = pseudo_random(n);
    uint32_t want = crc_bitwise(0, b, n);
    /* Pieces of the cut lengths in turn, to the end: running and combined. */
    uint32_t running = 0, combined = 0;
    size_t at = 0, pieces = 0;
    for (size_t k = 0; at < n; k = (k + 5) % (sizeof cuts / sizeof cuts[0]), pieces++) {
        size_t len = cuts[k] < n - at ? cuts[k] : n - at;
        running = tzr_crc32(running, b + at, len);
        combined = tzr_crc32_combine(combined, tzr_crc32(0, b + at, len), len);
        at += len;
    }
    CHECK(pieces > 20);
    CHECK(running == want);
    CHECK(combined == want);
    /* The hasher: a header hashed, then pieces added by their CRCs, equals
     * the header and pieces hashed as bytes (and the bitwise CRC). */
    tzr_hasher a, c;
    CHECK_OK(tzr_hasher_init(&a, 1, 0));
    CHECK_OK(tzr_hasher_init(&c, 1, 0));
    tzr_hasher_update(&a, b, 100);
    tzr_hasher_update(&c, b, 100);
    for (size_t off = 100; off < n; off += 1 << 20) {
        size_t len = n - off < (1 << 20) ? n - off : 1 << 20;
        tzr_hasher_update(&a, b + off, len);
        tzr_hasher_add_crc(&c, tzr_crc32(0, b + off, len), len);
    }
    uint32_t ca = 0, cc = 0;
    tzr_hasher_final(&a, &ca, NULL);
    tzr_hasher_final(&c, &cc, NULL);
    CHECK(ca == want && cc == want);
    /* One byte off in the last piece: the combined CRC differs. */
    b[n - 1] ^= 1;
    CHECK(tzr_crc32_combine(tzr_crc32(0, b, n - 7), tzr_crc32(0, b + n - 7, 7), 7) != want);
    free(b);
}

int main(void) {
    RUN(known_values);
    RUN(one_shot_matches_bitwise);
    RUN(uneven_pieces);
    return check_done();
}
