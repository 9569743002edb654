/* The manifest's tensor entries without a JSON tree (formats/shards.md).
 * jansson's tree of a 100k-tensor manifest (41 MB) took 1.5-2 s and
 * ~290 MB; here the top level is walked by hand, every member but
 * "tensors" is parsed by jansson alone (and checked by the same code as
 * before), and each entry of the shape libtzr writes is read where it
 * lies. Anything else (a structured name, a non-ASCII escape, a number
 * jansson might read otherwise, a duplicate key, an entry the checks
 * would refuse) returns SHARD_RETRY having kept nothing, and the whole
 * document goes through jansson's tree as before: its results and error
 * messages stay the only ones. */
#include "shard_internal.h"

#include <jansson.h>
#include <pthread.h>
#include <string.h>

static int ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t skip_ws(const uint8_t *p, size_t n, size_t i) {
    while (i < n && ws(p[i])) i++;
    return i;
}

/* End of the JSON string at p[i] == '"' (past its closing quote), or 0. */
static size_t scan_string(const uint8_t *p, size_t n, size_t i) {
    for (i++; i < n; i++) {
        if (p[i] == '\\') i++;
        else if (p[i] == '"') return i + 1;
    }
    return 0;
}

/* End of the JSON value at p[i], or 0. Only delimits: jansson checks it. */
static size_t scan_value(const uint8_t *p, size_t n, size_t i) {
    if (i >= n) return 0;
    if (p[i] == '"') return scan_string(p, n, i);
    if (p[i] == '{' || p[i] == '[') {
        size_t depth = 0;
        for (; i < n; i++) {
            if (p[i] == '"') {
                if (!(i = scan_string(p, n, i))) return 0;
                i--;
            } else if (p[i] == '{' || p[i] == '[') {
                depth++;
            } else if (p[i] == '}' || p[i] == ']') {
                if (--depth == 0) return i + 1;
            }
        }
        return 0;
    }
    while (i < n && !ws(p[i]) && p[i] != ',' && p[i] != '}' && p[i] != ']') i++;
    return i;
}

/* A key without escapes or bytes outside printable ASCII: *k, *kl; the
 * index past its ':' and the whitespace after it, or 0. */
static size_t plain_key(const uint8_t *p, size_t n, size_t i, const uint8_t **k, size_t *kl) {
    if (i >= n || p[i] != '"') return 0;
    size_t e = scan_string(p, n, i);
    if (!e) return 0;
    for (size_t j = i + 1; j < e - 1; j++)
        if (p[j] < 0x20 || p[j] >= 0x7f || p[j] == '\\') return 0;
    *k = p + i + 1;
    *kl = e - i - 2;
    i = skip_ws(p, n, e);
    if (i >= n || p[i] != ':') return 0;
    return skip_ws(p, n, i + 1);
}

static int key_is(const uint8_t *k, size_t kl, const char *want) {
    return kl == strlen(want) && memcmp(k, want, kl) == 0;
}

static signed char hex_table[256];
static void hex_init(void) {
    memset(hex_table, -1, sizeof hex_table);
    for (int c = 0; c < 10; c++) hex_table['0' + c] = (signed char)c;
    for (int c = 0; c < 6; c++) hex_table['a' + c] = hex_table['A' + c] = (signed char)(10 + c);
}
static pthread_once_t hex_once = PTHREAD_ONCE_INIT;

static int hexval(uint8_t c) { return hex_table[c]; }

/* A string's bytes as jansson decodes them (with JSON_ALLOW_NUL) into
 * out (cap bytes): printable ASCII, the short escapes and \uXXXX outside
 * the surrogates (UTF-8 encoded). Index past it, or 0 for anything else. */
