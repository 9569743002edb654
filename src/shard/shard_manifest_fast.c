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
#include "thread.h"
#include "json_scan.h"
#include "shard_internal.h"

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

static int key_is(const uint8_t *k, size_t kl, const char *want) {
    return kl == strlen(want) && memcmp(k, want, kl) == 0;
}

/* One entry's fields, and room for its slices (grown as needed). */
typedef struct fast_entry {
    char name[1024], dtype[256];
    size_t name_len, dtype_len, ndim, nsl;
    const uint8_t *dtype_raw; /* the text dtype was decoded from, quotes included */
    size_t dtype_raw_len;
    uint64_t shape[TZR_MAX_DIMS];
    int dim, replicated, split, has_sha;
    int nshards; /* the manifest's shard_count, read before "tensors" (0: not) */
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

/* The literal text lit at p[i]: index past it, or 0. */
static size_t lit(const uint8_t *p, size_t n, size_t i, const char *lit, size_t len) {
    return n - i >= len && memcmp(p + i, lit, len) == 0 ? i + len : 0;
}
#define LIT(p, n, i, s) lit(p, n, i, s, sizeof s - 1)

/* {"shard":S,"dim":D,"offset":O,"length":L} exactly as libtzr writes it
 * (key by key, the general path below was a third of the scan); index
 * past it, or 0 to read it the general way. */
static size_t fast_slice_written(const uint8_t *p, size_t n, size_t i, uint64_t v[4]) {
    if ((i = LIT(p, n, i, "{\"shard\":")) && (i = tzr_js_uint(p, n, i, &v[0])) && (i = LIT(p, n, i, ",\"dim\":")) &&
        (i = tzr_js_uint(p, n, i, &v[1])) && (i = LIT(p, n, i, ",\"offset\":")) && (i = tzr_js_uint(p, n, i, &v[2])) &&
        (i = LIT(p, n, i, ",\"length\":")) && (i = tzr_js_uint(p, n, i, &v[3])))
        return i;
    return 0;
}

/* {"shard": S, "dim": D, "offset": O, "length": L} in any order. */
static size_t fast_slice(const uint8_t *p, size_t n, size_t i, fast_entry *f) {
    if (i >= n || p[i] != '{' || slice_room(f)) return 0;
    uint64_t v[4];
    int seen = 0;
    size_t w = fast_slice_written(p, n, i, v);
    if (w) {
        i = w;
        goto got;
    }
    i = tzr_js_skip_ws(p, n, i + 1);
    while (seen != 15) {
        const uint8_t *k;
        size_t kl;
        if (!(i = tzr_js_key(p, n, i, &k, &kl))) return 0;
        int b = key_is(k, kl, "shard") ? 0 : key_is(k, kl, "dim") ? 1 : key_is(k, kl, "offset") ? 2
              : key_is(k, kl, "length") ? 3 : -1;
        if (b < 0 || seen & (1 << b) || !(i = tzr_js_uint(p, n, i, &v[b]))) return 0;
        seen |= 1 << b;
        i = tzr_js_skip_ws(p, n, i);
        if (seen != 15) {
            if (i >= n || p[i] != ',') return 0;
            i = tzr_js_skip_ws(p, n, i + 1);
        }
    }
got:
    if (i >= n || p[i] != '}' || v[0] > TZR_SHARD_MAX) return 0;
    if (f->nsl == 0) f->dim = v[1] < TZR_MAX_DIMS ? (int)v[1] : -1;
    if ((uint64_t)f->dim != v[1]) return 0;
    f->sl[f->nsl++] = (shard_slice){(int)v[0], v[2], v[3], 0, NULL};
    return i + 1;
}

/* "slices": [slice, ...] or "replicated": [shard, ...]; non-empty. */
static size_t fast_slices(const uint8_t *p, size_t n, size_t i, fast_entry *f) {
    if (i >= n || p[i] != '[') return 0;
    i = tzr_js_skip_ws(p, n, i + 1);
    for (;;) {
        if (f->replicated) {
            uint64_t s;
            if (slice_room(f) || !(i = tzr_js_uint(p, n, i, &s)) || s > TZR_SHARD_MAX) return 0;
            f->sl[f->nsl++] = (shard_slice){(int)s, 0, 0, 0, NULL};
        } else if (!(i = fast_slice(p, n, i, f))) {
            return 0;
        }
        i = tzr_js_skip_ws(p, n, i);
        if (i < n && p[i] == ']') return i + 1;
        if (i >= n || p[i] != ',') return 0;
        i = tzr_js_skip_ws(p, n, i + 1);
    }
}

/* {"0": "hex", "1": "hex"}: keys written as "%d" writes a shard. */
static size_t fast_header_shas(const uint8_t *p, size_t n, size_t i, fast_entry *f) {
    if (i >= n || p[i] != '{') return 0;
    i = tzr_js_skip_ws(p, n, i + 1);
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
        if (!(i = tzr_js_key(p, n, i, &k, &kl)) || !kl || tzr_js_uint(k, kl, 0, &s) != kl || s > TZR_SHARD_MAX ||
            (f->nhs && s <= f->hs[f->nhs - 1].shard))
            return 0;
        f->hs[f->nhs].shard = s;
        if (!(i = tzr_js_sha256(p, n, i, f->hs[f->nhs].sha))) return 0;
        f->nhs++;
        i = tzr_js_skip_ws(p, n, i);
        if (i < n && p[i] == '}') return i + 1;
        if (i >= n || p[i] != ',') return 0;
        i = tzr_js_skip_ws(p, n, i + 1);
    }
}

