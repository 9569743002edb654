/* The larger JSON scanning pieces (json_scan.h says what they are for). */
#include "json_scan.h"

#include <string.h>

size_t tzr_js_value_end(const uint8_t *p, size_t n, size_t i) {
    if (i >= n) return 0;
    if (p[i] == '"') return tzr_js_string_end(p, n, i);
    if (p[i] == '{' || p[i] == '[') {
        size_t depth = 0;
        for (; i < n; i++) {
            if (p[i] == '"') {
                if (!(i = tzr_js_string_end(p, n, i))) return 0;
                i--;
            } else if (p[i] == '{' || p[i] == '[') {
                depth++;
            } else if (p[i] == '}' || p[i] == ']') {
                if (--depth == 0) return i + 1;
            }
        }
        return 0;
    }
    while (i < n && !tzr_js_ws(p[i]) && p[i] != ',' && p[i] != '}' && p[i] != ']') i++;
    return i;
}

static int hexval(uint8_t c) {
    if ((unsigned)c - '0' < 10) return c - '0';
    c |= 0x20;
    if ((unsigned)c - 'a' < 6) return c - 'a' + 10;
    return -1;
}

size_t tzr_js_string(const uint8_t *p, size_t n, size_t i, char *out, size_t cap, size_t *len) {
    if (i >= n || p[i] != '"') return 0;
    size_t o = 0;
    for (i++; i < n; i++) {
        uint8_t c = p[i];
        if (c == '"') {
            *len = o;
            return i + 1;
        }
        if (c < 0x20 || c >= 0x7f) return 0;
        if (o + 3 > cap) return 0;
        if (c != '\\') {
            out[o++] = (char)c;
            continue;
        }
        if (++i >= n) return 0;
        switch (p[i]) {
        case '"': case '\\': case '/': out[o++] = (char)p[i]; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'u': {
            if (i + 4 >= n) return 0;
            unsigned u = 0;
            for (int k = 1; k <= 4; k++) {
                int h = hexval(p[i + k]);
                if (h < 0) return 0;
                u = u << 4 | (unsigned)h;
            }
            i += 4;
            if (u >= 0xD800 && u <= 0xDFFF) return 0;
            if (u < 0x80) {
                out[o++] = (char)u;
            } else if (u < 0x800) {
                out[o++] = (char)(0xC0 | u >> 6);
                out[o++] = (char)(0x80 | (u & 0x3F));
            } else {
                out[o++] = (char)(0xE0 | u >> 12);
                out[o++] = (char)(0x80 | (u >> 6 & 0x3F));
                out[o++] = (char)(0x80 | (u & 0x3F));
            }
            break;
        }
        default: return 0;
        }
    }
    return 0;
}

/* 32 digits at a time with SSE2 (three SHA-256 a tensor in a manifest: a
 * byte-table decoder was a fifth of a 100k-tensor open); the rest, and
 * other machines, a digit pair at a time. Bytes from 0x80 are negative to
 * the signed compares, so they fail both ranges. */
#ifdef __SSE2__
#include <emmintrin.h>

static inline int hex16(const uint8_t *h, __m128i *out) {
    __m128i v = _mm_loadu_si128((const __m128i *)h), l = _mm_or_si128(v, _mm_set1_epi8(0x20));
    __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(v, _mm_set1_epi8('0' - 1)), _mm_cmplt_epi8(v, _mm_set1_epi8('9' + 1)));
    __m128i alpha = _mm_and_si128(_mm_cmpgt_epi8(l, _mm_set1_epi8('a' - 1)), _mm_cmplt_epi8(l, _mm_set1_epi8('f' + 1)));
    if (_mm_movemask_epi8(_mm_or_si128(digit, alpha)) != 0xFFFF) return -1;
    /* 'a' & 15 == 1, + 9 */
    __m128i nib = _mm_add_epi8(_mm_and_si128(v, _mm_set1_epi8(0x0F)), _mm_and_si128(alpha, _mm_set1_epi8(9)));
    /* a pair's first digit is its lane's low byte */
    *out = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(nib, _mm_set1_epi16(0x00FF)), 4), _mm_srli_epi16(nib, 8));
    return 0;
}
#endif

int tzr_js_hex(const uint8_t *h, size_t nbytes, uint8_t *out) {
    size_t k = 0;
#ifdef __SSE2__
    for (; k + 16 <= nbytes; k += 16) {
        __m128i a, b;
        if (hex16(h + 2 * k, &a) || hex16(h + 2 * k + 16, &b)) return -1;
        _mm_storeu_si128((__m128i *)(out + k), _mm_packus_epi16(a, b));
    }
#endif
    for (; k < nbytes; k++) {
        int a = hexval(h[2 * k]), b = hexval(h[2 * k + 1]);
        if ((a | b) < 0) return -1;
        out[k] = (uint8_t)(a << 4 | b);
    }
    return 0;
}
