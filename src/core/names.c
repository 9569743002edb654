/* Tensor names: plain UTF-8, or structured paths written as 0x1E followed
 * by the compact JSON array Python's json.dumps(ensure_ascii=True) gives. */
#include "internal.h"
#include "names.h"
#include "text_buf.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

/* Decode one UTF-8 code point; returns bytes used or 0 if invalid. */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    size_t len = (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || len > n) return 0;
    uint32_t v = s[0] & (0xFF >> (len + 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

int tzr_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    /* ASCII fast path, 8 bytes at a time: names are nearly always ASCII. */
    for (uint64_t w; i + 8 <= n; i += 8) {
        memcpy(&w, u + i, 8);
        if (w & 0x8080808080808080ull) break;
    }
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t k = utf8_next(u + i, n - i, &cp);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

/* A JSON string exactly as Python's json.dumps(ensure_ascii=True) writes it. */
static int put_json_string(tzr_text *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    char esc[16];
    if (tzr_text_put(b, "\"", 1)) return -1;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = utf8_next(u + i, n - i, &cp);
        if (!k) return -2;
        i += k;
        const char *e = NULL;
        switch (cp) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        }
        int m;
        if (e) {
            m = snprintf(esc, sizeof esc, "%s", e);
        } else if (cp >= 0x20 && cp < 0x7F) {
            esc[0] = (char)cp;
            m = 1;
        } else if (cp < 0x10000) {
            m = snprintf(esc, sizeof esc, "\\u%04x", cp);
        } else {
            uint32_t v = cp - 0x10000;
            m = snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
        }
        if (tzr_text_put(b, esc, (size_t)m)) return -1;
    }
    return tzr_text_put(b, "\"", 1);
}

int tzr_json_string(const char *s, size_t n, char **out, size_t *out_len) {
    tzr_text b = {0};
    int rc = put_json_string(&b, s, n);
    if (rc) {
        free(b.p);
        return rc == -2 ? tzr_fail(TZR_EINVAL, "name is not valid UTF-8")
                        : tzr_fail(TZR_ENOMEM, "out of memory");
    }
    *out = b.p;
    *out_len = b.len;
    return 0;
}

int tzr_name_build(const tzr_name_part *parts, size_t n, char **out, size_t *out_len) {
    *out = NULL;
    if (!parts || n == 0) return tzr_fail(TZR_EINVAL, "structured name needs at least one part");
    tzr_text b = {0};
    int rc = tzr_text_put(&b, "\x1e[", 2);
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (i) rc = tzr_text_put(&b, ",", 1);
        if (rc) break;
        if (parts[i].str) {
            rc = put_json_string(&b, parts[i].str, strlen(parts[i].str));
        } else {
            char num[24];
            int m = snprintf(num, sizeof num, "%llu", (unsigned long long)parts[i].idx);
            rc = tzr_text_put(&b, num, (size_t)m);
        }
    }
    if (rc == 0) rc = tzr_text_put(&b, "]", 1);
    if (rc) {
        free(b.p);
        return rc == -2 ? tzr_fail(TZR_EINVAL, "name part is not valid UTF-8")
                        : tzr_fail(TZR_ENOMEM, "out of memory");
    }
    if (b.len > 65535) {
        free(b.p);
        return tzr_fail(TZR_ELIMIT, "structured name is %zu bytes; the format allows 65535", b.len);
    }
    *out = b.p;
    *out_len = b.len;
    return 0;
}

int tzr_name_check(const char *name, size_t len, int *structured) {
    *structured = 0;
    if (len == 0) return tzr_fail(TZR_EFORMAT, "empty tensor name");
    if ((unsigned char)name[0] != 0x1E) {
        if (!tzr_utf8_valid(name, len)) return tzr_fail(TZR_EFORMAT, "tensor name is not valid UTF-8");
        return 0;
    }
    /* Structured: 0x1E '[' ... ']' holding strings and non-negative ints. */
    if (len < 3 || name[1] != '[' || name[len - 1] != ']' || memchr(name, '\n', len) ||
        memchr(name, '\r', len))
        return tzr_fail(TZR_EFORMAT, "structured tensor name is not a JSON array");
    json_error_t err;
    json_t *arr = json_loadb(name + 1, len - 1, 0, &err);
    if (!arr) return tzr_fail(TZR_EFORMAT, "structured tensor name: JSON error at column %d: %s", err.column, err.text);
    int ok = json_is_array(arr) && json_array_size(arr) > 0;
    for (size_t i = 0; ok && i < json_array_size(arr); i++) {
        json_t *v = json_array_get(arr, i);
        ok = json_is_string(v) || (json_is_integer(v) && json_integer_value(v) >= 0);
    }
    json_decref(arr);
    if (!ok)
        return tzr_fail(TZR_EFORMAT, "structured tensor name must be a non-empty array of strings and non-negative integers");
    *structured = 1;
    return 0;
}