enum { NAME = 1, DTYPE = 2, SHAPE = 4, SLICES = 8, SHA = 16, HSHA = 32 };

/* Which member of an entry key k names (0: one it does not know), by
 * length first: a chain of compares was a tenth of the scan. */
static int entry_key(const uint8_t *k, size_t kl) {
    switch (kl) {
    case 4: return memcmp(k, "name", 4) ? 0 : NAME;
    case 5: return !memcmp(k, "dtype", 5) ? DTYPE : !memcmp(k, "shape", 5) ? SHAPE : !memcmp(k, "split", 5) ? SLICES : 0;
    case 6: return !memcmp(k, "slices", 6) ? SLICES : !memcmp(k, "sha256", 6) ? SHA : 0;
    case 10: return memcmp(k, "replicated", 10) ? 0 : SLICES;
    case 13: return memcmp(k, "header_sha256", 13) ? 0 : HSHA;
    default: return 0;
    }
}

/* One tensor entry at p[i]; index past it, or 0. Unknown members are
 * checked by jansson and ignored, as the tree parse ignores them. */
static size_t fast_entry_parse(const uint8_t *p, size_t n, size_t i, fast_entry *f) {
    int seen = 0;
    f->nsl = f->nhs = 0;
    f->has_sha = f->split = 0;
    f->dim = TZR_SHARD_REPLICATED;
    if (i >= n || p[i] != '{') return 0;
    i = tzr_js_skip_ws(p, n, i + 1);
    if (i < n && p[i] == '}') return 0;
    for (;;) {
        const uint8_t *k;
        size_t kl;
        if (!(i = tzr_js_key(p, n, i, &k, &kl))) return 0;
        int bit = entry_key(k, kl);
        if (bit & seen) return 0; /* a duplicate, or both slices and replicated */
        seen |= bit;
        switch (bit) {
        case NAME: i = tzr_js_string(p, n, i, f->name, sizeof f->name, &f->name_len); break;
        case DTYPE: {
            /* The previous entry's dtype text again (the rule): its
             * decoding is still in f->dtype (the escape in every opaque
             * dtype made this decode a tenth of the scan). */
            size_t at = i, e = tzr_js_string_end(p, n, i);
            if (e && e - at == f->dtype_raw_len && memcmp(p + at, f->dtype_raw, e - at) == 0) {
                i = e;
                break;
            }
            f->dtype_raw_len = 0;
            if ((i = tzr_js_string(p, n, at, f->dtype, sizeof f->dtype, &f->dtype_len))) {
                f->dtype_raw = p + at;
                f->dtype_raw_len = i - at;
            }
            break;
        }
        case SHAPE: i = tzr_js_uints(p, n, i, f->shape, TZR_MAX_DIMS, &f->ndim); break;
        case SLICES:
            f->replicated = k[0] == 'r';
            if (k[1] == 'p') { /* "split": D over every shard (version 2) */
                uint64_t d = 0;
                f->split = 1;
                i = tzr_js_uint(p, n, i, &d);
                f->dim = d < TZR_MAX_DIMS ? (int)d : -1;
            } else {
                i = fast_slices(p, n, i, f);
            }
            break;
        case SHA:
            i = tzr_js_sha256(p, n, i, f->sha);
            f->has_sha = 1;
            break;
        case HSHA: i = fast_header_shas(p, n, i, f); break;
        default: {
            size_t e = tzr_js_value_end(p, n, i);
            json_t *v = e ? json_loadb((const char *)p + i, e - i, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL) : NULL;
            if (!v) return 0;
            json_decref(v);
            i = e;
        }
        }
        if (!i) return 0;
        i = tzr_js_skip_ws(p, n, i);
        if (i < n && p[i] == '}') break;
        if (i >= n || p[i] != ',') return 0;
        i = tzr_js_skip_ws(p, n, i + 1);
    }
    if ((seen & (NAME | DTYPE | SHAPE | SLICES)) != (NAME | DTYPE | SHAPE | SLICES)) return 0;
    if (f->split && f->nshards < 1) return 0;
    if (!f->replicated && (f->dim < 0 || (size_t)f->dim >= f->ndim)) return 0;
    return i + 1;
}

