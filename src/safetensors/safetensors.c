/* safetensors reader and writer. Format and rules: formats/safetensors.md.
 *
 * Everything in a file is untrusted: the header length is checked against
 * the file and a cap before anything is parsed, jansson parses the JSON
 * (it bounds nesting depth, checks UTF-8 and keeps exact 64-bit integers),
 * and every entry is checked for exact types, offsets inside the data
 * region, sizes that match shape*itemsize without overflow, and no two
 * tensors sharing bytes. Nothing is allocated from a length that has not
 * been checked against the bytes actually present. */
#include "internal.h"
#include "names.h"
#include "mem.h"
#include "tzr_safetensors.h"
#include "json_scan.h"
#include "st_internal.h"
#include "st_run.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- dtypes */

static const struct {
    const char *st;
    tzr_dtype d;
} st_dtypes[] = {
    {"BOOL", TZR_DTYPE_BOOL},    {"U8", TZR_DTYPE_U8},
    {"I8", TZR_DTYPE_I8},        {"I16", TZR_DTYPE_I16},
    {"U16", TZR_DTYPE_U16},      {"F16", TZR_DTYPE_F16},
    {"BF16", TZR_DTYPE_BF16},    {"I32", TZR_DTYPE_I32},
    {"U32", TZR_DTYPE_U32},      {"F32", TZR_DTYPE_F32},
    {"F64", TZR_DTYPE_F64},      {"I64", TZR_DTYPE_I64},
    {"U64", TZR_DTYPE_U64},      {"F8_E4M3", TZR_DTYPE_F8_E4M3FN},
    {"F8_E5M2", TZR_DTYPE_F8_E5M2}, {"F8_E8M0", TZR_DTYPE_F8_E8M0FNU},
    {"C64", TZR_DTYPE_C64},
};
#define N_ST_DTYPES (sizeof st_dtypes / sizeof st_dtypes[0])

const char *tzr_st_dtype_name(tzr_dtype d) {
    for (size_t i = 0; i < N_ST_DTYPES; i++)
        if (st_dtypes[i].d == d) return st_dtypes[i].st;
    return NULL;
}

int tzr_st_dtype_parse(const char *s, tzr_dtype *d) {
    if (d) *d = TZR_DTYPE_UNKNOWN;
    if (!s || !d) return tzr_fail(TZR_EINVAL, "tzr_st_dtype_parse: NULL argument");
    for (size_t i = 0; i < N_ST_DTYPES; i++)
        if (strcmp(st_dtypes[i].st, s) == 0) {
            *d = st_dtypes[i].d;
            return 0;
        }
    char buf[TZR_NAMEBUF];
    /* F4/F6 are sub-byte types: one element has no whole-byte size, and
     * nothing else in libtzr can hold them. */
    return tzr_fail(TZR_ENOTSUP, "safetensors dtype '%s' is not supported",
                    tzr_printable(s, strlen(s), buf, sizeof buf));
}

/* ---------------------------------------------------------------- reader */

typedef struct st_entry {
    tzr_st_tensor pub;
    size_t json_idx; /* position in the JSON object: tie-break for sorting */
    uint64_t begin;  /* data_offsets as written (relative to the data) */
    uint64_t end;
} st_entry;

struct tzr_st_file {
    const uint8_t *base;
    size_t len;
    int header_only;   /* base holds the header only (tzr_st_parse_header) */
    size_t have;       /* then: bytes at base */
    void *map; /* non-NULL when tzr_st_open mapped the file */
    char *name;
    uint64_t header_len;
    st_entry *t;
    size_t n;
    size_t cap;         /* entries t has room for */
    /* Names and shapes of all entries, one bump arena: a malloc each cost
     * ~6 MB of fresh 4 KiB pages for 100k tensors. */
    tzr_arena strings;
    uint32_t *slots;    /* name hash table: entry index + 1, 0 when empty */
    size_t nslots;      /* a power of two, > 2 * n */
    size_t dt_hint;     /* st_dtypes row of the last fast entry */
    char **meta;        /* key0, value0, key1, value1, ... */
    size_t n_meta;
    /* tzr_st_parse_header_each: each entry goes to put as it is parsed,
     * through `one`; t stays NULL and the caller checks across entries. */
    tzr_st_put_fn put;
    void *put_ctx;
    st_entry one;
    /* In place (the reader's kept header): a plain key's name is its bytes
     * in the header, the closing quote overwritten by a NUL (the copies
     * were ~3 MB of fresh memory for 100k tensors); nul_end is one past
     * the last NUL written, for a retry to put the quotes back. */
    uint8_t *in_place;
    size_t nul_end;
    /* Shapes then come from a chunk of their own, 8-byte aligned (the
     * arena rounds each piece up to 16 bytes). */
    uint64_t *sh_next;
    size_t sh_left;
};

/* Shape as "[2,3]" for messages, cut short when long. */
static const char *shape_str(const uint64_t *shape, uint32_t ndim, char *buf, size_t cap) {
    size_t o = 0;
    buf[o++] = '[';
    for (uint32_t i = 0; i < ndim; i++) {
        if (o + 28 >= cap) {
            o += (size_t)snprintf(buf + o, cap - o, "...");
            break;
        }
        o += (size_t)snprintf(buf + o, cap - o, "%s%llu", i ? "," : "", (unsigned long long)shape[i]);
    }
    snprintf(buf + o, cap - o, "]");
    return buf;
}

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "number with a fraction or exponent";
    case JSON_TRUE: case JSON_FALSE: return "boolean";
    default: return "null";
    }
}

/* Every tensor error starts "<file>: tensor '<name>' (header bytes 8..E): "
 * so the message names where to look even when jansson gives no position
 * for a value. */
static int tensor_fail(const tzr_st_file *f, const char *key, size_t klen, int code,
                       const char *fmt, ...) TZR_PRINTF(5, 6);
static int tensor_fail(const tzr_st_file *f, const char *key, size_t klen, int code,
                       const char *fmt, ...) {
    char msg[512], nb[TZR_NAMEBUF];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tzr_fail(code, "%s: tensor '%s' (header bytes 8..%llu): %s", f->name,
                    tzr_printable(key, klen, nb, sizeof nb),
                    (unsigned long long)(8 + f->header_len), msg);
}

/* A JSON integer >= 0. jansson rejects integers beyond int64 at parse time,
 * so the only other failures are negative numbers and non-integers. */
