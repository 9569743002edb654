/* safetensors reader and writer. Every expected value here is written out
 * by hand (byte strings from the format description and the reference
 * implementation's own tests), never computed by the code under test. */
#include "check.h"
#include "tzr_safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ helpers */

/* What a memory output leaves behind once the writer destroys it. */
typedef struct memres {
    unsigned char *buf;
    size_t len;
    int finished, aborted, destroyed;
    int fail_writes; /* make pwrite_at fail */
} memres;

typedef struct memout {
    tzr_output base;
    memres *res;
    unsigned char *buf;
    size_t len, cap;
} memout;

static int mo_pwrite(tzr_output *o, const void *p, size_t n, uint64_t off) {
    memout *m = (memout *)o;
    if (m->res->fail_writes) return TZR_EIO;
    size_t end = (size_t)off + n;
    if (end > m->cap) {
        size_t cap = m->cap ? m->cap : 64;
        while (cap < end) cap *= 2;
        unsigned char *b = realloc(m->buf, cap);
        if (!b) return TZR_ENOMEM;
        memset(b + m->cap, 0xEE, cap - m->cap); /* unwritten bytes are visible */
        m->buf = b;
        m->cap = cap;
    }
    memcpy(m->buf + off, p, n);
    if (end > m->len) m->len = end;
    return 0;
}
static int mo_finish(tzr_output *o) {
    ((memout *)o)->res->finished = 1;
    return 0;
}
static void mo_abort(tzr_output *o) { ((memout *)o)->res->aborted = 1; }
static void mo_destroy(tzr_output *o) {
    memout *m = (memout *)o;
    m->res->destroyed = 1;
    m->res->buf = m->buf;
    m->res->len = m->len;
    free(m);
}
static tzr_output *memout_new(memres *res) {
    memset(res, 0, sizeof *res);
    memout *m = calloc(1, sizeof *m);
    m->res = res;
    m->base.pwrite_at = mo_pwrite;
    m->base.finish = mo_finish;
    m->base.abort = mo_abort;
    m->base.destroy = mo_destroy;
    m->base.name = "mem";
    return &m->base;
}

/* 8-byte little-endian N, then the header bytes, then data. */
static unsigned char *build(uint64_t n, const char *hdr, size_t hdr_len, const void *data,
                            size_t data_len, size_t *out_len) {
    unsigned char *b = malloc(8 + hdr_len + data_len + 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n >> (8 * i));
    memcpy(b + 8, hdr, hdr_len);
    if (data_len) {
        if (data) memcpy(b + 8 + hdr_len, data, data_len);
        else memset(b + 8 + hdr_len, 0, data_len);
    }
    *out_len = 8 + hdr_len + data_len;
    return b;
}

static const char *tmp_path(const char *name) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", check_tmpdir(), name);
    return buf;
}

/* Write the given tensors (data_i = byte pattern (i*31 + k) & 0xff) with one
 * put per tensor; returns the writer's close code. */
static unsigned char pattern(size_t i, uint64_t k) { return (unsigned char)((i * 31 + k) & 0xff); }

static int write_pattern(tzr_output *o, const tzr_st_tensor *t, size_t n, const char *const *mk,
                         const char *const *mv, size_t nm) {
    tzr_st_writer *w;
    int rc = tzr_st_writer_open(&w, o, t, n, mk, mv, nm);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        unsigned char *d = malloc(t[i].nbytes ? t[i].nbytes : 1);
        for (uint64_t k = 0; k < t[i].nbytes; k++) d[k] = pattern(i, k);
        rc = tzr_st_writer_put(w, i, 0, d, t[i].nbytes);
        free(d);
        if (rc) {
            tzr_st_writer_abort(w);
            return rc;
        }
    }
    return tzr_st_writer_close(w);
}

/* ------------------------------------------------------------ dtypes */

/* The safetensors names, our enum and item sizes, from the format. */
static const struct {
    const char *st;
    tzr_dtype d;
    uint32_t size;
} DT[] = {
    {"BOOL", TZR_DTYPE_BOOL, 1},       {"U8", TZR_DTYPE_U8, 1},
    {"I8", TZR_DTYPE_I8, 1},           {"I16", TZR_DTYPE_I16, 2},
    {"U16", TZR_DTYPE_U16, 2},         {"F16", TZR_DTYPE_F16, 2},
    {"BF16", TZR_DTYPE_BF16, 2},       {"I32", TZR_DTYPE_I32, 4},
    {"U32", TZR_DTYPE_U32, 4},         {"F32", TZR_DTYPE_F32, 4},
    {"F64", TZR_DTYPE_F64, 8},         {"I64", TZR_DTYPE_I64, 8},
    {"U64", TZR_DTYPE_U64, 8},         {"F8_E4M3", TZR_DTYPE_F8_E4M3FN, 1},
    {"F8_E5M2", TZR_DTYPE_F8_E5M2, 1}, {"F8_E8M0", TZR_DTYPE_F8_E8M0FNU, 1},
    {"C64", TZR_DTYPE_C64, 8},
};
#define NDT (sizeof DT / sizeof DT[0])

static void dtype_tables(void) {
    for (size_t i = 0; i < NDT; i++) {
        const char *s = tzr_st_dtype_name(DT[i].d);
        CHECK(s && strcmp(s, DT[i].st) == 0);
        tzr_dtype d = TZR_DTYPE_UNKNOWN;
        CHECK_OK(tzr_st_dtype_parse(DT[i].st, &d));
        CHECK(d == DT[i].d);
    }
    const tzr_dtype none[] = {TZR_DTYPE_UNKNOWN, TZR_DTYPE_C32, TZR_DTYPE_C128,
                              TZR_DTYPE_F8_E4M3FNUZ, TZR_DTYPE_F8_E5M2FNUZ, TZR_DTYPE_BITS8,
                              TZR_DTYPE_BITS16, TZR_DTYPE_COUNT};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) CHECK(tzr_st_dtype_name(none[i]) == NULL);
    const char *bad[] = {"F4", "F6_E2M3", "F6_E3M2", "f32", "", "F32 ", "float32"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tzr_dtype d = TZR_DTYPE_F32;
        CHECK_RC(tzr_st_dtype_parse(bad[i], &d), TZR_ENOTSUP);
        CHECK(d == TZR_DTYPE_UNKNOWN);
    }
    CHECK(strstr(tzr_last_error(), "float32") != NULL);
}

/* ------------------------------------------------------------ golden bytes */

/* The reference serializer's test vectors: one F32 [1,2,3] tensor named
 * "attn.0" holding 0..5 (a 64-byte header, no padding needed) ... */
static const unsigned char ATTN_DOT0[] =
    "\x40\0\0\0\0\0\0\0"
    "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}"
    "\x00\x00\x00\x00" "\x00\x00\x80\x3f" "\x00\x00\x00\x40"
    "\x00\x00\x40\x40" "\x00\x00\x80\x40" "\x00\x00\xa0\x40";
/* ... "attn0" as [1,1,2,3]: 65 bytes of JSON padded to 72 ... */
static const unsigned char ATTN0[] =
    "\x48\0\0\0\0\0\0\0"
    "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}       "
    "\x00\x00\x00\x00" "\x00\x00\x80\x3f" "\x00\x00\x00\x40"
    "\x00\x00\x40\x40" "\x00\x00\x80\x40" "\x00\x00\xa0\x40";
/* ... no tensors, and no tensors with metadata framework=pt. */
static const unsigned char EMPTY[] = "\x08\0\0\0\0\0\0\0{}      ";
static const unsigned char EMPTY_META[] = "\x28\0\0\0\0\0\0\0{\"__metadata__\":{\"framework\":\"pt\"}}     ";

static const float ZERO_TO_FIVE[6] = {0, 1, 2, 3, 4, 5};

static void golden_writer(void) {
    static const uint64_t s123[] = {1, 2, 3}, s1123[] = {1, 1, 2, 3};
    struct {
        const char *name;
        const uint64_t *shape;
        uint32_t ndim;
        const unsigned char *want;
        size_t want_len;
    } g[] = {
        {"attn.0", s123, 3, ATTN_DOT0, sizeof ATTN_DOT0 - 1},
        {"attn0", s1123, 4, ATTN0, sizeof ATTN0 - 1},
    };
    CHECK(sizeof ATTN_DOT0 - 1 == 8 + 64 + 24);
    CHECK(sizeof ATTN0 - 1 == 8 + 72 + 24);
    for (size_t i = 0; i < 2; i++) {
        memres r;
        tzr_st_tensor t = {.name = g[i].name, .name_len = strlen(g[i].name), .dtype = TZR_DTYPE_F32,
                           .ndim = g[i].ndim, .shape = g[i].shape, .nbytes = 24};
        tzr_st_writer *w;
        CHECK_OK(tzr_st_writer_open(&w, memout_new(&r), &t, 1, NULL, NULL, 0));
        CHECK_OK(tzr_st_writer_put(w, 0, 0, ZERO_TO_FIVE, 24));
        CHECK_OK(tzr_st_writer_close(w));
        CHECK(r.finished && r.destroyed && !r.aborted);
        CHECK(r.len == g[i].want_len && memcmp(r.buf, g[i].want, r.len) == 0);
        free(r.buf);
    }
    memres r;
    CHECK_OK(write_pattern(memout_new(&r), NULL, 0, NULL, NULL, 0));
    CHECK(r.len == 16 && memcmp(r.buf, EMPTY, 16) == 0);
    free(r.buf);
    const char *k[] = {"framework"}, *v[] = {"pt"};
    CHECK_OK(write_pattern(memout_new(&r), NULL, 0, k, v, 1));
    CHECK(r.len == 48 && memcmp(r.buf, EMPTY_META, 48) == 0);
    free(r.buf);
}

