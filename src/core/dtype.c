/* dtype strings as tensorizer writes them: numpy's dtype.str ("<f4", "|b1")
 * or the opaque form "<V2\0torch.bfloat16" for torch types numpy lacks. */
#include "internal.h"

#include <string.h>

typedef struct dtype_row {
    tzr_dtype dtype;
    const char *name;   /* short name */
    uint32_t size;
    const char *numpy;  /* numpy dtype.str, or the V-part for opaque types */
    const char *torch;  /* torch name for opaque types, else NULL */
    const char *opaque; /* "<numpy>\0<torch>" for opaque types: constant, so
                           threads may ask for it at once */
    size_t opaque_len;
} dtype_row;
#define OPAQUE(d, name, size, np, t) {d, name, size, np, t, np "\0" t, sizeof(np "\0" t) - 1}

/* The order matches enum tzr_dtype. */
static const dtype_row rows[TZR_DTYPE_COUNT] = {
    {TZR_DTYPE_UNKNOWN, "unknown", 0, NULL, NULL, NULL, 0},
    {TZR_DTYPE_BOOL, "bool", 1, "|b1", NULL, NULL, 0},
    {TZR_DTYPE_U8, "u8", 1, "|u1", NULL, NULL, 0},
    {TZR_DTYPE_I8, "i8", 1, "|i1", NULL, NULL, 0},
    {TZR_DTYPE_U16, "u16", 2, "<u2", NULL, NULL, 0},
    {TZR_DTYPE_I16, "i16", 2, "<i2", NULL, NULL, 0},
    {TZR_DTYPE_U32, "u32", 4, "<u4", NULL, NULL, 0},
    {TZR_DTYPE_I32, "i32", 4, "<i4", NULL, NULL, 0},
    {TZR_DTYPE_U64, "u64", 8, "<u8", NULL, NULL, 0},
    {TZR_DTYPE_I64, "i64", 8, "<i8", NULL, NULL, 0},
    {TZR_DTYPE_F16, "f16", 2, "<f2", NULL, NULL, 0},
    OPAQUE(TZR_DTYPE_BF16, "bf16", 2, "<V2", "torch.bfloat16"),
    {TZR_DTYPE_F32, "f32", 4, "<f4", NULL, NULL, 0},
    {TZR_DTYPE_F64, "f64", 8, "<f8", NULL, NULL, 0},
    OPAQUE(TZR_DTYPE_C32, "c32", 4, "<V4", "torch.complex32"),
    {TZR_DTYPE_C64, "c64", 8, "<c8", NULL, NULL, 0},
    {TZR_DTYPE_C128, "c128", 16, "<c16", NULL, NULL, 0},
    OPAQUE(TZR_DTYPE_F8_E4M3FN, "f8_e4m3fn", 1, "|V1", "torch.float8_e4m3fn"),
    OPAQUE(TZR_DTYPE_F8_E5M2, "f8_e5m2", 1, "|V1", "torch.float8_e5m2"),
    OPAQUE(TZR_DTYPE_F8_E4M3FNUZ, "f8_e4m3fnuz", 1, "|V1", "torch.float8_e4m3fnuz"),
    OPAQUE(TZR_DTYPE_F8_E5M2FNUZ, "f8_e5m2fnuz", 1, "|V1", "torch.float8_e5m2fnuz"),
    OPAQUE(TZR_DTYPE_F8_E8M0FNU, "f8_e8m0fnu", 1, "|V1", "torch.float8_e8m0fnu"),
    OPAQUE(TZR_DTYPE_BITS8, "bits8", 1, "|V1", "torch.bits8"),
    OPAQUE(TZR_DTYPE_BITS16, "bits16", 2, "<V2", "torch.bits16"),
};