static int add_entry(shard_table *tb, fast_entry *f) {
    shard_entry *e = shard_table_add(tb, f->name, f->name_len, f->dtype, f->dtype_len, (uint32_t)f->ndim, f->shape,
                                     f->replicated ? TZR_SHARD_REPLICATED : f->dim);
    if (!e) return TZR_ENOMEM;
    shard_slice *sl;
    if (f->split) {
        if (shard_entry_split(tb, e, f->nhs == 0)) return tzr_fail(TZR_ENOMEM, "out of memory");
        sl = e->slices;
    } else {
        sl = tzr_arena_alloc(&tb->arena, f->nsl * sizeof *sl);
        if (!sl) return tzr_fail(TZR_ENOMEM, "out of memory");
        memcpy(sl, f->sl, f->nsl * sizeof *sl);
        e->slices = sl;
        e->nslices = e->slice_cap = f->nsl;
    }
    if (f->has_sha) {
        memcpy(e->pub.sha256, f->sha, 32);
        e->pub.has_sha256 = 1;
    }
    for (size_t q = 0; q < f->nhs; q++)
        for (size_t k = 0; k < e->nslices; k++)
            if ((uint64_t)sl[k].shard == f->hs[q].shard) {
                if (shard_slice_set_sha(&tb->arena, &sl[k], f->hs[q].sha)) return TZR_ENOMEM;
            }
    return 0;
}

/* The second half of a long entry list, read on another thread while
 * this one reads the first (the scan of a 100k-tensor manifest was half of
 * its open). It starts at a '{' after the middle that follows "}," and
 * reads as an entry. Such a place may still lie inside one (a slice, a
 * name): its entries are taken only if the first half ends exactly where
 * they begin, and from an entry's start the rest of the list reads the
 * same whoever reads it. */
size_t shard_scan_split_min = (size_t)1 << 20;

typedef struct half {
    const uint8_t *p;
    size_t n, from;      /* where to look for its first entry */
    shard_table tb;      /* its entries (arena and array of its own) */
    atomic_size_t start; /* 0: looking; SIZE_MAX: none; else its first entry's '{' */
    atomic_int stop;     /* the first half went past start, or ended */
    size_t end;          /* past the list's ']', or 0 */
} half;

/* The entries of p[i] (an entry's '{') to the list's end into tb; index
 * past its ']', 0 for anything else, or (size_t)-1 with *rc set. With h,
 * stops where h's entries start (*met = 1) unless h went past; with
 * stop, gives up when it is set. */
static size_t entries(const uint8_t *p, size_t n, size_t i, shard_table *tb, fast_entry *f, int *rc, half *h,
                      int *met, atomic_int *stop) {
    for (;;) {
        if (h && i >= h->from) {
            size_t s = atomic_load_explicit(&h->start, memory_order_acquire);
            if (s == i) return *met = 1, i;
            if (s == SIZE_MAX || (s && s < i)) { /* none, or past it: on alone */
                atomic_store(&h->stop, 1);
                h = NULL;
            }
        }
        if (stop && atomic_load_explicit(stop, memory_order_relaxed)) return 0;
        if (!(i = fast_entry_parse(p, n, i, f))) return 0;
        if ((*rc = add_entry(tb, f))) return (size_t)-1;
        i = tzr_js_skip_ws(p, n, i);
        if (i < n && p[i] == ']') return i + 1;
        if (i >= n || p[i] != ',') return 0;
        i = tzr_js_skip_ws(p, n, i + 1);
    }
}