static void golden_reader(void) {
    tzr_st_file *f;
    CHECK_OK(tzr_st_parse(&f, ATTN_DOT0, sizeof ATTN_DOT0 - 1, "attn.safetensors"));
    if (!f) return;
    CHECK(tzr_st_count(f) == 1);
    const tzr_st_tensor *t = tzr_st_get(f, 0);
    CHECK(t && strcmp(t->name, "attn.0") == 0 && t->name_len == 6);
    CHECK(t && strcmp(t->st_dtype, "F32") == 0 && t->dtype == TZR_DTYPE_F32);
    CHECK(t && t->ndim == 3 && t->shape[0] == 1 && t->shape[1] == 2 && t->shape[2] == 3);
    CHECK(t && t->data_offset == 72 && t->nbytes == 24);
    CHECK(tzr_st_data(f, 0) == (const void *)(ATTN_DOT0 + 72));
    CHECK(memcmp(tzr_st_data(f, 0), ZERO_TO_FIVE, 24) == 0);
    CHECK(tzr_st_get(f, 1) == NULL && tzr_st_data(f, 1) == NULL);
    CHECK(tzr_st_metadata_count(f) == 0);
    tzr_st_free(f);

    CHECK_OK(tzr_st_parse(&f, EMPTY_META, sizeof EMPTY_META - 1, NULL));
    if (!f) return;
    CHECK(tzr_st_count(f) == 0 && tzr_st_metadata_count(f) == 1);
    const char *k = NULL, *v = NULL;
    CHECK_OK(tzr_st_metadata_get(f, 0, &k, &v));
    CHECK(k && v && strcmp(k, "framework") == 0 && strcmp(v, "pt") == 0);
    CHECK_RC(tzr_st_metadata_get(f, 1, &k, &v), TZR_EINVAL);
    tzr_st_free(f);

    tzr_st_free(NULL);
    CHECK(tzr_st_count(NULL) == 0 && tzr_st_get(NULL, 0) == NULL);
}

/* ------------------------------------------------------------ round trips */

static void roundtrip_all_dtypes(void) {
    static const uint64_t shape[] = {2, 3};
    char names[NDT][16];
    tzr_st_tensor t[NDT];
    for (size_t i = 0; i < NDT; i++) {
        snprintf(names[i], sizeof names[i], "t_%s", DT[i].st);
        t[i] = (tzr_st_tensor){.name = names[i], .name_len = strlen(names[i]), .dtype = DT[i].d,
                               .ndim = 2, .shape = shape, .nbytes = 6 * DT[i].size};
    }
    const char *path = tmp_path("all.safetensors");
    tzr_output *o;
    CHECK_OK(tzr_output_open_file(&o, path));
    CHECK_OK(write_pattern(o, t, NDT, NULL, NULL, 0));

    size_t len = 0;
    unsigned char *raw = check_read_file(path, &len);
    CHECK(raw && len > 8);
    uint64_t n = 0;
    for (int i = 0; raw && i < 8; i++) n |= (uint64_t)raw[i] << (8 * i);
    CHECK(n % 8 == 0);
    CHECK(raw && raw[8] == '{' && raw[8 + n - 1] != 0);
    /* Total data = 6 elements of every size: 6*(1+1+1+2+2+2+2+4+4+4+8+8+8+1+1+1+8) = 348. */
    CHECK(len == 8 + n + 348);

    tzr_st_file *f;
    CHECK_OK(tzr_st_open(&f, path));
    if (!f) {
        free(raw);
        return;
    }
    CHECK(tzr_st_count(f) == NDT);
    uint64_t off = 8 + n;
    for (size_t i = 0; i < NDT && i < tzr_st_count(f); i++) {
        const tzr_st_tensor *r = tzr_st_get(f, i);
        CHECK(strcmp(r->name, names[i]) == 0);
        CHECK(strcmp(r->st_dtype, DT[i].st) == 0 && r->dtype == DT[i].d);
        CHECK(r->ndim == 2 && r->shape[0] == 2 && r->shape[1] == 3);
        CHECK(r->nbytes == 6 * DT[i].size);
        CHECK(r->data_offset == off); /* contiguous, in the given order */
        off += r->nbytes;
        const unsigned char *d = tzr_st_data(f, i);
        int same = 1;
        for (uint64_t k = 0; k < r->nbytes; k++) same &= d[k] == pattern(i, k);
        CHECK(same);
        size_t idx = 99;
        CHECK_OK(tzr_st_find(f, names[i], strlen(names[i]), &idx));
        CHECK(idx == i);
    }
    size_t idx;
    CHECK_RC(tzr_st_find(f, "t_F3", 4, &idx), TZR_ENOTFOUND);
    CHECK_RC(tzr_st_find(f, "t_F32x", 6, &idx), TZR_ENOTFOUND);
    tzr_st_free(f);
    free(raw);
}

static void scalars_and_empty_tensors(void) {
    static const uint64_t s0[] = {0}, s302[] = {3, 0, 2}, sbig0[] = {4611686018427387904ULL, 0};
    tzr_st_tensor t[] = {
        {.name = "scalar", .name_len = 6, .dtype = TZR_DTYPE_F64, .ndim = 0, .nbytes = 8},
        {.name = "e", .name_len = 1, .dtype = TZR_DTYPE_F32, .ndim = 1, .shape = s0, .nbytes = 0},
        {.name = "e2", .name_len = 2, .dtype = TZR_DTYPE_BF16, .ndim = 3, .shape = s302, .nbytes = 0},
        {.name = "big0", .name_len = 4, .dtype = TZR_DTYPE_U8, .ndim = 2, .shape = sbig0, .nbytes = 0},
        {.name = "b", .name_len = 1, .dtype = TZR_DTYPE_BOOL, .ndim = 0, .nbytes = 1},
    };
    const char *path = tmp_path("scalars.safetensors");
    tzr_output *o;
    CHECK_OK(tzr_output_open_file(&o, path));
    CHECK_OK(write_pattern(o, t, 5, NULL, NULL, 0));
    tzr_st_file *f;
    CHECK_OK(tzr_st_open(&f, path));
    if (!f) return;
    CHECK(tzr_st_count(f) == 5);
    /* File order: scalar [0,8], e [8,8], e2 [8,8], big0 [8,8], b [8,9]:
     * the ties at 8 keep JSON (= given) order. */
    const char *want[] = {"scalar", "e", "e2", "big0", "b"};
    const uint64_t want_nb[] = {8, 0, 0, 0, 1};
    for (size_t i = 0; i < 5; i++) {
        const tzr_st_tensor *r = tzr_st_get(f, i);
        CHECK(strcmp(r->name, want[i]) == 0 && r->nbytes == want_nb[i]);
        CHECK(tzr_st_data(f, i) != NULL);
    }
    CHECK(tzr_st_get(f, 0)->ndim == 0 && tzr_st_get(f, 4)->ndim == 0);
    CHECK(tzr_st_get(f, 3)->ndim == 2 && tzr_st_get(f, 3)->shape[0] == 4611686018427387904ULL);
    CHECK(tzr_st_get(f, 4)->data_offset == tzr_st_get(f, 0)->data_offset + 8);
    tzr_st_free(f);

    /* A file whose tensors are all empty has no data region at all. */
    tzr_st_tensor z[] = {t[1], t[2]};
    path = tmp_path("only_empty.safetensors");
    CHECK_OK(tzr_output_open_file(&o, path));
    CHECK_OK(write_pattern(o, z, 2, NULL, NULL, 0));
    CHECK_OK(tzr_st_open(&f, path));
    CHECK(f && tzr_st_count(f) == 2);
    tzr_st_free(f);

    /* An empty file. */
    path = tmp_path("empty.safetensors");
    CHECK(check_write_file(path, "", 0) == 0);
    f = (tzr_st_file *)1;
    CHECK_RC(tzr_st_open(&f, path), TZR_ETRUNC);
    CHECK(f == NULL);
    CHECK(strstr(tzr_last_error(), "empty.safetensors") != NULL);
    CHECK_RC(tzr_st_open(&f, tmp_path("missing.safetensors")), TZR_EIO);
    CHECK_RC(tzr_st_open(&f, check_tmpdir()), TZR_EINVAL);
}

