/* Small pieces for reading JSON by hand where a jansson tree is too slow
 * (the shard manifest's entries; the safetensors header's). Each reads one
 * token at p[i] of p[0..n) and returns the index past it, or 0 for anything
 * it does not take; a caller then gives the document to jansson, whose
 * results and messages stay the reference. So each piece accepts only what
 * jansson reads the same way, and never words an error itself. The hot
 * ones are inline: a call per digit run or key was measurable. */
#ifndef TZR_JSON_SCAN_H
#define TZR_JSON_SCAN_H
#include "internal.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline int tzr_js_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static inline size_t tzr_js_skip_ws(const uint8_t *p, size_t n, size_t i) {
    while (i < n && tzr_js_ws(p[i])) i++;
    return i;
}

/* End of the string at p[i] == '"' (past its closing quote), or 0. */
static inline size_t tzr_js_string_end(const uint8_t *p, size_t n, size_t i) {
    for (i++; i < n; i++) {
        if (p[i] == '\\') i++;
        else if (p[i] == '"') return i + 1;
    }
    return 0;
}

/* tzr_js_string_end, and whether the string's bytes are plain (printable
 * ASCII, no escape: then they are the string) in the same pass. */
static inline size_t tzr_js_plain_end(const uint8_t *p, size_t n, size_t i, int *plain) {
    int ok = 1;
    /* Eight bytes at a time up to the first quote, backslash, control or
     * non-ASCII byte (a 48-byte name took 48 rounds of the byte loop),
     * which the byte loop then takes. Each term's high bit is set in a
     * byte of that kind (the zero-byte test on w ^ c; bytes under 0x20;
     * bytes from 0x80); a borrow can set it in bytes above such a byte,
     * never below, so the lowest set bit is the first one exactly. */
    const uint64_t ones = 0x0101010101010101ull, highs = ones << 7;
    for (i++; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\'), d = w ^ (ones * 0x7f);
        uint64_t m = (((q - ones) & ~q) | ((b - ones) & ~b) | ((d - ones) & ~d) | ((w - ones * 0x20) & ~w) | w) & highs;
        if (m) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            i += (size_t)__builtin_ctzll(m) >> 3; /* (elsewhere the byte loop takes the whole word) */
#endif
            break;
        }
    }
    for (; i < n; i++) {
        uint8_t c = p[i];
        if (c == '"') {
            *plain = ok;
            return i + 1;
        }
        if (c == '\\') ok = 0, i++;
        else if (c < 0x20 || c >= 0x7f) ok = 0;
    }
    return 0;
}

/* A plain key (printable ASCII, no escape) at p[i] == '"': *k, *kl; the
 * index past its ':' and the whitespace after it, or 0. One pass: with no
 * escape allowed the first quote ends it. */
static inline size_t tzr_js_key(const uint8_t *p, size_t n, size_t i, const uint8_t **k, size_t *kl) {
    if (i >= n || p[i] != '"') return 0;
    size_t j = i + 1;
    for (;; j++) {
        if (j >= n) return 0;
        uint8_t c = p[j];
        if (c == '"') break;
        if (c < 0x20 || c >= 0x7f || c == '\\') return 0;
    }
    *k = p + i + 1;
    *kl = j - i - 1;
    j = tzr_js_skip_ws(p, n, j + 1);
    if (j >= n || p[j] != ':') return 0;
    return tzr_js_skip_ws(p, n, j + 1);
}

/* An integer of 1 to 18 digits: no sign, no leading zero, no fraction or
 * exponent after it (what jansson reads as the same integer). */
static inline size_t tzr_js_uint(const uint8_t *p, size_t n, size_t i, uint64_t *v) {
    size_t start = i;
    uint64_t x = 0;
    /* One bound (the end, or one past 18 digits), one compare a digit. */
    size_t lim = n - i < 19 ? n : i + 19;
    unsigned d;
    while (i < lim && (d = (unsigned)p[i] - '0') < 10) x = x * 10 + d, i++;
    size_t len = i - start;
    if (len == 0 || len > 18 || (len > 1 && p[start] == '0')) return 0;
    if (i < n && (p[i] == '.' || p[i] == 'e' || p[i] == 'E' || (p[i] >= '0' && p[i] <= '9'))) return 0;
    *v = x;
    return i;
}

/* '[' uint (',' uint)* ']' or '[]': *count values into v (at most cap). */
static inline size_t tzr_js_uints(const uint8_t *p, size_t n, size_t i, uint64_t *v, size_t cap, size_t *count) {
    if (i >= n || p[i] != '[') return 0;
    *count = 0;
    i = tzr_js_skip_ws(p, n, i + 1);
    if (i < n && p[i] == ']') return i + 1;
    for (;;) {
        if (*count == cap || !(i = tzr_js_uint(p, n, i, &v[*count]))) return 0;
        ++*count;
        if (i < n && tzr_js_ws(p[i])) i = tzr_js_skip_ws(p, n, i); /* (writers put none) */
        if (i < n && p[i] == ']') return i + 1;
        if (i >= n || p[i] != ',') return 0;
        i++;
        if (i < n && tzr_js_ws(p[i])) i = tzr_js_skip_ws(p, n, i);
    }
}

/* End of the value at p[i], or 0. Only delimits: jansson checks it. */
TZR_HIDDEN size_t tzr_js_value_end(const uint8_t *p, size_t n, size_t i);

/* The string at p[i] decoded as jansson decodes it (with JSON_ALLOW_NUL)
 * into out (cap bytes), *len bytes: printable ASCII, the short escapes,
 * and \uXXXX outside the surrogates (UTF-8 encoded). Index past it, or 0
 * for anything else (other bytes, surrogates, no room). */
TZR_HIDDEN size_t tzr_js_string(const uint8_t *p, size_t n, size_t i, char *out, size_t cap, size_t *len);

/* 2 * nbytes hex digits (either case, as libsodium's decoder) at h into
 * out: 0, or -1 if any is not a hex digit (out is then unspecified). */
TZR_HIDDEN int tzr_js_hex(const uint8_t *h, size_t nbytes, uint8_t *out);

/* "<64 hex digits>" at p[i] into 32 bytes; index past it, or 0. */
static inline size_t tzr_js_sha256(const uint8_t *p, size_t n, size_t i, uint8_t out[32]) {
    if (i >= n || n - i < 66 || p[i] != '"' || p[i + 65] != '"' || tzr_js_hex(p + i + 1, 32, out)) return 0;
    return i + 66;
}
#endif