const char *tzr_dtype_string(tzr_dtype d, size_t *len) {
    if ((unsigned)d >= TZR_DTYPE_COUNT || d == TZR_DTYPE_UNKNOWN) return NULL;
    if (rows[d].opaque) {
        if (len) *len = rows[d].opaque_len;
        return rows[d].opaque;
    }
    if (len) *len = strlen(rows[d].numpy);
    return rows[d].numpy;
}

const char *tzr_dtype_name(tzr_dtype d) {
    return (unsigned)d < TZR_DTYPE_COUNT ? rows[d].name : "unknown";
}

uint32_t tzr_dtype_size(tzr_dtype d) { return (unsigned)d < TZR_DTYPE_COUNT ? rows[d].size : 0; }

/* numpy part: byte order [<>|=], kind letter, decimal item size. */
static int parse_numpy(const char *s, size_t len, uint32_t *itemsize) {
    if (len < 3 || len > 8) return 0;
    if (!strchr("<>|=", s[0])) return 0;
    if (!strchr("biufcV", s[1])) return 0;
    uint32_t v = 0;
    for (size_t i = 2; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (uint32_t)(s[i] - '0');
    }
    if (v == 0 || v > 64) return 0;
    *itemsize = v;
    return 1;
}

int tzr_dtype_parse(const char *str, size_t len, tzr_dtype *dtype, uint32_t *itemsize, int *opaque) {
    *dtype = TZR_DTYPE_UNKNOWN;
    *itemsize = 0;
    *opaque = 0;
    if (!str || len == 0) return tzr_fail(TZR_EFORMAT, "empty dtype string");
    const char *sep = memchr(str, 0, len);
    size_t np_len = sep ? (size_t)(sep - str) : len;
    if (!parse_numpy(str, np_len, itemsize))
        return tzr_fail(TZR_EFORMAT, "malformed dtype string");
    if (sep) {
        const char *torch = sep + 1;
        size_t tlen = len - np_len - 1;
        if (memchr(torch, 0, tlen)) return tzr_fail(TZR_EFORMAT, "dtype string has more than one NUL separator");
        if (str[1] != 'V') return tzr_fail(TZR_EFORMAT, "opaque dtype must have a void numpy part");
        if (tlen < 7 || memcmp(torch, "torch.", 6) != 0)
            return tzr_fail(TZR_EFORMAT, "opaque dtype must name a torch.* type");
        *opaque = 1;
        for (int d = 1; d < TZR_DTYPE_COUNT; d++) {
            if (rows[d].torch && strlen(rows[d].torch) == tlen && memcmp(rows[d].torch, torch, tlen) == 0) {
                if (rows[d].size != *itemsize)
                    return tzr_fail(TZR_EFORMAT, "opaque dtype %s with item size %u", rows[d].torch, *itemsize);
                *dtype = (tzr_dtype)d;
                break;
            }
        }
        /* torch.uint16/32/64 fall back to the opaque form in some torch
         * versions: same bytes as the numpy types. */
        static const struct { const char *t; tzr_dtype d; } alias[] = {
            {"torch.uint16", TZR_DTYPE_U16}, {"torch.uint32", TZR_DTYPE_U32}, {"torch.uint64", TZR_DTYPE_U64}};
        for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
            if (strlen(alias[i].t) == tlen && memcmp(alias[i].t, torch, tlen) == 0 &&
                rows[alias[i].d].size == *itemsize)
                *dtype = alias[i].d;
        return 0;
    }
    if (str[1] == 'V') return 0; /* plain void: raw bytes of unknown type */
    for (int d = 1; d < TZR_DTYPE_COUNT; d++) {
        if (rows[d].torch) continue;
        const char *np = rows[d].numpy;
        /* '<', '=' and '|' all mean native little-endian here. */
        if (strlen(np) == np_len && memcmp(np + 1, str + 1, np_len - 1) == 0 && str[0] != '>') {
            *dtype = (tzr_dtype)d;
            return 0;
        }
    }
    return 0; /* well-formed, unknown (for example big-endian) */
}