static size_t fast_string(const uint8_t *p, size_t n, size_t i, char *out, size_t cap, size_t *len) {
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

/* An integer of 1 to 18 digits, no sign, no leading zero, not followed
 * by a fraction or exponent (what jansson reads as the same integer). */
static size_t fast_uint(const uint8_t *p, size_t n, size_t i, uint64_t *v) {
    size_t start = i;
    uint64_t x = 0;
    while (i < n && p[i] >= '0' && p[i] <= '9' && i - start < 19) x = x * 10 + (uint64_t)(p[i++] - '0');
    size_t len = i - start;
    if (len == 0 || len > 18 || (len > 1 && p[start] == '0')) return 0;
    if (i < n && (p[i] == '.' || p[i] == 'e' || p[i] == 'E' || (p[i] >= '0' && p[i] <= '9'))) return 0;
    *v = x;
    return i;
}

/* '[' uint (',' uint)* ']' or '[]' into v (at most cap). */
static size_t fast_uints(const uint8_t *p, size_t n, size_t i, uint64_t *v, size_t cap, size_t *count) {
    if (i >= n || p[i] != '[') return 0;
    *count = 0;
    i = skip_ws(p, n, i + 1);
    if (i < n && p[i] == ']') return i + 1;
    for (;;) {
        if (*count == cap || !(i = fast_uint(p, n, i, &v[*count]))) return 0;
        ++*count;
        i = skip_ws(p, n, i);
        if (i < n && p[i] == ']') return i + 1;
        if (i >= n || p[i] != ',') return 0;
        i = skip_ws(p, n, i + 1);
    }
}

/* "...64 hex digits..." into 32 bytes (either case, as libsodium's
 * decoder the tree parse uses; a table: that decoder was a tenth of the
 * open). */
static size_t fast_sha(const uint8_t *p, size_t n, size_t i, uint8_t out[32]) {
    if (i + 66 > n || p[i] != '"' || p[i + 65] != '"') return 0;
    const uint8_t *h = p + i + 1;
    int bad = 0;
    for (int k = 0; k < 32; k++) {
        int a = hexval(h[2 * k]), b = hexval(h[2 * k + 1]);
        bad |= a | b; /* -1 for a non-hex digit */
        out[k] = (uint8_t)(((unsigned)a & 15) << 4 | ((unsigned)b & 15));
    }
    return bad < 0 ? 0 : i + 66;
}

/* One entry's fields, and room for its slices (grown as needed). */
typedef struct fast_entry {
    char name[1024], dtype[256];
    size_t name_len, dtype_len, ndim, nsl;
    uint64_t shape[TZR_MAX_DIMS];
    int dim, replicated, has_sha;
    uint8_t sha[32];
    shard_slice *sl;
    size_t sl_cap;
    struct fast_hs {
        uint64_t shard;
        uint8_t sha[32];
    } *hs; /* header_sha256 members */
    size_t nhs, hs_cap;
} fast_entry;

static int slice_room(fast_entry *f) {
    if (f->nsl < f->sl_cap) return 0;
    size_t cap = f->sl_cap ? 2 * f->sl_cap : 16;
    shard_slice *g = cap > TZR_SHARD_MAX + 1 ? NULL : realloc(f->sl, cap * sizeof *g);
    if (!g) return -1;
    f->sl = g;
    f->sl_cap = cap;
    return 0;
}

/* {"shard": S, "dim": D, "offset": O, "length": L} in any order. */
static size_t fast_slice(const uint8_t *p, size_t n, size_t i, fast_entry *f) {
    if (i >= n || p[i] != '{' || slice_room(f)) return 0;
    uint64_t v[4];
    int seen = 0;
    i = skip_ws(p, n, i + 1);
    while (seen != 15) {
        const uint8_t *k;
        size_t kl;
        if (!(i = plain_key(p, n, i, &k, &kl))) return 0;
        int b = key_is(k, kl, "shard") ? 0 : key_is(k, kl, "dim") ? 1 : key_is(k, kl, "offset") ? 2
              : key_is(k, kl, "length") ? 3 : -1;
        if (b < 0 || seen & (1 << b) || !(i = fast_uint(p, n, i, &v[b]))) return 0;
        seen |= 1 << b;
        i = skip_ws(p, n, i);
        if (seen != 15) {
            if (i >= n || p[i] != ',') return 0;
            i = skip_ws(p, n, i + 1);
        }
    }
    if (i >= n || p[i] != '}' || v[0] > TZR_SHARD_MAX) return 0;
    if (f->nsl == 0) f->dim = v[1] < TZR_MAX_DIMS ? (int)v[1] : -1;
    if ((uint64_t)f->dim != v[1]) return 0;
    f->sl[f->nsl++] = (shard_slice){(int)v[0], v[2], v[3], 0, 0, {0}};
    return i + 1;
}

/* "slices": [slice, ...] or "replicated": [shard, ...]; non-empty. */
static size_t fast_slices(const uint8_t *p, size_t n, size_t i, fast_entry *f) {
    if (i >= n || p[i] != '[') return 0;
    i = skip_ws(p, n, i + 1);
    for (;;) {
        if (f->replicated) {
            uint64_t s;
            if (slice_room(f) || !(i = fast_uint(p, n, i, &s)) || s > TZR_SHARD_MAX) return 0;
            f->sl[f->nsl++] = (shard_slice){(int)s, 0, 0, 0, 0, {0}};
        } else if (!(i = fast_slice(p, n, i, f))) {
            return 0;
        }
        i = skip_ws(p, n, i);
        if (i < n && p[i] == ']') return i + 1;
        if (i >= n || p[i] != ',') return 0;
        i = skip_ws(p, n, i + 1);
    }
}

/* {"0": "hex", "1": "hex"}: keys written as "%d" writes a shard. */
static size_t fast_header_shas(const uint8_t *p, size_t n, size_t i, fast_entry *f) {
    if (i >= n || p[i] != '{') return 0;
    i = skip_ws(p, n, i + 1);
    if (i < n && p[i] == '}') return i + 1;
    for (;;) {
        const uint8_t *k;
        size_t kl;
        uint64_t s;
        if (f->nhs == f->hs_cap) {
            size_t cap = f->hs_cap ? 2 * f->hs_cap : 16;
            struct fast_hs *g = cap > TZR_SHARD_MAX + 1 ? NULL : realloc(f->hs, cap * sizeof *g);
            if (!g) return 0;
            f->hs = g;
            f->hs_cap = cap;
        }
        /* Increasing, as written (slice order): no duplicate, of which
         * jansson would keep the last. */
        if (!(i = plain_key(p, n, i, &k, &kl)) || fast_uint(k, kl, 0, &s) != kl || s > TZR_SHARD_MAX ||
            (f->nhs && s <= f->hs[f->nhs - 1].shard))
            return 0;
        f->hs[f->nhs].shard = s;
        if (!(i = fast_sha(p, n, i, f->hs[f->nhs].sha))) return 0;
        f->nhs++;
        i = skip_ws(p, n, i);
        if (i < n && p[i] == '}') return i + 1;
        if (i >= n || p[i] != ',') return 0;
        i = skip_ws(p, n, i + 1);
    }
}

/* One tensor entry at p[i]; index past it, or 0. Unknown members are
 * checked by jansson and ignored, as the tree parse ignores them. */
static size_t fast_entry_parse(const uint8_t *p, size_t n, size_t i, fast_entry *f) {
    enum { NAME = 1, DTYPE = 2, SHAPE = 4, SLICES = 8, SHA = 16, HSHA = 32 };
    int seen = 0;
    f->nsl = f->nhs = 0;
    f->has_sha = 0;
    f->dim = TZR_SHARD_REPLICATED;
    if (i >= n || p[i] != '{') return 0;
    i = skip_ws(p, n, i + 1);
    if (i < n && p[i] == '}') return 0;
    for (;;) {
        const uint8_t *k;
        size_t kl;
        if (!(i = plain_key(p, n, i, &k, &kl))) return 0;
        int bit = key_is(k, kl, "name") ? NAME : key_is(k, kl, "dtype") ? DTYPE : key_is(k, kl, "shape") ? SHAPE
                : key_is(k, kl, "slices") || key_is(k, kl, "replicated") ? SLICES : key_is(k, kl, "sha256") ? SHA
                : key_is(k, kl, "header_sha256") ? HSHA : 0;
        if (bit & seen) return 0; /* a duplicate, or both slices and replicated */
        seen |= bit;
        switch (bit) {
        case NAME: i = fast_string(p, n, i, f->name, sizeof f->name, &f->name_len); break;
        case DTYPE: i = fast_string(p, n, i, f->dtype, sizeof f->dtype, &f->dtype_len); break;
        case SHAPE: i = fast_uints(p, n, i, f->shape, TZR_MAX_DIMS, &f->ndim); break;
        case SLICES:
            f->replicated = k[0] == 'r';
            i = fast_slices(p, n, i, f);
            break;
        case SHA:
            i = fast_sha(p, n, i, f->sha);
            f->has_sha = 1;
            break;
        case HSHA: i = fast_header_shas(p, n, i, f); break;
        default: {
            size_t e = scan_value(p, n, i);
            json_t *v = e ? json_loadb((const char *)p + i, e - i, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL) : NULL;
            if (!v) return 0;
            json_decref(v);
            i = e;
        }
        }
        if (!i) return 0;
        i = skip_ws(p, n, i);
        if (i < n && p[i] == '}') break;
        if (i >= n || p[i] != ',') return 0;
        i = skip_ws(p, n, i + 1);
    }
    if ((seen & (NAME | DTYPE | SHAPE | SLICES)) != (NAME | DTYPE | SHAPE | SLICES)) return 0;
    if (!f->replicated && (f->dim < 0 || (size_t)f->dim >= f->ndim)) return 0;
    return i + 1;
}

static int add_entry(shard_table *tb, fast_entry *f) {
    shard_entry *e = shard_table_add(tb, f->name, f->name_len, f->dtype, f->dtype_len, (uint32_t)f->ndim, f->shape,
                                     f->replicated ? TZR_SHARD_REPLICATED : f->dim);
    if (!e) return TZR_ENOMEM;
    shard_slice *sl = tzr_arena_alloc(&tb->arena, f->nsl * sizeof *sl);
    if (!sl) return tzr_fail(TZR_ENOMEM, "out of memory");
    memcpy(sl, f->sl, f->nsl * sizeof *sl);
    e->slices = sl;
    e->nslices = e->slice_cap = f->nsl;
    if (f->has_sha) {
        memcpy(e->pub.sha256, f->sha, 32);
        e->pub.has_sha256 = 1;
    }
    for (size_t q = 0; q < f->nhs; q++)
        for (size_t k = 0; k < f->nsl; k++)
            if ((uint64_t)sl[k].shard == f->hs[q].shard) {
                memcpy(sl[k].header_sha, f->hs[q].sha, 32);
                sl[k].has_header_sha = 1;
            }
    return 0;
}

/* "tensors": [entry, ...] at p[i]; index past it, 0 to retry, or
 * (size_t)-1 with *rc set. */
static size_t fast_tensors(const uint8_t *p, size_t n, size_t i, shard_table *tb, int *rc) {
    if (i >= n || p[i] != '[') return 0;
    /* The shortest entry, {"name":"","dtype":"","shape":[],"replicated":[0]},
     * is 50 bytes: room for as many as the rest could hold (address space). */
    if ((*rc = shard_table_reserve(tb, (n - i) / 50 + 1))) return (size_t)-1;
    fast_entry *f = calloc(1, sizeof *f);
    if (!f) return *rc = tzr_fail(TZR_ENOMEM, "out of memory"), (size_t)-1;
    i = skip_ws(p, n, i + 1);
    if (i < n && p[i] == ']') {
        i++;
        goto out;
    }
    for (;;) {
        if (!(i = fast_entry_parse(p, n, i, f))) goto out;
        if ((*rc = add_entry(tb, f))) {
            i = (size_t)-1;
            goto out;
        }
        i = skip_ws(p, n, i);
        if (i < n && p[i] == ']') {
            i++;
            break;
        }
        if (i >= n || p[i] != ',') {
            i = 0;
            break;
        }
        i = skip_ws(p, n, i + 1);
    }
out:
    free(f->sl);
    free(f->hs);
    free(f);
    return i;
}

int shard_manifest_scan(const char *text, size_t len, shard_table *tb, json_t **root_out) {
    const uint8_t *p = (const uint8_t *)text;
    size_t n = len, i = skip_ws(p, n, 0);
    int rc = 0;
    *root_out = NULL;
    pthread_once(&hex_once, hex_init);
    if (i >= n || p[i] != '{') return SHARD_RETRY;
    json_t *root = json_object();
    if (!root) return tzr_fail(TZR_ENOMEM, "out of memory");
    i = skip_ws(p, n, i + 1);
    if (i < n && p[i] == '}') goto end;
    for (;;) {
        const uint8_t *k;
        size_t kl;
        if (!(i = plain_key(p, n, i, &k, &kl))) goto retry;
        char key[64];
        if (kl >= sizeof key) goto retry;
        memcpy(key, k, kl);
        key[kl] = 0;
        if (json_object_get(root, key)) goto retry; /* a duplicate: jansson keeps the last */
        if (strcmp(key, "tensors") == 0) {
            size_t e = fast_tensors(p, n, i, tb, &rc);
            if (e == (size_t)-1) goto fail;
            if (!e) goto retry;
            /* The checks want an array here; the entries are in tb. */
            if (json_object_set_new(root, key, json_array())) goto nomem;
            i = e;
        } else {
            size_t e = scan_value(p, n, i);
            json_t *v = e ? json_loadb(text + i, e - i, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL) : NULL;
            if (!v) goto retry;
            if (json_object_set_new(root, key, v)) goto nomem;
            i = e;
        }
        i = skip_ws(p, n, i);
        if (i < n && p[i] == '}') break;
        if (i >= n || p[i] != ',') goto retry;
        i = skip_ws(p, n, i + 1);
    }
end:
    if (skip_ws(p, n, i + 1) != n) goto retry;
    *root_out = root;
    return 0;
nomem:
    rc = tzr_fail(TZR_ENOMEM, "out of memory");
fail:
    json_decref(root);
    return rc;
retry:
    json_decref(root);
    return SHARD_RETRY;
}