static void metadata_and_escaping(void) {
    /* Name with a quote, backslash, newline, control byte, é and '/'. */
    static const char name[] = "a\"b\\c\n\x01\xc3\xa9/";
    static const uint64_t s2[] = {2};
    tzr_st_tensor t[] = {
        {.name = name, .name_len = sizeof name - 1, .dtype = TZR_DTYPE_I16, .ndim = 1, .shape = s2, .nbytes = 4},
        {.name = "w", .name_len = 1, .dtype = TZR_DTYPE_U8, .ndim = 1, .shape = s2, .nbytes = 2},
    };
    const char *mk[] = {"format", "quote\"key", "", "tab"};
    const char *mv[] = {"pt", "line\nvalue", "empty key", "a\tb\x1f"};
    memres r;
    CHECK_OK(write_pattern(memout_new(&r), t, 2, mk, mv, 4));
    static const char want[] =
        "{\"__metadata__\":{\"format\":\"pt\",\"quote\\\"key\":\"line\\nvalue\",\"\":\"empty key\","
        "\"tab\":\"a\\tb\\u001f\"},"
        "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9/\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[0,4]},"
        "\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}";
    /* 215 bytes of JSON, padded to 216. */
    CHECK(sizeof want - 1 == 215);
    CHECK(r.len == 8 + 216 + 6);
    CHECK(r.buf && r.buf[0] == 216 && r.buf[1] == 0);
    CHECK(r.buf && memcmp(r.buf + 8, want, 215) == 0);
    CHECK(r.buf && r.buf[8 + 215] == ' ');

    tzr_st_file *f;
    CHECK_OK(tzr_st_parse(&f, r.buf, r.len, "meta"));
    if (f) {
        CHECK(tzr_st_count(f) == 2);
        CHECK(tzr_st_get(f, 0)->name_len == sizeof name - 1 &&
              memcmp(tzr_st_get(f, 0)->name, name, sizeof name) == 0);
        CHECK(tzr_st_metadata_count(f) == 4);
        for (size_t i = 0; i < 4; i++) {
            const char *k, *v;
            CHECK_OK(tzr_st_metadata_get(f, i, &k, &v));
            CHECK(strcmp(k, mk[i]) == 0 && strcmp(v, mv[i]) == 0);
        }
        size_t idx;
        CHECK_OK(tzr_st_find(f, name, sizeof name - 1, &idx));
        CHECK(idx == 0);
        tzr_st_free(f);
    }
    free(r.buf);
}

/* JSON order y, b, a, z; data order a [0,8], then y, b, z at 8 (y and z
 * are empty): file order is a, y, b, z. Also: padding before and after
 * the JSON, a gap before c, trailing bytes, and an unknown field. */
static void file_order_vs_json_order(void) {
    static const char hdr[] =
        "  {\"y\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[8,16],\"extra\":[1]},"
        "\"a\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
        "\"c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[20,21]},"
        "\"z\":{\"dtype\":\"BF16\",\"shape\":[0,5],\"data_offsets\":[8,8]}}   ";
    unsigned char data[24];
    for (int i = 0; i < 24; i++) data[i] = (unsigned char)(100 + i);
    size_t len;
    unsigned char *b = build(sizeof hdr - 1, hdr, sizeof hdr - 1, data, 24, &len);
    tzr_st_file *f;
    CHECK_OK(tzr_st_parse(&f, b, len, "order"));
    if (f) {
        const char *want[] = {"a", "y", "b", "z", "c"};
        const uint64_t want_off[] = {0, 8, 8, 8, 20};
        CHECK(tzr_st_count(f) == 5);
        for (size_t i = 0; i < 5; i++) {
            const tzr_st_tensor *t = tzr_st_get(f, i);
            CHECK(strcmp(t->name, want[i]) == 0);
            CHECK(t->data_offset == 8 + (sizeof hdr - 1) + want_off[i]);
        }
        CHECK(((const unsigned char *)tzr_st_data(f, 2))[0] == 108);
        CHECK(((const unsigned char *)tzr_st_data(f, 4))[0] == 120);
        CHECK(tzr_st_get(f, 0)->ndim == 0 && tzr_st_get(f, 0)->dtype == TZR_DTYPE_I64);
        tzr_st_free(f);
    }
    free(b);
}

/* ------------------------------------------------------------ corrupt input */

typedef struct bad_case {
    const char *label;
    const char *hdr; /* JSON bytes (NULL: raw below) */
    size_t hdr_len;  /* 0: strlen(hdr) */
    int n_mode;      /* 0: N = header length, 1: N = n below */
    uint64_t n;
    size_t data_len;
    int want;
    const char *msg1, *msg2; /* substrings of the message (or NULL) */
} bad_case;

#define W1(d, s, o) "{\"w\":{\"dtype\":\"" d "\",\"shape\":" s ",\"data_offsets\":" o "}}"

static const bad_case BAD[] = {
    {"header_past_eof", "{}", 0, 1, 100, 0, TZR_ETRUNC, "bad.st", "header length 100"},
    {"huge_header_len", "{}", 0, 1, 0xFFFFFFFFFFFFFFFFULL, 0, TZR_ELIMIT, "18446744073709551615", NULL},
    {"header_over_cap", "{}", 0, 1, 104857601, 0, TZR_ELIMIT, "104857601", NULL},
    {"zero_header_len", "", 0, 1, 0, 0, TZR_EFORMAT, "bad.st", NULL},
    {"not_object", "[]", 0, 0, 0, 0, TZR_EFORMAT, "array, not an object", NULL},
    {"string_top", "\"w\"", 0, 0, 0, 0, TZR_EFORMAT, "bad.st", NULL},
    {"bad_dtype", W1("F33", "[1]", "[0,4]"), 0, 0, 0, 4, TZR_ENOTSUP, "tensor 'w'", "'F33'"},
    {"f4_dtype", W1("F4", "[2]", "[0,1]"), 0, 0, 0, 1, TZR_ENOTSUP, "tensor 'w'", "'F4'"},
    {"lowercase_dtype", W1("f32", "[1]", "[0,4]"), 0, 0, 0, 4, TZR_ENOTSUP, "tensor 'w'", "'f32'"},
    {"negative_dim", W1("F32", "[-1]", "[0,0]"), 0, 0, 0, 0, TZR_EFORMAT, "tensor 'w'", "shape[0]"},
    {"float_dim", W1("F32", "[2.0]", "[0,8]"), 0, 0, 0, 8, TZR_EFORMAT, "tensor 'w'", "shape[0]"},
    {"string_dim", W1("F32", "[1,\"2\"]", "[0,8]"), 0, 0, 0, 8, TZR_EFORMAT, "tensor 'w'", "shape[1]"},
    {"offsets_past_end", W1("F32", "[2]", "[0,8]"), 0, 0, 0, 4, TZR_ETRUNC, "tensor 'w'", "[0, 8]"},
    {"offsets_reversed", W1("F32", "[1]", "[8,4]"), 0, 0, 0, 8, TZR_EFORMAT, "tensor 'w'", "[8, 4]"},
    {"negative_offset", W1("F32", "[1]", "[-4,0]"), 0, 0, 0, 8, TZR_EFORMAT, "tensor 'w'", "data_offsets"},
    {"three_offsets", W1("F32", "[1]", "[0,4,8]"), 0, 0, 0, 8, TZR_EFORMAT, "tensor 'w'", "data_offsets"},
    {"offsets_not_array", W1("F32", "[1]", "4"), 0, 0, 0, 8, TZR_EFORMAT, "tensor 'w'", "data_offsets"},
    {"overlap",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     0, 0, 0, 12, TZR_EFORMAT, "tensor 'b'", "overlap tensor 'a' [0, 8]"},
    {"overlap_inside",
     "{\"big\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]},"
     "\"mid\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[8,10]},"
     "\"end\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[12,14]}}",
     0, 0, 0, 16, TZR_EFORMAT, "tensor 'mid'", "'big'"},
    {"size_mismatch", W1("F32", "[2,3]", "[0,12]"), 0, 0, 0, 24, TZR_EFORMAT,
     "bad.st: tensor 'w'", "data_offsets [0, 12] disagree with shape [2,3] F32 (24 bytes)"},
    {"numel_overflow", W1("U8", "[4294967296,4294967296]", "[0,0]"), 0, 0, 0, 0, TZR_EFORMAT,
     "tensor 'w'", "2^64 elements"},
    {"bytes_overflow", W1("F32", "[4611686018427387904]", "[0,0]"), 0, 0, 0, 0, TZR_EFORMAT,
     "tensor 'w'", "2^64 bytes"},
    {"duplicate_name",
     "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
     "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
     0, 0, 0, 2, TZR_EDUP, "\"w\"", NULL},
    {"duplicate_field", "{\"w\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
     0, 0, 0, 1, TZR_EDUP, "\"dtype\"", NULL},
    {"missing_dtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 0, 0, 0, 1, TZR_EFORMAT,
     "tensor 'w'", "missing field 'dtype'"},
    {"missing_shape", "{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 0, 0, 0, 1, TZR_EFORMAT,
     "tensor 'w'", "missing field 'shape'"},
    {"missing_offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", 0, 0, 0, 1, TZR_EFORMAT,
     "tensor 'w'", "missing field 'data_offsets'"},
    {"dtype_number", "{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,1]}}", 0, 0, 0, 1,
     TZR_EFORMAT, "tensor 'w'", "'dtype' is a JSON integer"},
    {"shape_not_array", W1("U8", "1", "[0,1]"), 0, 0, 0, 1, TZR_EFORMAT, "tensor 'w'", "'shape'"},
    {"entry_not_object", "{\"w\":5}", 0, 0, 0, 0, TZR_EFORMAT, "tensor 'w'", "not an object"},
    {"empty_name", "{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 0, 0, 0, 1,
     TZR_EFORMAT, "tensor ''", "empty tensor name"},
    {"trailing_garbage", "{} x", 0, 0, 0, 0, TZR_EFORMAT, "near byte 12", NULL},
    {"syntax_error", "{\"a\" 1}", 0, 0, 0, 0, TZR_EFORMAT, "near byte 14", "line 1"},
    {"nul_padding", "{}\0\0\0\0\0\0", 8, 0, 0, 0, TZR_EFORMAT, "bad.st", NULL},
    {"nul_in_name", "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 0, 0,
     0, 1, TZR_EFORMAT, "bad.st", NULL},
    {"bad_utf8_name", "{\"w\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 0, 0, 0,
     1, TZR_EFORMAT, "bad.st", NULL},
    {"int_too_big", W1("U8", "[1]", "[0,18446744073709551616]"), 0, 0, 0, 1, TZR_EFORMAT, "bad.st", NULL},
    {"metadata_not_object", "{\"__metadata__\":[]}", 0, 0, 0, 0, TZR_EFORMAT, "'__metadata__'", NULL},
    {"metadata_value_number", "{\"__metadata__\":{\"k\":1}}", 0, 0, 0, 0, TZR_EFORMAT,
     "'__metadata__' key 'k'", NULL},
    {"header_cut_short", "{\"w\":{\"dtype\":\"U8\",\"sha", 0, 0, 0, 0, TZR_EFORMAT, "bad.st", NULL},
};