static int get_u64(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return 0;
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

static int parse_tensor(tzr_st_file *f, const char *key, size_t klen, json_t *v, st_entry *e,
                        uint64_t data_len) {
    if (klen == 0) return tensor_fail(f, key, klen, TZR_EFORMAT, "empty tensor name");
    if (!json_is_object(v))
        return tensor_fail(f, key, klen, TZR_EFORMAT, "entry is a JSON %s, not an object",
                           json_kind(v));
    /* Copy the name first so messages past this point can use it. */
    char *name = tzr_arena_alloc(&f->strings, klen + 1);
    if (!name) return tzr_fail(TZR_ENOMEM, "out of memory");
    memcpy(name, key, klen);
    name[klen] = 0;
    e->pub.name = name;
    e->pub.name_len = klen;

    /* Unknown extra fields are ignored, as the reference reader does. */
    json_t *jd = json_object_get(v, "dtype");
    json_t *js = json_object_get(v, "shape");
    json_t *jo = json_object_get(v, "data_offsets");
    if (!jd || !js || !jo)
        return tensor_fail(f, key, klen, TZR_EFORMAT, "missing field '%s'",
                           !jd ? "dtype" : !js ? "shape" : "data_offsets");
    if (!json_is_string(jd))
        return tensor_fail(f, key, klen, TZR_EFORMAT, "'dtype' is a JSON %s, not a string",
                           json_kind(jd));
    tzr_dtype dt;
    if (tzr_st_dtype_parse(json_string_value(jd), &dt) != 0) {
        char db[TZR_NAMEBUF];
        return tensor_fail(f, key, klen, TZR_ENOTSUP, "dtype '%s' is not supported",
                           tzr_printable(json_string_value(jd), json_string_length(jd), db,
                                         sizeof db));
    }
    e->pub.dtype = dt;
    e->pub.st_dtype = tzr_st_dtype_name(dt); /* static canonical string */

    if (!json_is_array(js))
        return tensor_fail(f, key, klen, TZR_EFORMAT, "'shape' is a JSON %s, not an array",
                           json_kind(js));
    size_t ndim = json_array_size(js);
    if (ndim > TZR_MAX_DIMS)
        return tensor_fail(f, key, klen, TZR_ELIMIT, "shape has %zu dimensions (limit %d)", ndim,
                           TZR_MAX_DIMS);
    uint64_t *shape = tzr_arena_alloc(&f->strings, (ndim ? ndim : 1) * sizeof *shape);
    if (!shape) return tzr_fail(TZR_ENOMEM, "out of memory");
    e->pub.shape = shape;
    e->pub.ndim = (uint32_t)ndim;
    int has_zero = 0;
    for (size_t i = 0; i < ndim; i++) {
        json_t *d = json_array_get(js, i);
        if (!get_u64(d, &shape[i]))
            return tensor_fail(f, key, klen, TZR_EFORMAT,
                               "shape[%zu] is not a non-negative integer (a JSON %s)", i,
                               json_kind(d));
        has_zero |= shape[i] == 0;
    }
    char sb[160];
    /* A zero dimension makes the tensor empty however large the others
     * are, so only a product without zeros can overflow. */
    uint64_t numel = 1, nbytes = 0;
    if (!has_zero) {
        for (size_t i = 0; i < ndim; i++)
            if (!tzr_mul_ok(numel, shape[i], &numel))
                return tensor_fail(f, key, klen, TZR_EFORMAT,
                                   "shape %s has more than 2^64 elements",
                                   shape_str(shape, e->pub.ndim, sb, sizeof sb));
        if (!tzr_mul_ok(numel, tzr_dtype_size(dt), &nbytes))
            return tensor_fail(f, key, klen, TZR_EFORMAT, "shape %s %s has more than 2^64 bytes",
                               shape_str(shape, e->pub.ndim, sb, sizeof sb), e->pub.st_dtype);
    }

    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !get_u64(json_array_get(jo, 0), &e->begin) || !get_u64(json_array_get(jo, 1), &e->end))
        return tensor_fail(f, key, klen, TZR_EFORMAT,
                           "'data_offsets' is not an array of two non-negative integers");
    if (e->begin > e->end)
        return tensor_fail(f, key, klen, TZR_EFORMAT, "data_offsets [%llu, %llu] end before they begin",
                           (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end - e->begin != nbytes)
        return tensor_fail(f, key, klen, TZR_EFORMAT,
                           "data_offsets [%llu, %llu] disagree with shape %s %s (%llu bytes)",
                           (unsigned long long)e->begin, (unsigned long long)e->end,
                           shape_str(shape, e->pub.ndim, sb, sizeof sb), e->pub.st_dtype,
                           (unsigned long long)nbytes);
    if (e->end > data_len)
        return tensor_fail(f, key, klen, TZR_ETRUNC,
                           "data_offsets [%llu, %llu] (file bytes %llu..%llu) run past the end of "
                           "the data region (%llu bytes; file is %zu bytes)",
                           (unsigned long long)e->begin, (unsigned long long)e->end,
                           (unsigned long long)(8 + f->header_len + e->begin),
                           (unsigned long long)(8 + f->header_len + e->end),
                           (unsigned long long)data_len, f->len);
    e->pub.nbytes = nbytes;
    e->pub.data_offset = 8 + f->header_len + e->begin; /* <= len: cannot overflow */
    return 0;
}

static int parse_metadata(tzr_st_file *f, json_t *m) {
    if (!json_is_object(m))
        return tzr_fail(TZR_EFORMAT, "%s: '__metadata__' (header bytes 8..%llu) is a JSON %s, not an object",
                        f->name, (unsigned long long)(8 + f->header_len), json_kind(m));
    size_t cap = json_object_size(m);
    f->meta = calloc(cap ? 2 * cap : 1, sizeof *f->meta);
    if (!f->meta) return tzr_fail(TZR_ENOMEM, "out of memory");
    const char *k;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach(m, k, klen, v) {
        char nb[TZR_NAMEBUF];
        if (!json_is_string(v))
            return tzr_fail(TZR_EFORMAT, "%s: '__metadata__' key '%s' (header bytes 8..%llu) has a JSON %s, not a string",
                            f->name, tzr_printable(k, klen, nb, sizeof nb),
                            (unsigned long long)(8 + f->header_len), json_kind(v));
        /* jansson was not given JSON_ALLOW_NUL: no string holds a NUL. */
        char *ks = strdup(k), *vs = strdup(json_string_value(v));
        f->meta[2 * f->n_meta] = ks;
        f->meta[2 * f->n_meta + 1] = vs;
        f->n_meta++;
        if (!ks || !vs) return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    return 0;
}

static int cmp_offset(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->json_idx < y->json_idx ? -1 : x->json_idx > y->json_idx;
}

/* The slot holding this name, or the empty slot where it would go
 * (linear probing; the table is at most half full). */
static size_t slot_of(const tzr_st_file *f, const char *name, size_t len) {
    uint64_t h = tzr_name_hash(name, len);
    size_t mask = f->nslots - 1;
    for (size_t k = (size_t)h & mask;; k = (k + 1) & mask) {
        uint32_t s = f->slots[k];
        if (!s) return k;
        const tzr_st_tensor *t = &f->t[s - 1].pub;
        if (t->name_len == len && memcmp(t->name, name, len) == 0) return k;
    }
}

#define ST_MIN_ENTRY TZR_ST_MIN_ENTRY

/* Room for entry f->n, zeroed (*e). The first call reserves for as many
 * entries as the header can hold: address space only (huge-page-aligned,
 * untouched pages are never faulted), where doubling from 64 copied and
 * faulted twice the final table. Growing past that stays as a fallback.
 * With put, the one scratch entry: the caller's table is the only one. */
static int add_entry(tzr_st_file *f, st_entry **e) {
    if (f->put) {
        memset(&f->one, 0, sizeof f->one);
        *e = &f->one;
        return 0;
    }
    if (f->n == f->cap) {
        size_t nc = f->cap ? 2 * f->cap : (size_t)(f->header_len / ST_MIN_ENTRY) + 1;
        if (nc < 64) nc = 64;
        st_entry *t = nc > SIZE_MAX / sizeof *t ? NULL : tzr_grow_big(f->t, f->cap * sizeof *t, nc * sizeof *t);
        if (!t) return tzr_fail(TZR_ENOMEM, "out of memory");
        f->t = t;
        f->cap = nc;
    }
    memset(&f->t[f->n], 0, sizeof *f->t);
    *e = &f->t[f->n];
    return 0;
}

/* Entry e (from add_entry) is complete and checked: it is tensor f->n. */
static int entry_done(tzr_st_file *f, st_entry *e) {
    e->json_idx = f->n;
    int rc = f->put ? f->put(f->put_ctx, f->n, &e->pub) : 0;
    f->n++;
    return rc;
}

/* The header through jansson as one tree: the fallback for headers the
 * linear scan below does not take (not an object, a syntax error), so
 * their messages keep jansson's positions. Costs ~13x the header. */
static int parse_tree(tzr_st_file *f, uint64_t n, uint64_t data_len) {
    json_error_t err;
    /* Duplicate keys must fail: jansson would otherwise keep the last one,
     * and two readers could disagree about which bytes a name means. */
    json_t *root = json_loadb((const char *)f->base + 8, (size_t)n, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        int code = json_error_code(&err) == json_error_duplicate_key ? TZR_EDUP : TZR_EFORMAT;
        return tzr_fail(code, "%s: header JSON (bytes 8..%llu) invalid near byte %llu (line %d, column %d): %s",
                        f->name, (unsigned long long)(8 + n),
                        (unsigned long long)(8 + (uint64_t)(err.position > 0 ? err.position : 0)),
                        err.line, err.column, err.text);
    }
    int rc = 0;
    if (!json_is_object(root)) {
        rc = tzr_fail(TZR_EFORMAT, "%s: header JSON (bytes 8..%llu) is a JSON %s, not an object",
                      f->name, (unsigned long long)(8 + n), json_kind(root));
        goto out;
    }
    size_t cap = json_object_size(root);
    f->t = f->put ? NULL : calloc(cap ? cap : 1, sizeof *f->t);
    if (!f->put && !f->t) {
        rc = tzr_fail(TZR_ENOMEM, "out of memory");
        goto out;
    }
    f->cap = f->put ? 0 : cap ? cap : 1;
    const char *k;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach(root, k, klen, v) {
        if (klen == 12 && memcmp(k, "__metadata__", 12) == 0) {
            rc = parse_metadata(f, v);
        } else {
            st_entry *e;
            if (!(rc = add_entry(f, &e)) && !(rc = parse_tensor(f, k, klen, v, e, data_len))) rc = entry_done(f, e);
        }
        if (rc) goto out;
    }
out:
    json_decref(root);
    return rc;
}

/* ---- the linear scan: the top-level object by hand, each value alone --
 * A 100 MB header as one jansson tree took ~13x its size and tens of
 * seconds; here only one entry's tree lives at a time (jansson still
 * checks every value and key in full). Anything unexpected returns
 * ST_RETRY and the tree parse reports it. */
#define ST_RETRY 1

/* ---- the usual entry without a JSON tree
 * {"dtype":"BF16","shape":[2048],"data_offsets":[0,4096]}: the three
 * fields once each in any order, a plain ASCII dtype, integers of at most
 * 18 digits. A tree per entry (jansson: an allocation per value) cost
 * about 2.6 us, 0.26 s of a 100k-tensor open. Anything else, and any
 * entry that would fail a check, returns 0 having changed nothing, and
 * the tree parse takes it (and words its error). */
/* a[0..n) == b[0..n): short keys compared inline, where memcmp was a
 * libc call per field of every entry; 8 to 16 bytes (the literal pieces)
 * as two overlapping words, not byte by byte. */
static inline uint64_t word8(const void *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline int same(const uint8_t *a, const char *b, size_t n) {
    if (n >= 8 && n <= 16) return word8(a) == word8(b) && word8(a + n - 8) == word8(b + n - 8);
    for (size_t i = 0; i < n; i++)
        if (a[i] != (uint8_t)b[i]) return 0;
    return 1;
}

/* The form writers emit, {"dtype":"BF16","shape":[2048],"data_offsets":[0,4096]}
 * without spaces, by literal pieces (finding each key was most of an
 * entry's time): where its closing '}' is (p[i] == '{'), or 0 for any
 * other form, which the loop below reads. */
static size_t canonical(const uint8_t *p, size_t n, size_t i, char *dtype, size_t dcap, size_t *dl,
                        uint64_t *shape, size_t *ndim, uint64_t *off, size_t *noff) {
    static const char k1[] = "{\"dtype\":\"", k2[] = "\",\"shape\":", k3[] = ",\"data_offsets\":";
    if (n - i < sizeof k1 - 1 || !same(p + i, k1, sizeof k1 - 1)) return 0;
    size_t d = i += sizeof k1 - 1;
    while (i < n && p[i] != '"' && p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\') i++;
    if (i - d >= dcap || n - i < sizeof k2 - 1 || !same(p + i, k2, sizeof k2 - 1)) return 0;
    *dl = i - d;
    /* A fixed 16 bytes where they are there: a copy of variable length
     * was an inline `rep movsb`, ~10% of the scan. */
    if (*dl < 16 && n - d >= 16) memcpy(dtype, p + d, 16);
    else memcpy(dtype, p + d, *dl);
    dtype[*dl] = 0;
    if (!(i = tzr_js_uints(p, n, i + sizeof k2 - 1, shape, TZR_MAX_DIMS, ndim))) return 0;
    if (n - i < sizeof k3 - 1 || !same(p + i, k3, sizeof k3 - 1)) return 0;
    if (!(i = tzr_js_uints(p, n, i + sizeof k3 - 1, off, 3, noff)) || *noff != 2) return 0;
    return i < n && p[i] == '}' ? i : 0;
}

/* The entry at p (n bytes: the rest of the header); *used gets its length
 * when it is taken. in_place: key lies in f->in_place, a plain key (its
 * bytes are the name) followed by its closing quote. */
static int fast_tensor(tzr_st_file *f, const char *key, size_t klen, int in_place, const uint8_t *p, size_t n,
                       st_entry *e, uint64_t data_len, size_t *used) {
    char dtype[32];
    uint64_t local[TZR_MAX_DIMS], off[3], *shape = local;
    size_t ndim = 0, noff = 0, dl = 0;
    int seen = 0; /* bits: dtype, shape, data_offsets */
    size_t i = tzr_js_skip_ws(p, n, 0);
    if (klen == 0 || i >= n || p[i] != '{') return 0;
    if (in_place) {
        /* The shape is parsed where it is kept (copying it was an inline
         * `rep movsq` per entry); taken only if the entry is. */
        if (!f->sh_next || f->sh_left < TZR_MAX_DIMS) {
            size_t chunk = 4096; /* 32 KiB */
            if (!(f->sh_next = tzr_arena_alloc(&f->strings, chunk * sizeof *shape))) return 0;
            f->sh_left = chunk;
        }
        shape = f->sh_next;
    }
    size_t c = canonical(p, n, i, dtype, sizeof dtype, &dl, shape, &ndim, off, &noff);
    if (c) seen = 7, i = c;
    else i = tzr_js_skip_ws(p, n, i + 1);
    while (seen != 7) {
        if (i >= n || p[i] != '"') return 0;
        size_t ke = tzr_js_string_end(p, n, i);
        if (!ke) return 0;
        const uint8_t *k = p + i + 1;
        size_t kl = ke - i - 2;
        i = tzr_js_skip_ws(p, n, ke);
        if (i >= n || p[i] != ':') return 0;
        i = tzr_js_skip_ws(p, n, i + 1);
        if (kl == 5 && same(k, "dtype", 5) && !(seen & 1)) {
            size_t ve = i < n && p[i] == '"' ? tzr_js_string_end(p, n, i) : 0;
            if (!ve || ve - i - 2 >= sizeof dtype) return 0;
            for (size_t j = i + 1; j < ve - 1; j++)
                if (p[j] < 0x20 || p[j] >= 0x7f || p[j] == '\\') return 0;
            dl = ve - i - 2;
            memcpy(dtype, p + i + 1, dl);
            dtype[dl] = 0;
            i = ve;
            seen |= 1;
        } else if (kl == 5 && same(k, "shape", 5) && !(seen & 2)) {
            if (!(i = tzr_js_uints(p, n, i, shape, TZR_MAX_DIMS, &ndim))) return 0;
            seen |= 2;
        } else if (kl == 12 && same(k, "data_offsets", 12) && !(seen & 4)) {
            if (!(i = tzr_js_uints(p, n, i, off, 3, &noff)) || noff != 2) return 0;
            seen |= 4;
        } else {
            return 0;
        }
        i = tzr_js_skip_ws(p, n, i);
        if (i < n && p[i] == ',' && seen != 7) i = tzr_js_skip_ws(p, n, i + 1);
        else if (seen != 7) return 0;
    }
    if (i >= n || p[i] != '}') return 0;
    /* The checks of parse_tensor; a failure is left to it. The dtype is
     * looked up quietly (saving and restoring the error message around
     * tzr_st_dtype_parse was two snprintf a tensor). */
    tzr_dtype dt = TZR_DTYPE_UNKNOWN;
    /* The previous entry's dtype first: runs of one dtype are the rule.
     * (The loop stops at the hint's NUL at the latest: dtype holds none.) */
    const char *hint = st_dtypes[f->dt_hint].st;
    size_t h = 0;
    while (h < dl && hint[h] == dtype[h]) h++;
    if (h == dl && hint[dl] == 0) dt = st_dtypes[f->dt_hint].d;
    for (size_t k = 0; k < N_ST_DTYPES && dt == TZR_DTYPE_UNKNOWN; k++)
        if (strcmp(st_dtypes[k].st, dtype) == 0) dt = st_dtypes[f->dt_hint = k].d;
    if (dt == TZR_DTYPE_UNKNOWN) return 0;
    uint64_t numel = 1, nbytes = 0;
    int has_zero = 0;
    for (size_t d = 0; d < ndim; d++) has_zero |= shape[d] == 0;
    if (!has_zero) {
        for (size_t d = 0; d < ndim; d++)
            if (!tzr_mul_ok(numel, shape[d], &numel)) return 0;
        if (!tzr_mul_ok(numel, tzr_dtype_size(dt), &nbytes)) return 0;
    }
    if (off[0] > off[1] || off[1] - off[0] != nbytes || off[1] > data_len) return 0;
    uint64_t *sh;
    const char *name;
    if (in_place) {
        sh = shape; /* already in place */
        f->sh_next += ndim;
        f->sh_left -= ndim;
        /* key is in f->in_place, followed by its closing quote: the
         * entry is taken, so nothing reads that quote again (but a retry,
         * which puts it back). */
        char *at = (char *)key;
        at[klen] = 0;
        size_t end = (size_t)((uint8_t *)at - f->in_place) + klen + 1;
        if (end > f->nul_end) f->nul_end = end;
        name = at;
    } else {
        /* Shape then name in one piece (the arena aligns each piece to 16). */
        sh = tzr_arena_alloc(&f->strings, ndim * sizeof *sh + klen + 1);
        if (!sh) return 0; /* the tree parse reports it */
        char *copy = (char *)(sh + ndim);
        memcpy(copy, key, klen);
        copy[klen] = 0;
        name = copy;
        memcpy(sh, shape, ndim * sizeof *sh);
    }
    e->pub.name = name;
    e->pub.name_len = klen;
    e->pub.dtype = dt;
    e->pub.st_dtype = st_dtypes[f->dt_hint].st;
    e->pub.shape = sh;
    e->pub.ndim = (uint32_t)ndim;
    e->begin = off[0];
    e->end = off[1];
    e->pub.nbytes = nbytes;
    e->pub.data_offset = 8 + f->header_len + e->begin;
    *used = i + 1;
    return 1;
}

static int parse_linear(tzr_st_file *f, uint64_t n, uint64_t data_len) {
    const uint8_t *p = f->base + 8;
    size_t len = (size_t)n, i = 0;
    int have_meta = 0;
    while (i < len && tzr_js_ws(p[i])) i++;
    if (i >= len || p[i] != '{') return ST_RETRY;
    for (i++; i < len && tzr_js_ws(p[i]); i++) {}
    if (i < len && p[i] == '}') goto end;
    for (;;) {
        if (i >= len || p[i] != '"') return ST_RETRY;
        int plain = 0;
        size_t ks = i, ke = tzr_js_plain_end(p, len, i, &plain);
        if (!ke) return ST_RETRY;
        for (i = ke; i < len && tzr_js_ws(p[i]); i++) {}
        if (i >= len || p[i] != ':') return ST_RETRY;
        for (i++; i < len && tzr_js_ws(p[i]); i++) {}
        size_t vs = i, ve, used;
        /* A plain ASCII key is its bytes; others are decoded by jansson. */
        const char *key = (const char *)p + ks + 1;
        size_t klen = ke - ks - 2;
        json_t *jk = NULL;
        if (!plain) {
            json_error_t err;
            if (!(jk = json_loadb((const char *)p + ks, ke - ks, JSON_DECODE_ANY, &err))) return ST_RETRY;
            key = json_string_value(jk);
            klen = json_string_length(jk);
        }
        if (!jk && !(klen == 12 && memcmp(key, "__metadata__", 12) == 0)) {
            st_entry *e;
            int rc = add_entry(f, &e);
            if (rc) return rc;
            /* Parsed where it lies: delimiting it first was a second pass. */
            /* (plain: !jk) */
            if (fast_tensor(f, key, klen, f->in_place != NULL, p + vs, len - vs, e, data_len, &used)) {
                if ((rc = entry_done(f, e))) return rc;
                ve = vs + used;
                goto next;
            }
        }
        if (!(ve = tzr_js_value_end(p, len, vs))) {
            json_decref(jk);
            return ST_RETRY;
        }
        json_error_t err;
        json_t *v = json_loadb((const char *)p + vs, ve - vs, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err);
        if (!v) {
            json_decref(jk);
            return ST_RETRY;
        }
        int rc;
        if (klen == 12 && memcmp(key, "__metadata__", 12) == 0) {
            rc = have_meta ? tzr_fail(TZR_EDUP, "%s: header JSON (bytes 8..%llu): duplicate key \"__metadata__\"",
                                      f->name, (unsigned long long)(8 + n))
                           : parse_metadata(f, v);
            have_meta = 1;
        } else {
            st_entry *e;
            if (!(rc = add_entry(f, &e)) && !(rc = parse_tensor(f, key, klen, v, e, data_len))) rc = entry_done(f, e);
        }
        json_decref(v);
        json_decref(jk);
        if (rc) return rc;
    next:
        for (i = ve; i < len && tzr_js_ws(p[i]); i++) {}
        if (i < len && p[i] == '}') break;
        if (i >= len || p[i] != ',') return ST_RETRY;
        for (i++; i < len && tzr_js_ws(p[i]); i++) {}
    }
end:
    for (i++; i < len && tzr_js_ws(p[i]); i++) {}
    return i == len ? 0 : ST_RETRY;
}

/* What a linear scan built, dropped before the tree parse retries. */
static void drop_entries(tzr_st_file *f) {
    /* The quotes the scan overwrote, back: before nul_end the header held
     * no NUL byte of its own (every byte there was taken by the scan or by
     * jansson, and neither takes a raw NUL), so each NUL there is one. */
    for (size_t i = 8; i < f->nul_end; i++) /* (bytes 0..7: the length) */
        if (!f->in_place[i]) f->in_place[i] = '"';
    f->nul_end = 0;
    f->sh_next = NULL;
    f->sh_left = 0;
    tzr_arena_free(&f->strings);
    free(f->t);
    f->t = NULL;
    f->n = f->cap = 0;
    for (size_t i = 0; i < 2 * f->n_meta; i++) free(f->meta[i]);
    free(f->meta);
    f->meta = NULL;
    f->n_meta = 0;
}

int tzr_st_fail_dup(const tzr_st_file *f, const char *name, size_t len) {
    char nb[TZR_NAMEBUF];
    return tzr_fail(TZR_EDUP, "%s: header JSON (bytes 8..%llu): duplicate tensor name \"%s\"", f->name,
                    (unsigned long long)(8 + f->header_len), tzr_printable(name, len, nb, sizeof nb));
}

int tzr_st_fail_overlap(const tzr_st_file *f, const tzr_st_tensor *t, const tzr_st_tensor *earlier) {
    char nb[TZR_NAMEBUF];
    uint64_t data = 8 + f->header_len; /* offsets in messages are as written: from the data region */
    return tensor_fail(f, t->name, t->name_len, TZR_EFORMAT,
                       "data_offsets [%llu, %llu] (file byte %llu) overlap tensor '%s' [%llu, %llu]",
                       (unsigned long long)(t->data_offset - data), (unsigned long long)(t->data_offset - data + t->nbytes),
                       (unsigned long long)t->data_offset, tzr_printable(earlier->name, earlier->name_len, nb, sizeof nb),
                       (unsigned long long)(earlier->data_offset - data),
                       (unsigned long long)(earlier->data_offset - data + earlier->nbytes));
}

static int parse_into(tzr_st_file *f) {
    if (f->len < 8)
        return tzr_fail(TZR_ETRUNC, "%s: %zu bytes is too short for the 8-byte header length",
                        f->name, f->len);
    uint64_t n = tzr_ld64(f->base);
    if (n > TZR_ST_MAX_HEADER)
        return tzr_fail(TZR_ELIMIT, "%s: header length %llu (byte 0) is over the %llu-byte cap (file is %zu bytes)",
                        f->name, (unsigned long long)n, (unsigned long long)TZR_ST_MAX_HEADER, f->len);
    if (n > f->len - 8)
        return tzr_fail(TZR_ETRUNC, "%s: header length %llu (byte 0) runs past the end of the file (%zu bytes)",
                        f->name, (unsigned long long)n, f->len);
    f->header_len = n;
    if (f->header_only && f->have < 8 + n)
        return tzr_fail(TZR_EINVAL, "%s: %zu header bytes given, the header needs %llu", f->name, f->have,
                        (unsigned long long)(8 + n));
    uint64_t data_len = f->len - 8 - n;
    /* One arena block for a large header's names and shapes (address
     * space: only what is used is touched). */
    if (n > TZR_ARENA_FIRST) f->strings.block_size = (size_t)n;
    int rc = parse_linear(f, n, data_len);
    if (rc == ST_RETRY) {
        drop_entries(f);
        rc = parse_tree(f, n, data_len);
    }
    if (rc || f->put) return rc; /* with put, the caller checks across entries */

    /* (f->t is NULL for a file of no tensors.) Writers usually list the
     * tensors in file order: then there is nothing to sort. */
    size_t unsorted = 0;
    for (size_t i = 1; i < f->n && !unsorted; i++) unsorted = cmp_offset(&f->t[i - 1], &f->t[i]) > 0;
    if (unsorted) qsort(f->t, f->n, sizeof *f->t, cmp_offset);
    /* A name hash table for tzr_st_find; the linear scan sees each key
     * alone, so two equal names meet here. (It replaced a sort by name:
     * ~17 memcmp a name for 100k tensors.) */
    if (f->n > UINT32_MAX - 1) return tzr_fail(TZR_ELIMIT, "%s: over 2^32 tensors", f->name);
    f->nslots = 16;
    while (f->nslots <= 2 * f->n) f->nslots *= 2;
    f->slots = tzr_map_zeroed(f->nslots, sizeof *f->slots);
    if (!f->slots) return tzr_fail(TZR_ENOMEM, "out of memory");
    for (size_t i = 0; i < f->n; i++) {
        const st_entry *e = &f->t[i];
        size_t k = slot_of(f, e->pub.name, e->pub.name_len);
        if (f->slots[k]) return tzr_st_fail_dup(f, e->pub.name, e->pub.name_len);
        f->slots[k] = (uint32_t)(i + 1);
    }
    /* After sorting by start, a tensor overlaps an earlier one exactly when
     * it starts before the furthest end seen so far. Zero-byte tensors
     * hold no bytes and so overlap nothing. */
    const st_entry *far = NULL;
    for (size_t i = 0; i < f->n; i++) {
        st_entry *e = &f->t[i];
        if (e->pub.nbytes == 0) continue;
        if (far && e->begin < far->end) return tzr_st_fail_overlap(f, &e->pub, &far->pub);
        if (!far || e->end > far->end) far = e;
    }
    return 0;
}

static tzr_st_file *file_new(const char *name) {
    tzr_st_file *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->name = strdup(name ? name : "<memory>");
    if (!f->name) {
        free(f);
        return NULL;
    }
    return f;
}

int tzr_st_parse(tzr_st_file **out, const void *bytes, size_t len, const char *name) {
    if (!out) return tzr_fail(TZR_EINVAL, "tzr_st_parse: NULL out");
    *out = NULL;
    if (!bytes && len) return tzr_fail(TZR_EINVAL, "tzr_st_parse: NULL bytes");
    tzr_st_file *f = file_new(name);
    if (!f) return tzr_fail(TZR_ENOMEM, "out of memory");
    f->base = bytes ? bytes : (const uint8_t *)"";
    f->len = len;
    int rc = parse_into(f);
    if (rc) {
        tzr_st_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

int tzr_st_parse_header(tzr_st_file **out, const void *head, size_t have, uint64_t file_size, const char *name) {
    *out = NULL;
    tzr_st_file *f = file_new(name);
    if (!f) return tzr_fail(TZR_ENOMEM, "out of memory");
    f->base = head;
    f->have = have;
    f->len = (size_t)file_size;
    f->header_only = 1;
    int rc = have < 8 && file_size >= 8 ? tzr_fail(TZR_EINVAL, "%s: fewer than 8 header bytes given", f->name) : parse_into(f);
    if (rc) {
        tzr_st_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

int tzr_st_parse_header_each(tzr_st_file **out, const void *head, size_t have, uint64_t file_size, const char *name,
                             tzr_st_put_fn put, void *ctx, void *in_place) {
    *out = NULL;
    tzr_st_file *f = file_new(name);
    if (!f) return tzr_fail(TZR_ENOMEM, "out of memory");
    f->base = head;
    f->have = have;
    f->len = (size_t)file_size;
    f->header_only = 1;
    f->put = put;
    f->put_ctx = ctx;
    f->in_place = in_place;
    int rc = have < 8 && file_size >= 8 ? tzr_fail(TZR_EINVAL, "%s: fewer than 8 header bytes given", f->name) : parse_into(f);
    if (rc) {
        tzr_st_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

int tzr_st_open(tzr_st_file **out, const char *path) {
    if (!out) return tzr_fail(TZR_EINVAL, "tzr_st_open: NULL out");
    *out = NULL;
    if (!path || !*path) return tzr_fail(TZR_EINVAL, "tzr_st_open: empty path");
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO: refused below, not waited on */
    if (fd < 0) return tzr_fail(TZR_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return tzr_fail(TZR_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return tzr_fail(TZR_EINVAL, "%s: not a regular file (%s)", path, tzr_file_kind(st.st_mode));
    }
    tzr_st_file *f = file_new(path);
    if (!f) {
        close(fd);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    f->base = (const uint8_t *)"";
    f->len = (size_t)st.st_size;
    /* mmap refuses length 0; an empty file simply parses as too short. */
    if (f->len > 0) {
        void *m = mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            tzr_st_free(f);
            return tzr_fail(TZR_EIO, "%s: cannot map %lld bytes: %s", path, (long long)st.st_size,
                            strerror(e));
        }
        f->map = m;
        f->base = m;
    }
    close(fd); /* the mapping keeps the file */
    int rc = parse_into(f);
    if (rc) {
        tzr_st_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

void tzr_st_take_strings(tzr_st_file *f, tzr_arena *into) { tzr_arena_adopt(into, &f->strings); }

size_t tzr_st_count(const tzr_st_file *f) { return f ? f->n : 0; }

const tzr_st_tensor *tzr_st_get(const tzr_st_file *f, size_t i) {
    return f && f->t && i < f->n ? &f->t[i].pub : NULL;
}

const void *tzr_st_data(const tzr_st_file *f, size_t i) {
    return f && f->t && i < f->n && !f->header_only ? f->base + f->t[i].pub.data_offset : NULL;
}

int tzr_st_find(const tzr_st_file *f, const char *name, size_t name_len, size_t *index) {
    if (!f || (!name && name_len)) return tzr_fail(TZR_EINVAL, "tzr_st_find: NULL argument");
    uint32_t s = f->slots ? f->slots[slot_of(f, name ? name : "", name_len)] : 0;
    if (s) {
        if (index) *index = s - 1;
        return 0;
    }
    char nb[TZR_NAMEBUF];
    return tzr_fail(TZR_ENOTFOUND, "%s: no tensor '%s'", f->name,
                    tzr_printable(name ? name : "", name_len, nb, sizeof nb));
}

size_t tzr_st_metadata_count(const tzr_st_file *f) { return f ? f->n_meta : 0; }

int tzr_st_metadata_get(const tzr_st_file *f, size_t i, const char **key, const char **value) {
    if (!f || i >= f->n_meta)
        return tzr_fail(TZR_EINVAL, "metadata index %zu out of range (%zu entries)", i,
                        f ? f->n_meta : 0);
    if (key) *key = f->meta[2 * i];
    if (value) *value = f->meta[2 * i + 1];
    return 0;
}

void tzr_st_free(tzr_st_file *f) {
    TZR_KEEP_ERROR;
    if (!f) return;
    tzr_arena_free(&f->strings);
    free(f->t);
    tzr_unmap_zeroed(f->slots, f->nslots, sizeof *f->slots);
    for (size_t i = 0; i < 2 * f->n_meta; i++) free(f->meta[i]);
    free(f->meta);
    if (f->map) munmap(f->map, f->len);
    free(f->name);
    free(f);
}

/* ---------------------------------------------------------------- writer */

/* Strict UTF-8 (no overlong forms, surrogates or values past U+10FFFF):
 * exactly what jansson accepts on reading, so whatever the writer emits
 * reads back. NUL is refused too: jansson rejects "\u0000" in strings. */
static int utf8_ok(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c == 0) return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        unsigned cp;
        if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
        else return 0;
        if (n - i < len) return 0;
        for (size_t j = 1; j < len; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += len;
    }
    return 1;
}

/* Growable byte buffer for the header. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) {
                b->oom = 1;
                return;
            }
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}
static void sb_lit(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_u64(sbuf *b, uint64_t v) {
    char t[24];
    sb_put(b, t, (size_t)snprintf(t, sizeof t, "%llu", (unsigned long long)v));
}
/* JSON string with the escapes serde_json (the reference writer) uses:
 * the short forms for " \ \b \f \n \r \t, \u00xx (lowercase hex) for the
 * other control bytes, everything else (UTF-8, DEL, '/') as is. */
static void sb_jstr(sbuf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    sb_put(b, "\"", 1);
    size_t run = 0; /* start of bytes not yet copied */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[7];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (c < 0x20) {
                memcpy(u, "\\u00", 4);
                u[4] = hex[c >> 4];
                u[5] = hex[c & 15];
                u[6] = 0;
                esc = u;
            }
        }
        if (!esc) continue;
        sb_put(b, s + run, i - run);
        sb_lit(b, esc);
        run = i + 1;
    }
    sb_put(b, s + run, n - run);
    sb_put(b, "\"", 1);
}

typedef struct span {
    uint64_t a, b; /* [a, b) already put */
} span;

typedef struct wtensor {
    char *name; /* copy, for messages */
    size_t name_len;
    uint64_t off; /* relative to the data region */
    uint64_t nbytes;
    span *spans; /* sorted, disjoint, not touching */
    size_t nspans, cap;
} wtensor;

struct tzr_st_writer {
    tzr_output *out;
    uint64_t data_start; /* 8 + padded header length */
    wtensor *t;
    size_t n;
    st_run run; /* small puts written together */
};

static void writer_free(tzr_st_writer *w) {
    for (size_t i = 0; i < w->n; i++) {
        free(w->t[i].name);
        free(w->t[i].spans);
    }
    free(w->t);
    st_run_free(&w->run);
    free(w);
}

static void output_discard(tzr_output *o) {
    if (!o) return;
    if (o->abort) o->abort(o);
    if (o->destroy) o->destroy(o);
}

static int cmp_wname(const void *a, const void *b) {
    const wtensor *x = *(wtensor *const *)a, *y = *(wtensor *const *)b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    if (c) return c;
    return x->name_len < y->name_len ? -1 : x->name_len > y->name_len;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Check one declared tensor and fill its writer entry. */
static int check_decl(const tzr_st_tensor *d, size_t i, wtensor *t, const char **st_name) {
    char nb[TZR_NAMEBUF];
    if (!d->name) return tzr_fail(TZR_EINVAL, "safetensors writer: tensor %zu has no name", i);
    const char *pn = tzr_printable(d->name, d->name_len, nb, sizeof nb);
    if (d->name_len == 0) return tzr_fail(TZR_EINVAL, "safetensors writer: tensor %zu has an empty name", i);
    if (!utf8_ok((const unsigned char *)d->name, d->name_len))
        return tzr_fail(TZR_EINVAL, "safetensors writer: tensor %zu name '%s' is not UTF-8 without NUL bytes", i, pn);
    if (d->name_len == 12 && memcmp(d->name, "__metadata__", 12) == 0)
        return tzr_fail(TZR_EINVAL, "safetensors writer: tensor %zu: '__metadata__' is reserved", i);
    tzr_dtype dt = d->dtype;
    if (dt == TZR_DTYPE_UNKNOWN && d->st_dtype && tzr_st_dtype_parse(d->st_dtype, &dt) != 0)
        return tzr_fail_prefix(TZR_ENOTSUP, "safetensors writer: tensor '%s': ", pn);
    *st_name = tzr_st_dtype_name(dt);
    if (!*st_name)
        return tzr_fail(TZR_ENOTSUP, "safetensors writer: tensor '%s': dtype %s has no safetensors equivalent",
                        pn, tzr_dtype_name(dt));
    if (d->ndim > TZR_MAX_DIMS)
        return tzr_fail(TZR_EINVAL, "safetensors writer: tensor '%s': %u dimensions (limit %d)", pn,
                        d->ndim, TZR_MAX_DIMS);
    if (d->ndim && !d->shape)
        return tzr_fail(TZR_EINVAL, "safetensors writer: tensor '%s': NULL shape", pn);
    uint64_t numel = 1, nbytes = 0;
    int zero = 0;
    for (uint32_t k = 0; k < d->ndim; k++) {
        /* jansson (and so our reader) holds JSON integers as int64. */
        if (d->shape[k] > INT64_MAX)
            return tzr_fail(TZR_EINVAL, "safetensors writer: tensor '%s': shape[%u] = %llu is over 2^63-1",
                            pn, k, (unsigned long long)d->shape[k]);
        zero |= d->shape[k] == 0;
    }
    /* Readers (jansson, serde) hold offsets in signed or machine words;
     * a product past INT64_MAX could never be read back. */
    if (!zero) {
        for (uint32_t k = 0; k < d->ndim; k++)
            if (!tzr_mul_ok(numel, d->shape[k], &numel))
                return tzr_fail(TZR_EINVAL, "safetensors writer: tensor '%s': shape overflows", pn);
        if (!tzr_mul_ok(numel, tzr_dtype_size(dt), &nbytes) || nbytes > INT64_MAX)
            return tzr_fail(TZR_EINVAL, "safetensors writer: tensor '%s': size overflows", pn);
    }
    if (d->nbytes != nbytes)
        return tzr_fail(TZR_EINVAL, "safetensors writer: tensor '%s': nbytes %llu but shape and %s give %llu",
                        pn, (unsigned long long)d->nbytes, *st_name, (unsigned long long)nbytes);
    t->name = malloc(d->name_len + 1);
    if (!t->name) return tzr_fail(TZR_ENOMEM, "out of memory");
    memcpy(t->name, d->name, d->name_len);
    t->name[d->name_len] = 0;
    t->name_len = d->name_len;
    t->nbytes = nbytes;
    return 0;
}

static int build_header(tzr_st_writer *w, const tzr_st_tensor *tensors, const char **st_names,
                        const char *const *mk, const char *const *mv, size_t n_meta, sbuf *b) {
    /* Eight bytes for the length, filled in at the end. */
    sb_put(b, "\0\0\0\0\0\0\0\0{", 9);
    int first = 1;
    /* "__metadata__" first, as the reference serializer does. */
    if (n_meta) {
        sb_lit(b, "\"__metadata__\":{");
        for (size_t i = 0; i < n_meta; i++) {
            if (i) sb_put(b, ",", 1);
            sb_jstr(b, mk[i], strlen(mk[i]));
            sb_put(b, ":", 1);
            sb_jstr(b, mv[i], strlen(mv[i]));
        }
        sb_put(b, "}", 1);
        first = 0;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const tzr_st_tensor *d = &tensors[i];
        if (!first) sb_put(b, ",", 1);
        first = 0;
        sb_jstr(b, d->name, d->name_len);
        sb_lit(b, ":{\"dtype\":\"");
        sb_lit(b, st_names[i]);
        sb_lit(b, "\",\"shape\":[");
        for (uint32_t k = 0; k < d->ndim; k++) {
            if (k) sb_put(b, ",", 1);
            sb_u64(b, d->shape[k]);
        }
        sb_lit(b, "],\"data_offsets\":[");
        w->t[i].off = off;
        if (!tzr_add_ok(off, w->t[i].nbytes, &off) || off > INT64_MAX)
            return tzr_fail(TZR_EINVAL, "safetensors writer: total data size overflows");
        sb_u64(b, w->t[i].off);
        sb_put(b, ",", 1);
        sb_u64(b, off);
        sb_lit(b, "]}");
    }
    sb_put(b, "}", 1);
    /* Pad with spaces (valid trailing JSON whitespace) so the data region
     * starts 8-byte aligned, like the reference writer. */
    while ((b->len - 8) % 8) sb_put(b, " ", 1);
    if (b->oom) return tzr_fail(TZR_ENOMEM, "out of memory building the safetensors header");
    uint64_t hlen = b->len - 8;
    if (hlen > TZR_ST_MAX_HEADER)
        return tzr_fail(TZR_ELIMIT, "safetensors writer: header of %llu bytes is over the %llu-byte cap",
                        (unsigned long long)hlen, (unsigned long long)TZR_ST_MAX_HEADER);
    tzr_st64((uint8_t *)b->p, hlen);
    w->data_start = b->len;
    return 0;
}

int tzr_st_writer_open(tzr_st_writer **out, tzr_output *output, const tzr_st_tensor *tensors,
                       size_t n, const char *const *meta_keys, const char *const *meta_values,
                       size_t n_meta) {
    int rc;
    tzr_st_writer *w = NULL;
    const char **st_names = NULL, **keys = NULL;
    wtensor **sorted = NULL;
    sbuf b = {0};
    if (out) *out = NULL;
    if (!out || !output || !output->pwrite_at || (n && !tensors) ||
        (n_meta && (!meta_keys || !meta_values))) {
        rc = tzr_fail(TZR_EINVAL, "tzr_st_writer_open: NULL argument");
        goto fail;
    }
    w = calloc(1, sizeof *w);
    st_names = calloc(n ? n : 1, sizeof *st_names);
    sorted = calloc(n ? n : 1, sizeof *sorted);
    keys = calloc(n_meta ? n_meta : 1, sizeof *keys);
    if (!w || !st_names || !sorted || !keys || !(w->t = calloc(n ? n : 1, sizeof *w->t))) {
        rc = tzr_fail(TZR_ENOMEM, "out of memory");
        goto fail;
    }
    w->out = output;
    st_run_init(&w->run);
    for (size_t i = 0; i < n; i++) {
        w->n = i + 1; /* entries [0, n) are freed by writer_free */
        if ((rc = check_decl(&tensors[i], i, &w->t[i], &st_names[i]))) goto fail;
        sorted[i] = &w->t[i];
    }
    qsort(sorted, n, sizeof *sorted, cmp_wname);
    for (size_t i = 1; i < n; i++)
        if (cmp_wname(&sorted[i - 1], &sorted[i]) == 0) {
            char nb[TZR_NAMEBUF];
            rc = tzr_fail(TZR_EDUP, "safetensors writer: tensor '%s' declared twice",
                          tzr_printable(sorted[i]->name, sorted[i]->name_len, nb, sizeof nb));
            goto fail;
        }
    for (size_t i = 0; i < n_meta; i++) {
        if (!meta_keys[i] || !meta_values[i] ||
            !utf8_ok((const unsigned char *)meta_keys[i], strlen(meta_keys[i])) ||
            !utf8_ok((const unsigned char *)meta_values[i], strlen(meta_values[i]))) {
            rc = tzr_fail(TZR_EINVAL, "safetensors writer: metadata entry %zu is NULL or not UTF-8", i);
            goto fail;
        }
        keys[i] = meta_keys[i];
    }
    qsort(keys, n_meta, sizeof *keys, cmp_str);
    for (size_t i = 1; i < n_meta; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0) {
            char nb[TZR_NAMEBUF];
            rc = tzr_fail(TZR_EDUP, "safetensors writer: metadata key '%s' given twice",
                          tzr_printable(keys[i], strlen(keys[i]), nb, sizeof nb));
            goto fail;
        }
    if ((rc = build_header(w, tensors, st_names, meta_keys, meta_values, n_meta, &b))) goto fail;
    if ((rc = output->pwrite_at(output, b.p, b.len, 0))) goto fail;
    free(b.p);
    free(st_names);
    free(sorted);
    free(keys);
    *out = w;
    return 0;
fail:
    free(b.p);
    free(st_names);
    free(sorted);
    free(keys);
    if (w) writer_free(w);
    output_discard(output);
    return rc;
}

/* Record [a, b) as put, merging with any span it overlaps or touches. */
static int span_add(wtensor *t, uint64_t a, uint64_t b) {
    /* First span that ends at or after a: earlier ones are untouched. */
    size_t lo = 0, hi = t->nspans;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->spans[mid].b < a) lo = mid + 1;
        else hi = mid;
    }
    size_t end = lo;
    while (end < t->nspans && t->spans[end].a <= b) {
        if (t->spans[end].a < a) a = t->spans[end].a;
        if (t->spans[end].b > b) b = t->spans[end].b;
        end++;
    }
    if (end > lo) { /* replace spans [lo, end) with one */
        t->spans[lo] = (span){a, b};
        memmove(t->spans + lo + 1, t->spans + end, (t->nspans - end) * sizeof *t->spans);
        t->nspans -= end - lo - 1;
        return 0;
    }
    if (t->nspans == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 4;
        span *p = realloc(t->spans, cap * sizeof *p);
        if (!p) return tzr_fail(TZR_ENOMEM, "out of memory");
        t->spans = p;
        t->cap = cap;
    }
    memmove(t->spans + lo + 1, t->spans + lo, (t->nspans - lo) * sizeof *t->spans);
    t->spans[lo] = (span){a, b};
    t->nspans++;
    return 0;
}

/* A failed write: name the run's tensors when it was the run's. */
static int run_failure(tzr_st_writer *w, int rc) {
    if (!w->run.run_failed) return rc;
    char a[TZR_NAMEBUF], b[TZR_NAMEBUF];
    const wtensor *f = &w->t[w->run.first], *l = &w->t[w->run.last];
    return tzr_fail_prefix(rc, "safetensors writer: tensors '%s' to '%s' (written as one): ",
                           tzr_printable(f->name, f->name_len, a, sizeof a),
                           tzr_printable(l->name, l->name_len, b, sizeof b));
}

int tzr_st_writer_put(tzr_st_writer *w, size_t i, uint64_t off, const void *data, size_t len) {
    if (!w) return tzr_fail(TZR_EINVAL, "tzr_st_writer_put: NULL writer");
    if (i >= w->n)
        return tzr_fail(TZR_EINVAL, "safetensors writer: tensor index %zu out of range (%zu tensors)", i, w->n);
    wtensor *t = &w->t[i];
    char nb[TZR_NAMEBUF];
    uint64_t end;
    if (!tzr_add_ok(off, len, &end) || end > t->nbytes)
        return tzr_fail(TZR_EINVAL, "safetensors writer: tensor '%s': %zu bytes at %llu run past its %llu bytes",
                        tzr_printable(t->name, t->name_len, nb, sizeof nb), len,
                        (unsigned long long)off, (unsigned long long)t->nbytes);
    if (len == 0) return 0;
    if (!data) return tzr_fail(TZR_EINVAL, "tzr_st_writer_put: NULL data");
    /* Cannot overflow: data_start + every tensor's end was checked to fit. */
    int rc = st_run_put(&w->run, w->out, data, len, w->data_start + t->off + off, i);
    if (rc) return run_failure(w, rc);
    return span_add(t, off, end);
}

int tzr_st_writer_close(tzr_st_writer *w) {
    if (!w) return tzr_fail(TZR_EINVAL, "tzr_st_writer_close: NULL writer");
    int rc = st_run_flush(&w->run, w->out);
    if (rc) rc = run_failure(w, rc);
    for (size_t i = 0; i < w->n && !rc; i++) {
        wtensor *t = &w->t[i];
        if (t->nbytes == 0 || (t->nspans == 1 && t->spans[0].a == 0 && t->spans[0].b == t->nbytes))
            continue;
        uint64_t put = 0;
        for (size_t k = 0; k < t->nspans; k++) put += t->spans[k].b - t->spans[k].a;
        uint64_t hole = t->nspans && t->spans[0].a == 0 ? t->spans[0].b : 0;
        char nb[TZR_NAMEBUF];
        rc = tzr_fail(TZR_EINVAL, "%s: tensor '%s': only %llu of %llu bytes were put (first missing byte %llu)",
                      w->out->name ? w->out->name : "safetensors writer",
                      tzr_printable(t->name, t->name_len, nb, sizeof nb), (unsigned long long)put,
                      (unsigned long long)t->nbytes, (unsigned long long)hole);
    }
    if (!rc && w->out->finish) rc = w->out->finish(w->out);
    {
        TZR_KEEP_ERROR; /* neither abort nor destroy may replace the failure */
        if (rc && w->out->abort) w->out->abort(w->out);
        if (w->out->destroy) w->out->destroy(w->out);
        writer_free(w);
    }
    return rc;
}

void tzr_st_writer_abort(tzr_st_writer *w) {
    TZR_KEEP_ERROR;
    if (!w) return;
    output_discard(w->out);
    writer_free(w);
}
