/* The JSON scanning pieces (src/util/json_scan.h) the hand-written
 * manifest scan reads with. Expected values are spelled out here or
 * computed by a plain digit-by-digit reference below, never by the code
 * under test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "json_scan.h"

#define S(lit) ((const uint8_t *)(lit)), (sizeof(lit) - 1)

/* reference: one hex digit's value, or -1 */
static int ref_digit(int c) {
    const char *d = "0123456789abcdef", *u = "0123456789ABCDEF";
    for (int k = 0; k < 16; k++)
        if (c == d[k] || c == u[k]) return k;
    return -1;
}

/* Every byte value at every position of hex strings of several lengths
 * (the 32-digit blocks and the digit-pair tail): refused iff it is not a
 * hex digit; otherwise the bytes of a digit-pair reference. */
static void hex_every_byte(void) {
    static const char digits[] = "0123456789abcdefABCDEF";
    static const size_t lens[] = {1, 4, 15, 16, 17, 32, 33};
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        size_t nb = lens[li];
        uint8_t h[80], out[40], want[40];
        for (size_t j = 0; j < 2 * nb; j++) h[j] = (uint8_t)digits[(j * 7 + li) % 22];
        for (size_t j = 0; j < 2 * nb && !check_case_failed; j++) {
            uint8_t keep = h[j];
            for (int b = 0; b < 256; b++) {
                h[j] = (uint8_t)b;
                int ok = ref_digit(b) >= 0;
                for (size_t k = 0; ok && k < nb; k++) want[k] = (uint8_t)(ref_digit(h[2 * k]) << 4 | ref_digit(h[2 * k + 1]));
                int rc = tzr_js_hex(h, nb, out);
                CHECKF(rc == (ok ? 0 : -1), "%zu bytes, byte 0x%02x at %zu: rc %d", nb, b, j, rc);
                if (ok && rc == 0) CHECKF(memcmp(out, want, nb) == 0, "%zu bytes, byte 0x%02x at %zu: wrong value", nb, b, j);
                if (check_case_failed) break;
            }
            h[j] = keep;
        }
    }
    /* one spelled out */
    uint8_t out[32];
    const uint8_t *sha = (const uint8_t *)"\"00112233445566778899aAbBcCdDeEfF0f1e2d3c4b5a69788796a5b4c3d2e1f0\"";
    CHECK(tzr_js_sha256(sha, 66, 0, out) == 66);
    static const uint8_t want[32] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa,
                                     0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x0f, 0x1e, 0x2d, 0x3c, 0x4b, 0x5a,
                                     0x69, 0x78, 0x87, 0x96, 0xa5, 0xb4, 0xc3, 0xd2, 0xe1, 0xf0};
    CHECK(memcmp(out, want, 32) == 0);
    CHECK(tzr_js_sha256(sha, 65, 0, out) == 0);     /* cut before the closing quote */
    CHECK(tzr_js_sha256(sha + 1, 65, 0, out) == 0); /* no opening quote */
}

static void keys_numbers_strings(void) {
    const uint8_t *k = NULL;
    size_t kl = 9;
    CHECK(tzr_js_key(S("\"name\" :\t\"x\""), 0, &k, &kl) == 9 && kl == 4 && memcmp(k, "name", 4) == 0);
    CHECK(tzr_js_key(S("\"\":1"), 0, &k, &kl) == 3 && kl == 0);
    CHECK(tzr_js_key(S("\"n\\u0061me\":1"), 0, &k, &kl) == 0); /* escapes: jansson's */
    CHECK(tzr_js_key(S("\"na\x7fme\":1"), 0, &k, &kl) == 0);
    CHECK(tzr_js_key(S("\"name\" 1"), 0, &k, &kl) == 0);
    CHECK(tzr_js_key(S("\"name"), 0, &k, &kl) == 0);

    uint64_t v = 7;
    CHECK(tzr_js_uint(S("0,"), 0, &v) == 1 && v == 0);
    CHECK(tzr_js_uint(S("123456789012345678]"), 0, &v) == 18 && v == 123456789012345678ull);
    CHECK(tzr_js_uint(S("1234567890123456789"), 0, &v) == 0); /* 19 digits: jansson's */
    CHECK(tzr_js_uint(S("01"), 0, &v) == 0);
    CHECK(tzr_js_uint(S("1.5"), 0, &v) == 0);
    CHECK(tzr_js_uint(S("1e3"), 0, &v) == 0);
    CHECK(tzr_js_uint(S("-1"), 0, &v) == 0);
    CHECK(tzr_js_uint(S(""), 0, &v) == 0);
    uint64_t a[4];
    size_t na = 9;
    CHECK(tzr_js_uints(S("[ 3 ,\n4]"), 0, a, 4, &na) == 8 && na == 2 && a[0] == 3 && a[1] == 4);
    CHECK(tzr_js_uints(S("[]"), 0, a, 4, &na) == 2 && na == 0);
    CHECK(tzr_js_uints(S("[1,2,3,4,5]"), 0, a, 4, &na) == 0); /* past cap */
    CHECK(tzr_js_uints(S("[1,]"), 0, a, 4, &na) == 0);

    char out[16];
    size_t ol = 99;
    CHECK(tzr_js_string(S("\"caf\\u00e9\\t\\\"\\/\""), 0, out, sizeof out, &ol) == 17 && ol == 8 &&
          memcmp(out, "caf\xc3\xa9\t\"/", 8) == 0);
    CHECK(tzr_js_string(S("\"<V2\\u0000x\""), 0, out, sizeof out, &ol) == 12 && ol == 5 &&
          memcmp(out, "<V2\0x", 5) == 0);
    CHECK(tzr_js_string(S("\"\\u20AC\""), 0, out, sizeof out, &ol) == 8 && ol == 3 && memcmp(out, "\xe2\x82\xac", 3) == 0);
    CHECK(tzr_js_string(S("\"\\ud83d\\ude00\""), 0, out, sizeof out, &ol) == 0); /* surrogates: jansson's */
    CHECK(tzr_js_string(S("\"caf\xc3\xa9\""), 0, out, sizeof out, &ol) == 0);  /* raw UTF-8: jansson's */
    CHECK(tzr_js_string(S("\"\\x\""), 0, out, sizeof out, &ol) == 0);
    CHECK(tzr_js_string(S("\"0123456789abcdefgh\""), 0, out, sizeof out, &ol) == 0); /* no room */
    CHECK(tzr_js_string(S("\"abc"), 0, out, sizeof out, &ol) == 0);

    int plain = 5;
    CHECK(tzr_js_plain_end(S("\"ab\" "), 0, &plain) == 4 && plain == 1);
    CHECK(tzr_js_plain_end(S("\"a\\\"b\" "), 0, &plain) == 6 && plain == 0);
    CHECK(tzr_js_string_end(S("\"a\\\\\"x"), 0) == 5);
    CHECK(tzr_js_value_end(S("{\"a\": [1, \"]}\", {\"b\": 2}]} ,"), 0) == 26);
    CHECK(tzr_js_value_end(S("[1, [2]"), 0) == 0);
    CHECK(tzr_js_value_end(S("true}"), 0) == 4);
    CHECK(tzr_js_skip_ws(S(" \t\r\n x"), 0) == 5);
}

int main(void) {
    RUN(hex_every_byte);
    RUN(keys_numbers_strings);
    return check_done();
}