/* The usual entry form is read without a JSON tree; every other valid
 * form (fields reordered, spaced, an extra field, an escaped dtype, a
 * 19-digit number) goes through jansson. Both must give the same table. */
static void fast_and_tree_agree(void) {
    static const char *jsons[] = {
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[24,25]}}",
        "{ \"a\" : { \"shape\" : [ 2 , 3 ] ,\n \"data_offsets\":[0, 24], \"dtype\": \"F32\" } ,"
        "\"b\":{\"data_offsets\":[24,25],\"shape\":[],\"dtype\":\"U8\"} }",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24],\"x\":1},"
        "\"b\":{\"dtype\":\"\\u0055\\u0038\",\"shape\":[],\"data_offsets\":[24,25]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0000000000000000024,25]}}",
        /* the writers' form read by literal pieces (since #23), and forms
         * that leave it late: a space before data_offsets, a field after */
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3], \"data_offsets\":[0,24]},"
        "\"b\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[24,25],\"x\":{}}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24] },"
        "\"b\":{\"dtype\":\"U\\u0038\",\"shape\":[],\"data_offsets\":[24,25]}}",
    };
    for (size_t k = 0; k < sizeof jsons / sizeof jsons[0]; k++) {
        size_t jl = strlen(jsons[k]), len = 8 + jl + 25;
        unsigned char *b = calloc(1, len);
        for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)jl >> (8 * i));
        memcpy(b + 8, jsons[k], jl);
        tzr_st_file *f = NULL;
        int rc = tzr_st_parse(&f, b, len, "agree");
        if (k == 3) { /* leading zeros are not JSON: refused by the tree parse too */
            CHECKF(rc == TZR_EFORMAT, "form %zu: %d %s", k, rc, tzr_last_error());
            free(b);
            continue;
        }
        CHECKF(rc == 0, "form %zu: %s", k, tzr_last_error());
        if (f) {
            CHECK(tzr_st_count(f) == 2);
            const tzr_st_tensor *a = tzr_st_get(f, 0), *c = tzr_st_get(f, 1);
            CHECK(a && a->name_len == 1 && a->name[0] == 'a' && a->ndim == 2 && a->shape[0] == 2 &&
                  a->shape[1] == 3 && a->nbytes == 24 && a->data_offset == 8 + jl && strcmp(a->st_dtype, "F32") == 0);
            CHECK(c && c->name_len == 1 && c->name[0] == 'b' && c->ndim == 0 && c->nbytes == 1 &&
                  c->data_offset == 8 + jl + 24 && strcmp(c->st_dtype, "U8") == 0);
            tzr_st_free(f);
        }
        free(b);
    }
}

/* Many entries: every name is found at its file-order index whatever the
 * JSON order (the name table is a hash table since #23), an absent one is
 * not, and a duplicate far from its twin is refused with its name. */
static void many_names(void) {
    enum { N = 5000 };
    size_t cap = (size_t)N * 80 + 16;
    char *json = malloc(cap);
    for (int form = 0; form < 3; form++) {
        size_t jl = 0;
        json[jl++] = '{';
        for (int k = 0; k < N; k++) {
            /* form 1 lists the tensors in reverse file order */
            int i = form == 1 ? N - 1 - k : k;
            /* form 2 names the last tensor as the first */
            int nm = form == 2 && i == N - 1 ? 0 : i;
            jl += (size_t)snprintf(json + jl, cap - jl, "%s\"n.%d\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[%d,%d]}",
                                   k ? "," : "", nm, i, i + 1);
        }
        json[jl++] = '}';
        size_t len = 8 + jl + N;
        unsigned char *b = calloc(1, len);
        for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)jl >> (8 * i));
        memcpy(b + 8, json, jl);
        tzr_st_file *f = NULL;
        int rc = tzr_st_parse(&f, b, len, "many");
        if (form == 2) {
            CHECKF(rc == TZR_EDUP && strstr(tzr_last_error(), "duplicate tensor name \"n.0\""), "%d %s", rc,
                   tzr_last_error());
            CHECK(f == NULL);
            free(b);
            continue;
        }
        CHECKF(rc == 0, "form %d: %s", form, tzr_last_error());
        if (f) {
            CHECK(tzr_st_count(f) == N);
            int bad = 0;
            for (int i = 0; i < N; i++) {
                char name[16];
                snprintf(name, sizeof name, "n.%d", i);
                size_t idx = (size_t)-1;
                const tzr_st_tensor *t = tzr_st_get(f, (size_t)i);
                bad |= tzr_st_find(f, name, strlen(name), &idx) != 0 || idx != (size_t)i || !t ||
                       strcmp(t->name, name) != 0 || t->data_offset != 8 + jl + (uint64_t)i ||
                       t->ndim != 1 || t->shape[0] != 1;
            }
            CHECK(!bad);
            size_t idx;
            CHECK_RC(tzr_st_find(f, "n.5000", 6, &idx), TZR_ENOTFOUND);
            CHECK_RC(tzr_st_find(f, "n.", 2, &idx), TZR_ENOTFOUND);
            CHECK_RC(tzr_st_find(f, "", 0, &idx), TZR_ENOTFOUND);
            tzr_st_free(f);
        }
        free(b);
    }
    free(json);
}

/* Through the reader: each tensor keeps its own dtype, item size, dtype
 * string, name and shape when dtypes alternate (the reader parses a dtype
 * string once per run of equal dtypes and keeps the parse's names and
 * shapes since #23), whatever the JSON order. */
static void reader_mixed_dtypes(void) {
    static const char *jsons[] = {
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[8,14]},"
        "\"cc\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[14,16]},"
        "\"d\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[16,17]},"
        "\"e\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[17,21]}}",
        "{\"e\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[17,21]},"
        "\"d\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[16,17]},"
        "\"cc\":{\"dtype\":\"BF16\",\"shape\":[1],\"x\":0,\"data_offsets\":[14,16]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[8,14]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
    };
    static const struct {
        const char *name, *dstr;
        size_t dlen;
        tzr_dtype d;
        uint32_t itemsize, ndim;
        uint64_t shape0, numel;
        int opaque;
    } want[] = {
        {"a", "<f4", 3, TZR_DTYPE_F32, 4, 1, 2, 2, 0},
        {"b", "<V2\0torch.bfloat16", 18, TZR_DTYPE_BF16, 2, 1, 3, 3, 1},
        {"cc", "<V2\0torch.bfloat16", 18, TZR_DTYPE_BF16, 2, 1, 1, 1, 1},
        {"d", "|u1", 3, TZR_DTYPE_U8, 1, 0, 0, 1, 0},
        {"e", "<f4", 3, TZR_DTYPE_F32, 4, 2, 1, 1, 0},
    };
    for (size_t k = 0; k < 2; k++) {
        size_t jl = strlen(jsons[k]), len = 8 + jl + 21;
        unsigned char *b = calloc(1, len);
        for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)jl >> (8 * i));
        memcpy(b + 8, jsons[k], jl);
        tzr_source *src = NULL;
        tzr_reader *r = NULL;
        CHECK_OK(tzr_source_open_memory(&src, b, len, "mixed"));
        CHECKF(tzr_reader_open_source(&r, src, NULL) == 0, "form %zu: %s", k, tzr_last_error());
        if (r) {
            CHECK(tzr_reader_count(r) == 5);
            for (size_t i = 0; i < 5 && i < tzr_reader_count(r); i++) {
                const tzr_tensor_info *t = tzr_reader_tensor(r, i);
                CHECKF(strcmp(t->name, want[i].name) == 0 && t->name_len == strlen(want[i].name) &&
                           t->dtype == want[i].d && t->itemsize == want[i].itemsize &&
                           t->dtype_len == want[i].dlen && memcmp(t->dtype_str, want[i].dstr, want[i].dlen + 1) == 0 &&
                           t->opaque == want[i].opaque && t->ndim == want[i].ndim &&
                           (t->ndim == 0 || t->shape[0] == want[i].shape0) && t->numel == want[i].numel &&
                           t->nbytes == want[i].numel * want[i].itemsize,
                       "form %zu tensor %zu", k, i);
            }
            CHECK(tzr_reader_tensor(r, 4)->shape[1] == 1);
            tzr_reader_free(r);
        }
        free(b);
    }
}