static void *half_worker(void *arg) {
    half *h = arg;
    const uint8_t *p = h->p;
    size_t n = h->n, i = h->from, s = SIZE_MAX;
    fast_entry *f = calloc(1, sizeof *f);
    int rc = 0, met = 0;
    if (!f || shard_table_reserve(&h->tb, (n - i) / 50 + 1)) goto out;
    f->nshards = h->tb.nshards;
    /* At most a few tries: the first "}," and '{' after the middle is
     * an entry's start unless the text is unusual. */
    for (int tries = 0; tries < 64 && i < n; tries++) {
        const uint8_t *c = memchr(p + i, '}', n - i);
        if (!c) break;
        size_t j = tzr_js_skip_ws(p, n, (size_t)(c - p) + 1);
        i = (size_t)(c - p) + 1;
        if (j >= n || p[j] != ',') continue;
        j = tzr_js_skip_ws(p, n, j + 1);
        if (j >= n || p[j] != '{') continue;
        size_t e = fast_entry_parse(p, n, j, f);
        if (!e) continue;
        s = j;
        if (add_entry(&h->tb, f)) goto out;
        atomic_store_explicit(&h->start, s, memory_order_release);
        e = tzr_js_skip_ws(p, n, e);
        if (e < n && p[e] == ']') h->end = e + 1;
        else if (e < n && p[e] == ',')
            h->end = entries(p, n, tzr_js_skip_ws(p, n, e + 1), &h->tb, f, &rc, NULL, &met, &h->stop);
        if (h->end == (size_t)-1) h->end = 0;
        break;
    }
out:
    if (!atomic_load(&h->start)) atomic_store_explicit(&h->start, SIZE_MAX, memory_order_release);
    if (f) free(f->sl), free(f->hs);
    free(f);
    return NULL;
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
    f->nshards = tb->nshards;
    i = tzr_js_skip_ws(p, n, i + 1);
    if (i < n && p[i] == ']') {
        i++;
        goto out;
    }
    /* Long lists (~2,500 entries and up) in two halves when there is a
     * second core. */
    half *h = NULL;
    pthread_t th;
    size_t min = shard_scan_split_min;
    if (n - i >= min && (min == 0 || sysconf(_SC_NPROCESSORS_ONLN) > 1) && (h = calloc(1, sizeof *h))) {
        h->p = p;
        h->n = n;
        h->tb.nshards = tb->nshards;
        h->from = i + (n - i) / 2;
        if (tzr_thread_start(&th, half_worker, h)) free(h), h = NULL;
    }
    int met = 0;
    i = entries(p, n, i, tb, f, rc, h, &met, NULL);
    if (h) {
        if (!met) atomic_store(&h->stop, 1); /* its entries are not needed */
        pthread_join(th, NULL);
        if (met && h->end && !(*rc = shard_table_reserve(tb, tb->n + h->tb.n))) {
            /* Its entries after ours (no name index yet: none to update). */
            memcpy(tb->t + tb->n, h->tb.t, h->tb.n * sizeof *tb->t);
            tb->n += h->tb.n;
            tb->nshared += h->tb.nshared;
            tzr_arena_adopt(&tb->arena, &h->tb.arena);
            i = h->end;
        } else if (*rc) {
            i = (size_t)-1;
        } else if (met) {
            /* It failed, or gave up: from here on alone. */
            i = entries(p, n, i, tb, f, rc, NULL, &met, NULL);
        }
        shard_table_free(&h->tb);
        free(h);
    }
out:
    free(f->sl);
    free(f->hs);
    free(f);
    return i;
}

int shard_manifest_scan(const char *text, size_t len, shard_table *tb, json_t **root_out) {
    const uint8_t *p = (const uint8_t *)text;
    size_t n = len, i = tzr_js_skip_ws(p, n, 0);
    int rc = 0;
    *root_out = NULL;
    if (i >= n || p[i] != '{') return SHARD_RETRY;
    json_t *root = json_object();
    if (!root) return tzr_fail(TZR_ENOMEM, "out of memory");
    i = tzr_js_skip_ws(p, n, i + 1);
    if (i < n && p[i] == '}') goto end;
    for (;;) {
        const uint8_t *k;
        size_t kl;
        if (!(i = tzr_js_key(p, n, i, &k, &kl))) goto retry;
        char key[64];
        if (kl >= sizeof key) goto retry;
        memcpy(key, k, kl);
        key[kl] = 0;
        if (json_object_get(root, key)) goto retry; /* a duplicate: jansson keeps the last */
        if (strcmp(key, "tensors") == 0) {
            /* "split" entries cut over every shard: the count, if given
             * before (libtzr writes it first; else jansson reads it all) */
            json_t *jn = json_object_get(root, "shard_count");
            json_int_t ns = json_is_integer(jn) ? json_integer_value(jn) : 0;
            tb->nshards = ns >= 1 && ns <= TZR_SHARD_MAX ? (int)ns : 0;
            size_t e = fast_tensors(p, n, i, tb, &rc);
            if (e == (size_t)-1) goto fail;
            if (!e) goto retry;
            /* The checks want an array here; the entries are in tb. */
            if (json_object_set_new(root, key, json_array())) goto nomem;
            i = e;
        } else {
            size_t e = tzr_js_value_end(p, n, i);
            json_t *v = e ? json_loadb(text + i, e - i, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL) : NULL;
            if (!v) goto retry;
            if (json_object_set_new(root, key, v)) goto nomem;
            i = e;
        }
        i = tzr_js_skip_ws(p, n, i);
        if (i < n && p[i] == '}') break;
        if (i >= n || p[i] != ',') goto retry;
        i = tzr_js_skip_ws(p, n, i + 1);
    }
end:
    if (tzr_js_skip_ws(p, n, i + 1) != n) goto retry;
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