/* The reader's table is filled by the parse directly (#23): each tensor's
 * info must be what the header says, in file order (data offset, then
 * JSON order for tensors at one offset), whatever the JSON order. The
 * expected values are read off the literal header below, not computed. */
static void reader_table_is_the_header(void) {
    /* JSON order: z (empty, at 16), w, e (empty, at 16), m, s; file order
     * m [0,6), w [6,16), z and e at 16 (JSON order), s [16,24). */
    static const char hdr[] =
        "{\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[16,16]},"
        "\"w\":{\"dtype\":\"F16\",\"shape\":[5],\"data_offsets\":[6,16]},"
        "\"__metadata__\":{\"format\":\"pt\"},"
        "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[16,16]},"
        "\"m\":{\"shape\":[2,3],\"dtype\":\"U8\",\"data_offsets\":[0,6]},"
        "\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[16,24]}}";
    static const struct {
        const char *name;
        tzr_dtype d;
        uint32_t ndim;
        uint64_t shape[2], numel, nbytes, off; /* off: in the data region */
        const char *dstr; /* its tensorizer dtype string */
        uint32_t itemsize;
    } want[] = {
        {"m", TZR_DTYPE_U8, 2, {2, 3}, 6, 6, 0, "|u1", 1},
        {"w", TZR_DTYPE_F16, 1, {5, 0}, 5, 10, 6, "<f2", 2},
        {"z", TZR_DTYPE_F32, 2, {0, 3}, 0, 0, 16, "<f4", 4},
        {"e", TZR_DTYPE_U8, 1, {0, 0}, 0, 0, 16, "|u1", 1},
        {"s", TZR_DTYPE_I64, 0, {0, 0}, 1, 8, 16, "<i8", 8},
    };
    size_t hl = sizeof hdr - 1, len;
    unsigned char *b = build(hl, hdr, hl, NULL, 24, &len);
    tzr_source *src = NULL;
    tzr_reader *r = NULL;
    CHECK_OK(tzr_source_open_memory(&src, b, len, "table"));
    CHECKF(tzr_reader_open_source(&r, src, NULL) == 0, "%s", tzr_last_error());
    if (r) {
        CHECK(tzr_reader_count(r) == 5);
        for (size_t i = 0; i < 5 && i < tzr_reader_count(r); i++) {
            const tzr_tensor_info *t = tzr_reader_tensor(r, i);
            int ok = strcmp(t->name, want[i].name) == 0 && t->name_len == 1 && t->dtype == want[i].d &&
                     t->ndim == want[i].ndim && t->numel == want[i].numel && t->nbytes == want[i].nbytes &&
                     t->data_offset == 8 + hl + want[i].off && t->header_offset == t->data_offset &&
                     t->data_length == want[i].nbytes && t->stored_length == want[i].nbytes &&
                     t->type == TZR_STATE_DICT && t->compression == TZR_COMPRESSION_NONE && !t->meta;
            /* The rest of the row (one fill with the .tensors index's) */
            ok = ok && t->uncompressed_length == want[i].nbytes && t->byte_planes == 1 && t->module_idx == 0 &&
                 !t->structured && !t->encrypted && !t->opaque && t->itemsize == want[i].itemsize &&
                 t->dtype_len == 3 && strcmp(t->dtype_str, want[i].dstr) == 0;
            for (uint32_t d = 0; ok && d < t->ndim; d++) ok = t->shape[d] == want[i].shape[d];
            CHECKF(ok, "tensor %zu ('%s')", i, t->name);
            size_t at = (size_t)-1;
            CHECK(tzr_reader_find(r, want[i].name, 1, &at) == 0 && at == i);
        }
        size_t at;
        CHECK(tzr_reader_find(r, "__metadata__", 12, &at) != 0);
        tzr_reader_free(r);
    }
    free(b);
}

/* A header over the reader's first read (64 KiB) is read at open and kept:
 * plain names point into it (their closing quote made a NUL), escaped ones
 * are decoded copies. Every name must read back whole and NUL-terminated
 * after the open, while another reader comes and goes, until the reader
 * is freed (under ASan: no read of a freed header). A late syntax error
 * sends the scan back to the tree parse, which must see the header as
 * given: the same message as tzr_st_parse of the same bytes. */
static void reader_names_in_header(void) {
    static const char json[] =
        "{\"a.weight\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
        "\"q\\\"uote\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]},"
        "\"b.bias\":{\"dtype\":\"F16\",\"shape\":[1,2],\"data_offsets\":[3,7]},"
        "\"e\\u0041sc\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[7,8]},"
        "\"spaced\": { \"shape\": [ 4 ], \"dtype\": \"U8\", \"data_offsets\": [ 8, 12 ] },"
        "\"zz\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[12,13]}}";
    static const struct {
        const char *name;
        size_t len, off, nbytes;
        uint32_t ndim;
        uint64_t shape[2];
    } want[] = {
        {"a.weight", 8, 0, 2, 1, {2, 0}}, {"q\"uote", 6, 2, 1, 1, {1, 0}}, {"b.bias", 6, 3, 4, 2, {1, 2}},
        {"eAsc", 4, 7, 1, 1, {1, 0}},     {"spaced", 6, 8, 4, 1, {4, 0}},  {"zz", 2, 12, 1, 0, {0, 0}},
    };
    const size_t hl = 70000; /* padded with spaces: past the first read */
    size_t jl = strlen(json), len;
    char *hdr = malloc(hl);
    memset(hdr, ' ', hl);
    memcpy(hdr, json, jl);
    unsigned char *b = build(hl, hdr, hl, NULL, 13, &len);
    tzr_source *src = NULL;
    tzr_reader *r = NULL;
    CHECK_OK(tzr_source_open_memory(&src, b, len, "inplace.st"));
    CHECKF(tzr_reader_open_source(&r, src, NULL) == 0, "%s", tzr_last_error());
    if (r) {
        /* A second reader of the same bytes opened and freed first. */
        tzr_source *src2 = NULL;
        tzr_reader *r2 = NULL;
        CHECK_OK(tzr_source_open_memory(&src2, b, len, "inplace2.st"));
        CHECK_OK(tzr_reader_open_source(&r2, src2, NULL));
        tzr_reader_free(r2);
        CHECK(tzr_reader_count(r) == 6);
        for (size_t i = 0; i < 6 && i < tzr_reader_count(r); i++) {
            const tzr_tensor_info *t = tzr_reader_tensor(r, i);
            int ok = t->name_len == want[i].len && memcmp(t->name, want[i].name, want[i].len + 1) == 0 &&
                     t->data_offset == 8 + hl + want[i].off && t->nbytes == want[i].nbytes &&
                     t->ndim == want[i].ndim;
            for (uint32_t d = 0; ok && d < t->ndim; d++) ok = t->shape[d] == want[i].shape[d];
            CHECKF(ok, "tensor %zu: '%s' (%zu bytes)", i, t->name, t->name_len);
            size_t at = (size_t)-1;
            CHECK(tzr_reader_find(r, want[i].name, want[i].len, &at) == 0 && at == i);
        }
        tzr_reader_free(r);
    }
    /* The same entries, then '}' where ',' or '}' belongs: ']'. */
    hdr[jl - 1] = ']';
    free(b);
    b = build(hl, hdr, hl, NULL, 13, &len);
    tzr_st_file *f = NULL;
    int prc = tzr_st_parse(&f, b, len, "late.st");
    char pmsg[600];
    snprintf(pmsg, sizeof pmsg, "%s", tzr_last_error());
    CHECK(prc == TZR_EFORMAT && strstr(pmsg, "invalid near byte"));
    r = NULL;
    CHECK_OK(tzr_source_open_memory(&src, b, len, "late.st"));
    int rc = tzr_reader_open_source(&r, src, NULL);
    CHECKF(rc == prc && strcmp(tzr_last_error(), pmsg) == 0, "reader: %d '%s'; parse: %d '%s'", rc,
           tzr_last_error(), prc, pmsg);
    CHECK(r == NULL);
    free(b);
    free(hdr);
}

/* Every corrupt header fails through the reader as it fails tzr_st_parse
 * (same code; the checks across entries, now made by the reader, in the
 * same words), also when the JSON order is not the file order. */
static void reader_refuses_as_parse(void) {
    size_t count = 0;
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        const bad_case *c = &BAD[i];
        if (c->n_mode) continue; /* a header length past the file: the reader's own message */
        size_t hl = c->hdr_len ? c->hdr_len : strlen(c->hdr), len;
        unsigned char *b = build(hl, c->hdr, hl, NULL, c->data_len, &len);
        tzr_source *src = NULL;
        tzr_reader *r = NULL;
        CHECK_OK(tzr_source_open_memory(&src, b, len, "bad.st"));
        int rc = tzr_reader_open_source(&r, src, NULL);
        const char *msg = tzr_last_error();
        /* (a top level that is no object is not taken for safetensors at all) */
        int sniffed = strcmp(c->label, "not_object") == 0 && strstr(msg, "bad magic");
        int words = sniffed || ((!c->msg1 || strstr(msg, c->msg1)) && (!c->msg2 || strstr(msg, c->msg2)));
        if (rc != c->want || !words) {
            fprintf(stderr, "  case %s: got %d '%s', want %d with '%s' / '%s'\n", c->label, rc, msg, c->want,
                    c->msg1 ? c->msg1 : "", c->msg2 ? c->msg2 : "");
            check_case_failed = 1;
        }
        CHECK(r == NULL);
        free(b);
        count++;
    }
    CHECK(count > 30);
    /* Out of file order: found after the reader sorts its table. */
    static const struct {
        const char *hdr;
        int want;
        const char *m1, *m2;
    } more[] = {
        {"{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
         TZR_EFORMAT, "tensor 'b'", "data_offsets [4, 12] (file byte 120) overlap tensor 'a' [0, 8]"},
        {"{\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[14,16]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[8,10]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]}}",
         TZR_EFORMAT, "tensor 'b'", "overlap tensor 'a' [0, 16]"},
        {"{\"n\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[3,4]},"
         "\"k\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
         "\"n\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
         TZR_EDUP, "duplicate tensor name \"n\"", NULL},
    };
    for (size_t k = 0; k < sizeof more / sizeof more[0]; k++) {
        size_t hl = strlen(more[k].hdr), len;
        unsigned char *b = build(hl, more[k].hdr, hl, NULL, 16, &len);
        tzr_st_file *f = NULL;
        int prc = tzr_st_parse(&f, b, len, "bad.st");
        char pmsg[600];
        snprintf(pmsg, sizeof pmsg, "%s", tzr_last_error());
        tzr_source *src = NULL;
        tzr_reader *r = NULL;
        CHECK_OK(tzr_source_open_memory(&src, b, len, "bad.st"));
        int rc = tzr_reader_open_source(&r, src, NULL);
        const char *msg = tzr_last_error();
        /* both, in the same words */
        CHECKF(prc == more[k].want && rc == more[k].want && strcmp(msg, pmsg) == 0 && strstr(msg, more[k].m1) &&
                   (!more[k].m2 || strstr(msg, more[k].m2)),
               "case %zu: parse %d '%s'; reader %d '%s'", k, prc, pmsg, rc, msg);
        CHECK(r == NULL && f == NULL);
        free(b);
    }
}

static void check_bad(const char *label, const unsigned char *b, size_t len, int want,
                      const char *m1, const char *m2) {
    tzr_st_file *f = (tzr_st_file *)1;
    int rc = tzr_st_parse(&f, b, len, "bad.st");
    if (rc != want) {
        fprintf(stderr, "  case %s: got %d (%s), want %d; message: %s\n", label, rc, tzr_strerror(rc),
                want, tzr_last_error());
        check_case_failed = 1;
    }
    CHECK(f == NULL);
    CHECK(tzr_last_error_code() == want);
    const char *msg = tzr_last_error();
    if ((m1 && !strstr(msg, m1)) || (m2 && !strstr(msg, m2))) {
        fprintf(stderr, "  case %s: message '%s' lacks '%s' / '%s'\n", label, msg, m1, m2 ? m2 : "");
        check_case_failed = 1;
    }
}

static void corrupt_inputs(void) {
    size_t count = 0;
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        const bad_case *c = &BAD[i];
        size_t hl = c->hdr_len ? c->hdr_len : strlen(c->hdr);
        size_t len;
        unsigned char *b = build(c->n_mode ? c->n : hl, c->hdr, hl, NULL, c->data_len, &len);
        check_bad(c->label, b, len, c->want, c->msg1, c->msg2);
        free(b);
        count++;
    }
    /* Prefix shorter than 8 bytes, and nothing at all. */
    check_bad("empty", (const unsigned char *)"", 0, TZR_ETRUNC, "0 bytes", NULL);
    check_bad("short_prefix", (const unsigned char *)"\x08\0\0\0\0", 5, TZR_ETRUNC, "5 bytes", NULL);
    /* 256 dimensions, one past the limit. */
    char hdr[1200];
    int o = snprintf(hdr, sizeof hdr, "{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1],\"shape\":[1");
    for (int i = 1; i < 256; i++) o += snprintf(hdr + o, sizeof hdr - (size_t)o, ",1");
    snprintf(hdr + o, sizeof hdr - (size_t)o, "]}}");
    size_t len;
    unsigned char *b = build(strlen(hdr), hdr, strlen(hdr), NULL, 1, &len);
    check_bad("too_many_dims", b, len, TZR_ELIMIT, "tensor 'w'", "256 dimensions");
    free(b);
    /* 255 is fine. */
    memcpy(strstr(hdr, ",1]}}"), "]}}", 4);
    b = build(strlen(hdr), hdr, strlen(hdr), NULL, 1, &len);
    tzr_st_file *f;
    CHECK_OK(tzr_st_parse(&f, b, len, "ok"));
    CHECK(f && tzr_st_get(f, 0)->ndim == 255);
    tzr_st_free(f);
    free(b);
    /* Nesting far deeper than any parser stack should take. */
    char *deep = malloc(20010);
    o = snprintf(deep, 20010, "{\"w\":");
    for (int i = 0; i < 10000; i++) deep[o++] = '[';
    for (int i = 0; i < 10000; i++) deep[o++] = ']';
    deep[o++] = '}';
    b = build((uint64_t)o, deep, (size_t)o, NULL, 0, &len);
    check_bad("deep_nesting", b, len, TZR_EFORMAT, "bad.st", NULL);
    free(b);
    free(deep);
    CHECK(count + 5 >= 15);
}

/* ------------------------------------------------------------ writer rules */

static void writer_rejects(void) {
    static const uint64_t s2[] = {2};
    static const struct {
        const char *label, *name;
        size_t name_len;
        tzr_dtype dtype;
        uint64_t nbytes;
        int want;
    } cases[] = {
        {"bad_utf8", "\xc3\x28", 2, TZR_DTYPE_U8, 2, TZR_EINVAL},
        {"overlong", "\xc0\xaf", 2, TZR_DTYPE_U8, 2, TZR_EINVAL},
        {"surrogate", "\xed\xa0\x80", 3, TZR_DTYPE_U8, 2, TZR_EINVAL},
        {"past_10ffff", "\xf4\x90\x80\x80", 4, TZR_DTYPE_U8, 2, TZR_EINVAL},
        {"cut_sequence", "ab\xe2\x82", 4, TZR_DTYPE_U8, 2, TZR_EINVAL},
        {"nul_in_name", "a\0b", 3, TZR_DTYPE_U8, 2, TZR_EINVAL},
        {"empty_name", "", 0, TZR_DTYPE_U8, 2, TZR_EINVAL},
        {"reserved_name", "__metadata__", 12, TZR_DTYPE_U8, 2, TZR_EINVAL},
        {"nbytes_wrong", "w", 1, TZR_DTYPE_F32, 2, TZR_EINVAL},
        {"no_equivalent", "w", 1, TZR_DTYPE_C32, 8, TZR_ENOTSUP},
        {"unknown_dtype", "w", 1, TZR_DTYPE_UNKNOWN, 2, TZR_ENOTSUP},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memres r;
        tzr_st_tensor t[2] = {
            {.name = "ok", .name_len = 2, .dtype = TZR_DTYPE_U8, .ndim = 1, .shape = s2, .nbytes = 2},
            {.name = cases[i].name, .name_len = cases[i].name_len, .dtype = cases[i].dtype, .ndim = 1,
             .shape = s2, .nbytes = cases[i].nbytes},
        };
        tzr_st_writer *w = (tzr_st_writer *)1;
        int rc = tzr_st_writer_open(&w, memout_new(&r), t, 2, NULL, NULL, 0);
        if (rc != cases[i].want) {
            fprintf(stderr, "  case %s: got %d, want %d: %s\n", cases[i].label, rc, cases[i].want,
                    tzr_last_error());
            check_case_failed = 1;
        }
        CHECK(w == NULL);
        CHECK(r.destroyed && r.aborted && !r.finished); /* output freed on failure */
        free(r.buf);
    }
    /* The unknown dtype may be given by name instead. */
    memres r;
    tzr_st_tensor t[2] = {
        {.name = "x", .name_len = 1, .st_dtype = "BF16", .ndim = 1, .shape = s2, .nbytes = 4},
        {.name = "x", .name_len = 1, .dtype = TZR_DTYPE_U8, .ndim = 1, .shape = s2, .nbytes = 2},
    };
    tzr_st_writer *w;
    CHECK_OK(write_pattern(memout_new(&r), t, 1, NULL, NULL, 0));
    CHECK(r.buf && memmem(r.buf, r.len, "\"dtype\":\"BF16\"", 14) != NULL);
    free(r.buf);
    t[0].st_dtype = "F4";
    CHECK_RC(tzr_st_writer_open(&w, memout_new(&r), t, 1, NULL, NULL, 0), TZR_ENOTSUP);
    CHECK(strstr(tzr_last_error(), "'x'") && strstr(tzr_last_error(), "F4"));
    free(r.buf);
    t[0].st_dtype = NULL;
    t[0].dtype = TZR_DTYPE_U16;
    /* Duplicate names. */
    CHECK_RC(tzr_st_writer_open(&w, memout_new(&r), t, 2, NULL, NULL, 0), TZR_EDUP);
    CHECK(strstr(tzr_last_error(), "'x'") != NULL && r.destroyed);
    free(r.buf);
    /* A dimension jansson could not read back. */
    static const uint64_t huge[] = {0, 9223372036854775808ULL};
    tzr_st_tensor h = {.name = "h", .name_len = 1, .dtype = TZR_DTYPE_U8, .ndim = 2, .shape = huge, .nbytes = 0};
    CHECK_RC(tzr_st_writer_open(&w, memout_new(&r), &h, 1, NULL, NULL, 0), TZR_EINVAL);
    free(r.buf);
    /* Size overflow. */
    static const uint64_t ov[] = {4611686018427387904ULL, 4};
    h.shape = ov;
    CHECK_RC(tzr_st_writer_open(&w, memout_new(&r), &h, 1, NULL, NULL, 0), TZR_EINVAL);
    free(r.buf);
    /* Metadata: bad UTF-8, duplicate key, NULL value. */
    const char *k1[] = {"a", "b\xff"}, *v1[] = {"1", "2"};
    CHECK_RC(tzr_st_writer_open(&w, memout_new(&r), NULL, 0, k1, v1, 2), TZR_EINVAL);
    free(r.buf);
    const char *k2[] = {"a", "b", "a"}, *v2[] = {"1", "2", "3"};
    CHECK_RC(tzr_st_writer_open(&w, memout_new(&r), NULL, 0, k2, v2, 3), TZR_EDUP);
    CHECK(strstr(tzr_last_error(), "'a'") != NULL);
    free(r.buf);
    const char *v3[] = {"1", NULL};
    CHECK_RC(tzr_st_writer_open(&w, memout_new(&r), NULL, 0, k2, v3, 2), TZR_EINVAL);
    free(r.buf);
    /* A failing output at open. */
    tzr_output *o = memout_new(&r);
    r.fail_writes = 1;
    CHECK_RC(tzr_st_writer_open(&w, o, t, 1, NULL, NULL, 0), TZR_EIO);
    CHECK(r.destroyed && r.aborted);
    free(r.buf);
    CHECK_RC(tzr_st_writer_open(&w, NULL, t, 1, NULL, NULL, 0), TZR_EINVAL);
}

static void writer_put_rules(void) {
    static const uint64_t s8[] = {8}, s3[] = {3};
    tzr_st_tensor t[] = {
        {.name = "a", .name_len = 1, .dtype = TZR_DTYPE_U8, .ndim = 1, .shape = s8, .nbytes = 8},
        {.name = "b", .name_len = 1, .dtype = TZR_DTYPE_I16, .ndim = 1, .shape = s3, .nbytes = 6},
    };
    memres r;
    tzr_st_writer *w;
    CHECK_OK(tzr_st_writer_open(&w, memout_new(&r), t, 2, NULL, NULL, 0));
    if (!w) return;
    /* Pieces out of order, one overlapping, the tensors interleaved. */
    CHECK_OK(tzr_st_writer_put(w, 0, 6, "GH", 2));
    CHECK_OK(tzr_st_writer_put(w, 1, 0, "bbbbbb", 6));
    CHECK_OK(tzr_st_writer_put(w, 0, 0, "AB", 2));
    CHECK_OK(tzr_st_writer_put(w, 0, 3, "xx", 2));
    CHECK_OK(tzr_st_writer_put(w, 0, 3, "DE", 2));
    CHECK_OK(tzr_st_writer_put(w, 0, 0, NULL, 0));
    CHECK_RC(tzr_st_writer_put(w, 0, 7, "..", 2), TZR_EINVAL);
    CHECK(strstr(tzr_last_error(), "'a'") != NULL);
    CHECK_RC(tzr_st_writer_put(w, 0, UINT64_MAX, "..", 2), TZR_EINVAL);
    CHECK_RC(tzr_st_writer_put(w, 2, 0, "..", 1), TZR_EINVAL);
    CHECK_RC(tzr_st_writer_put(w, 0, 0, NULL, 1), TZR_EINVAL);
    CHECK_OK(tzr_st_writer_put(w, 0, 5, "F", 1));
    CHECK_OK(tzr_st_writer_put(w, 0, 2, "C", 1));
    CHECK_OK(tzr_st_writer_close(w));
    CHECK(r.finished && !r.aborted && r.destroyed);
    /* Header: {"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"I16","shape":[3],"data_offsets":[8,14]}}
     * is 107 bytes, padded to 112; data starts at 120. */
    CHECK(r.len == 120 + 14);
    CHECK(r.buf && r.buf[0] == 112);
    CHECK(r.buf && memcmp(r.buf + 120, "ABCDEFGHbbbbbb", 14) == 0);
    free(r.buf);

    /* A hole: close fails, the output is aborted and nothing finished. */
    CHECK_OK(tzr_st_writer_open(&w, memout_new(&r), t, 2, NULL, NULL, 0));
    if (!w) return;
    CHECK_OK(tzr_st_writer_put(w, 0, 0, "ABCD", 4));
    CHECK_OK(tzr_st_writer_put(w, 0, 6, "GH", 2));
    CHECK_OK(tzr_st_writer_put(w, 1, 0, "bbbbbb", 6));
    CHECK_RC(tzr_st_writer_close(w), TZR_EINVAL);
    CHECK(strstr(tzr_last_error(), "tensor 'a': only 6 of 8 bytes") != NULL);
    CHECK(strstr(tzr_last_error(), "first missing byte 4") != NULL);
    CHECK(r.aborted && !r.finished && r.destroyed);
    free(r.buf);

    /* Nothing put for b. */
    CHECK_OK(tzr_st_writer_open(&w, memout_new(&r), t, 2, NULL, NULL, 0));
    if (!w) return;
    CHECK_OK(tzr_st_writer_put(w, 0, 0, "ABCDEFGH", 8));
    CHECK_RC(tzr_st_writer_close(w), TZR_EINVAL);
    CHECK(strstr(tzr_last_error(), "tensor 'b': only 0 of 6 bytes") != NULL);
    free(r.buf);

    /* Abort. */
    CHECK_OK(tzr_st_writer_open(&w, memout_new(&r), t, 2, NULL, NULL, 0));
    tzr_st_writer_abort(w);
    CHECK(r.aborted && !r.finished && r.destroyed);
    free(r.buf);
    tzr_st_writer_abort(NULL);
}

/* Many small puts in reverse and interleaved order exercise span merging. */
static void writer_many_puts(void) {
    static const uint64_t s[] = {1000};
    tzr_st_tensor t = {.name = "v", .name_len = 1, .dtype = TZR_DTYPE_U8, .ndim = 1, .shape = s, .nbytes = 1000};
    memres r;
    tzr_st_writer *w;
    CHECK_OK(tzr_st_writer_open(&w, memout_new(&r), &t, 1, NULL, NULL, 0));
    if (!w) return;
    unsigned char d[1000];
    for (int i = 0; i < 1000; i++) d[i] = (unsigned char)(i * 7);
    for (int i = 990; i >= 0; i -= 10) CHECK_OK(tzr_st_writer_put(w, 0, (uint64_t)i, d + i, 3));
    for (int i = 3; i < 1000; i += 10) CHECK_OK(tzr_st_writer_put(w, 0, (uint64_t)i, d + i, 7));
    CHECK_OK(tzr_st_writer_close(w));
    CHECK(r.finished && r.len >= 1000 && memcmp(r.buf + r.len - 1000, d, 1000) == 0);
    free(r.buf);
}

/* The atomic file output: nothing at the path until close succeeds. */
static void writer_file_atomic(void) {
    static const uint64_t s4[] = {4};
    tzr_st_tensor t = {.name = "w", .name_len = 1, .dtype = TZR_DTYPE_U8, .ndim = 1, .shape = s4, .nbytes = 4};
    const char *path = tmp_path("atomic.safetensors");
    tzr_output *o;
    tzr_st_writer *w;
    CHECK_OK(tzr_output_open_file(&o, path));
    CHECK_OK(tzr_st_writer_open(&w, o, &t, 1, NULL, NULL, 0));
    CHECK_OK(tzr_st_writer_put(w, 0, 0, "abcd", 4));
    CHECK(access(path, F_OK) != 0);
    tzr_st_writer_abort(w);
    CHECK(access(path, F_OK) != 0);
    CHECK_OK(tzr_output_open_file(&o, path));
    CHECK_OK(tzr_st_writer_open(&w, o, &t, 1, NULL, NULL, 0));
    CHECK_OK(tzr_st_writer_put(w, 0, 0, "ab", 2));
    CHECK_RC(tzr_st_writer_close(w), TZR_EINVAL);
    CHECK(access(path, F_OK) != 0);
    CHECK_OK(tzr_output_open_file(&o, path));
    CHECK_OK(tzr_st_writer_open(&w, o, &t, 1, NULL, NULL, 0));
    CHECK_OK(tzr_st_writer_put(w, 0, 0, "abcd", 4));
    CHECK_OK(tzr_st_writer_close(w));
    size_t len = 0;
    unsigned char *b = check_read_file(path, &len);
    /* {"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}} is 53 bytes -> 56. */
    CHECK(b && len == 8 + 56 + 4 && b[0] == 56 && memcmp(b + 64, "abcd", 4) == 0);
    free(b);
}

/* Independent check with Python's json module, following the reference
 * reader's rules (contiguous offsets from 0, last end == file end). */
static void python_reads_writer_output(void) {
    if (system("python3 -c 'import json, struct' >/dev/null 2>&1") != 0) {
        check_skip("python3 not available");
        return;
    }
    static const char py[] =
        "import json, struct, sys\n"
        "b = open(sys.argv[1], 'rb').read()\n"
        "n = struct.unpack('<Q', b[:8])[0]\n"
        "assert n % 8 == 0 and b[8:9] == b'{', n\n"
        "h = json.loads(b[8:8 + n].decode('utf-8'))\n"
        "meta = h.pop('__metadata__', {})\n"
        "assert meta == {'format': 'pt', 'k\\u00e9y': 'v\\n'}, meta\n"
        "assert list(h) == ['z', 'a.b', 'n\"q', 'e'], list(h)\n"
        "sz = {'F32': 4, 'BF16': 2, 'F8_E4M3': 1, 'U8': 1}\n"
        "end = 0\n"
        "for k, v in sorted(h.items(), key=lambda kv: kv[1]['data_offsets']):\n"
        "    s, e = v['data_offsets']\n"
        "    num = 1\n"
        "    for d in v['shape']: num *= d\n"
        "    assert s == end and e - s == num * sz[v['dtype']], (k, v)\n"
        "    end = e\n"
        "assert 8 + n + end == len(b)\n"
        "assert h['z']['shape'] == [2, 2] and h['a.b']['dtype'] == 'BF16'\n"
        "assert b[8 + n:8 + n + 4] == bytes([0, 1, 2, 3])\n";
    char script[600]; /* tmp_path reuses one buffer */
    snprintf(script, sizeof script, "%s", tmp_path("check_st.py"));
    CHECK(check_write_file(script, py, sizeof py - 1) == 0);
    static const uint64_t s22[] = {2, 2}, s3[] = {3}, s0[] = {0};
    tzr_st_tensor t[] = {
        {.name = "z", .name_len = 1, .dtype = TZR_DTYPE_F32, .ndim = 2, .shape = s22, .nbytes = 16},
        {.name = "a.b", .name_len = 3, .dtype = TZR_DTYPE_BF16, .ndim = 1, .shape = s3, .nbytes = 6},
        {.name = "n\"q", .name_len = 3, .dtype = TZR_DTYPE_F8_E4M3FN, .ndim = 0, .nbytes = 1},
        {.name = "e", .name_len = 1, .dtype = TZR_DTYPE_U8, .ndim = 1, .shape = s0, .nbytes = 0},
    };
    const char *mk[] = {"format", "k\xc3\xa9y"}, *mv[] = {"pt", "v\n"};
    const char *path = tmp_path("py.safetensors");
    tzr_output *o;
    CHECK_OK(tzr_output_open_file(&o, path));
    CHECK_OK(write_pattern(o, t, 4, mk, mv, 2));
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s'", script, path);
    CHECK(system(cmd) == 0);
}

/* A header of 40,000 entries (2.4 MB, 7 MB of table) through the reader:
 * in file order, in reverse (the table is sorted, i.e. replaced), with a
 * duplicate (the open fails after the parse) and with a syntax error at
 * the end (the tree parse retries and fails): every table the reader
 * gives is the header's, every failure the parse's. */
static void reader_prefaulted_table(void) {
    enum { N = 40000 };
    size_t cap = (size_t)N * 80 + 16;
    char *json = malloc(cap);
    for (int form = 0; form < 4; form++) {
        size_t jl = 0;
        json[jl++] = '{';
        for (int k = 0; k < N; k++) {
            int i = form == 1 ? N - 1 - k : k;
            int nm = form == 2 && i == N - 1 ? 7 : i;
            jl += (size_t)snprintf(json + jl, cap - jl,
                                   "%s\"layer.%d.w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[%d,%d]}",
                                   k ? "," : "", nm, 4 * i, 4 * i + 4);
        }
        json[jl++] = form == 3 ? ']' : '}';
        size_t len;
        unsigned char *b = build(jl, json, jl, NULL, 4 * (size_t)N, &len);
        tzr_source *src = NULL;
        tzr_reader *r = NULL;
        CHECK_OK(tzr_source_open_memory(&src, b, len, "prefault"));
        int rc = tzr_reader_open_source(&r, src, NULL);
        if (form == 2) {
            CHECKF(rc == TZR_EDUP && strstr(tzr_last_error(), "layer.7.w"), "%d %s", rc, tzr_last_error());
        } else if (form == 3) {
            CHECKF(rc == TZR_EFORMAT, "%d %s", rc, tzr_last_error());
        } else {
            CHECKF(rc == 0, "form %d: %s", form, tzr_last_error());
            int bad = !r || tzr_reader_count(r) != N;
            for (int i = 0; !bad && i < N; i++) {
                char name[24];
                size_t nl = (size_t)snprintf(name, sizeof name, "layer.%d.w", i), at = (size_t)-1;
                const tzr_tensor_info *t = tzr_reader_tensor(r, (size_t)i);
                bad |= t->name_len != nl || memcmp(t->name, name, nl + 1) != 0 || t->dtype != TZR_DTYPE_F16 ||
                       t->ndim != 1 || t->shape[0] != 2 || t->nbytes != 4 ||
                       t->data_offset != 8 + jl + 4 * (uint64_t)i || tzr_reader_find(r, name, nl, &at) != 0 ||
                       at != (size_t)i;
            }
            CHECKF(!bad, "form %d", form);
        }
        tzr_reader_free(r);
        free(b);
    }
    free(json);
}

/* The key scan takes eight plain bytes at a time and hands a word with a
 * quote, backslash, control or non-ASCII byte to the byte loop: each such
 * byte at every position of a name's first words (and names that end
 * there) must give the name the JSON says, through tzr_st_parse and the
 * reader (header over 64 KiB: names in place), or fail as before. */
static void key_scan_every_position(void) {
    static const struct {
        const char *json, *name; /* the special as written, and decoded */
        int bad;                 /* not valid JSON: refused */
    } sp[] = {
        {"", "", 0},          {"\\\"", "\"", 0}, {"\\\\", "\\", 0}, {"\xc3\xa9", "\xc3\xa9", 0},
        {"\x7f", "\x7f", 0}, {"~", "~", 0},        {" ", " ", 0},        {"\x01", "", 1},
        {"\x1f", "", 1},     {"\xff", "", 1},
    };
    for (size_t k = 0; k < 18; k++)
        for (size_t j = 0; j < sizeof sp / sizeof *sp; j++)
            for (int tail = 0; tail < 2; tail++) {
                char key[64], want[64], json[256];
                const char *t = tail ? "bcdefghij" : "";
                snprintf(key, sizeof key, "%.*s%s%s", (int)k, "aaaaaaaaaaaaaaaaaa", sp[j].json, t);
                snprintf(want, sizeof want, "%.*s%s%s", (int)k, "aaaaaaaaaaaaaaaaaa", sp[j].name, t);
                if (!sp[j].bad && !want[0]) continue; /* an empty name: not this test's */
                int jl = snprintf(json, sizeof json,
                                  "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                                  "\"z\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                                  key);
                for (int big = 0; big < 2; big++) {
                    size_t hl = big ? 70000 : (size_t)jl, len;
                    char *hdr = malloc(hl);
                    memset(hdr, ' ', hl);
                    memcpy(hdr, json, (size_t)jl);
                    unsigned char *b = build(hl, hdr, hl, "xy", 2, &len);
                    tzr_st_file *f = NULL;
                    int rc = tzr_st_parse(&f, b, len, "scan");
                    tzr_source *src = NULL;
                    tzr_reader *r = NULL;
                    CHECK_OK(tzr_source_open_memory(&src, b, len, "scan"));
                    int rrc = tzr_reader_open_source(&r, src, NULL);
                    if (sp[j].bad) {
                        CHECKF(rc == TZR_EFORMAT && rrc == TZR_EFORMAT, "k %zu special %zu: %d %d", k, j, rc, rrc);
                    } else {
                        size_t wl = strlen(want);
                        const tzr_st_tensor *e = rc ? NULL : tzr_st_get(f, 0);
                        const tzr_tensor_info *ti = r ? tzr_reader_tensor(r, 0) : NULL;
                        CHECKF(e && e->name_len == wl && memcmp(e->name, want, wl + 1) == 0, "k %zu special %zu big %d",
                               k, j, big);
                        CHECKF(ti && ti->name_len == wl && memcmp(ti->name, want, wl + 1) == 0 &&
                                   tzr_reader_count(r) == 2 && ti->nbytes == 1,
                               "reader: k %zu special %zu big %d: %s", k, j, big, r ? "" : tzr_last_error());
                    }
                    tzr_st_free(f);
                    tzr_reader_free(r);
                    free(b);
                    free(hdr);
                }
            }
}

int main(void) {
    RUN(dtype_tables);
    RUN(golden_writer);
    RUN(golden_reader);
    RUN(roundtrip_all_dtypes);
    RUN(scalars_and_empty_tensors);
    RUN(metadata_and_escaping);
    RUN(file_order_vs_json_order);
    RUN(corrupt_inputs);
    RUN(fast_and_tree_agree);
    RUN(many_names);
    RUN(reader_mixed_dtypes);
    RUN(reader_table_is_the_header);
    RUN(reader_refuses_as_parse);
    RUN(reader_names_in_header);
    RUN(key_scan_every_position);
    RUN(reader_prefaulted_table);
    RUN(writer_rejects);
    RUN(writer_put_rules);
    RUN(writer_many_puts);
    RUN(writer_file_atomic);
    RUN(python_reads_writer_output);
    return check_done();
}
