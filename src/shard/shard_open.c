/* Opening a sharded checkpoint: the manifest is parsed and checked, then
 * every shard file is opened and must hold each slice the manifest gives
 * it, with the same dtype and the expected local shape. A plain .tensors
 * file opens as a one-shard set holding everything replicated. */
#include "thread.h"
#include "hash.h"
#include "http_internal.h"
#include "shard_internal.h"
#include "scheme.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Ends with suffix (a URL: before its query string). */
static int ends_with(const char *s, const char *suffix) {
    size_t a = tzr_is_url(s) ? strcspn(s, "?#") : strlen(s), b = strlen(suffix);
    return a >= b && strncmp(s + a - b, suffix, b) == 0;
}

static int open_plain(tzr_shard_set *s, const char *path) {
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    ro.verify = s->verify;
    ro.crypt = s->crypt;
    ro.http = s->http;
    s->tb.nshards = 1;
    s->tb.files = calloc(1, sizeof *s->tb.files);
    s->tb.sizes = calloc(1, sizeof *s->tb.sizes);
    s->readers = calloc(1, sizeof *s->readers);
    if (!s->tb.files || !s->tb.sizes || !s->readers) return tzr_fail(TZR_ENOMEM, "out of memory");
    int rc = tzr_reader_open(&s->readers[0], path, &ro);
    if (rc) return rc;
    tzr_reader *r = s->readers[0];
    s->tb.sizes[0] = tzr_reader_source(r)->size;
    for (size_t i = 0; i < tzr_reader_count(r); i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        shard_entry *e = shard_table_add(&s->tb, t->name, t->name_len, t->dtype_str, t->dtype_len, t->ndim, t->shape,
                                         TZR_SHARD_REPLICATED);
        if (!e || shard_entry_add_slice(&s->tb, e, 0, 0, 0)) return TZR_ENOMEM;
        e->slices[0].local = i;
    }
    return 0;
}

/* Where shard file NAME of the manifest at path lives: next to it, in
 * the same directory or under the same URL prefix (query string dropped;
 * an http(s) name is percent-encoded, an s3:// key is raw). */
int shard_location(const char *manifest, const char *name, char *buf, size_t cap) {
    int url = tzr_is_url(manifest);
    size_t end = url ? strcspn(manifest, "?#") : strlen(manifest);
    size_t dir = end;
    while (dir > 0 && manifest[dir - 1] != '/') dir--;
    char *enc = NULL;
    if (url && tzr_path_kind(manifest) != TZR_PATH_S3 && !(enc = tzr_uri_encode(name, strlen(name), 0)))
        return tzr_fail(TZR_ENOMEM, "out of memory");
    int n = snprintf(buf, cap, "%.*s%s", (int)dir, manifest, enc ? enc : name);
    free(enc);
    if (n < 0 || (size_t)n >= cap) return tzr_fail(TZR_EINVAL, "%s: shard path too long", manifest);
    return 0;
}

/* An entry's printable name, made only for a message (making it for
 * every entry was a tenth of a 100k-tensor open's checks). */
static const char *ename(const shard_entry *e, char *nb) {
    return tzr_printable(e->name, e->pub.name_len, nb, TZR_NAMEBUF);
}

/* File NAME beside the manifest (kind: what it is, for the message),
 * opened through the source layer: next to a manifest URL it is a URL. */
static int beside_manifest(tzr_shard_set *s, const char *name, const char *kind, const char *what, char *path,
                           size_t cap, tzr_source **out) {
    *out = NULL;
    int rc = shard_location(s->path, name, path, cap);
    if (rc) return rc;
    rc = tzr_source_open_path(out, path, 0, s->http);
    if (rc == TZR_ENOTFOUND)
        return tzr_fail(tzr_is_url(path) ? TZR_ENOTFOUND : TZR_EIO, "%s: %s: %s '%s' is missing", s->path, what,
                        kind, path);
    if (rc) return tzr_fail_prefix(rc, "%s: ", what);
    return 0;
}

/* Shard k's file, found where the manifest says, with the size it gives. */
static int shard_source(tzr_shard_set *s, int k, const char *what, char *path, size_t cap, tzr_source **out) {
    *out = NULL;
    if (!s->tb.files[k]) return tzr_fail(TZR_EFORMAT, "%s: %s has no file entry", s->path, what);
    tzr_source *src = NULL;
    int rc = beside_manifest(s, s->tb.files[k], "shard file", what, path, cap, &src);
    if (rc) return rc;
    if (src->size != s->tb.sizes[k]) {
        unsigned long long have = (unsigned long long)src->size;
        tzr_source_free(src);
        return tzr_fail(TZR_EFORMAT, "%s: %s: '%s' has %llu bytes but the manifest says %llu", s->path, what, path,
                        have, (unsigned long long)s->tb.sizes[k]);
    }
    *out = src;
    return 0;
}

static int check_slices(tzr_shard_set *s, int k, const char *what, const char *path, tzr_source *src,
                        const uint8_t *digests, uint64_t ndigests, uint64_t *used);

/* Shard k's section of the header digests file (version 2), checked
 * against the manifest's SHA-256 of it: *out (count digests, free()), or
 * NULL when the manifest gives none for k. */
static int shard_hashes(tzr_shard_set *s, int k, const char *what, uint8_t **out) {
    *out = NULL;
    const struct shard_hashes *h = s->tb.hashes ? &s->tb.hashes[k] : NULL;
    if (!h || !h->present) return 0;
    char path[8300];
    tzr_source *src = NULL;
    int rc = beside_manifest(s, s->tb.hashes_file, "header digests file", what, path, sizeof path, &src);
    if (rc) return rc;
    uint64_t len = h->count * 32;
    uint8_t *buf = NULL, sha[32];
    if (h->offset > src->size || len > src->size - h->offset)
        rc = tzr_fail(TZR_EFORMAT, "%s: %s: '%s' has %llu bytes, too few for its section at %llu (%llu digests)",
                      s->path, what, path, (unsigned long long)src->size, (unsigned long long)h->offset,
                      (unsigned long long)h->count);
    else if (len > SIZE_MAX || !(buf = tzr_alloc_big(len ? (size_t)len : 1))) /* 4 KiB pages: a fault each */
        rc = tzr_fail(TZR_ENOMEM, "out of memory");
    else if (!(rc = src->read_at(src, buf, (size_t)len, h->offset))) {
        tzr_sha256(buf, (size_t)len, sha);
        if (memcmp(sha, h->sha256, 32) != 0)
            rc = tzr_fail(TZR_EHASH, "%s: %s: header digests at byte %llu of '%s' differ from the manifest's sha256",
                          s->path, what, (unsigned long long)h->offset, path);
    }
    tzr_source_free(src);
    if (rc) free(buf);
    else *out = buf;
    return rc;
}

static int check_shard(tzr_shard_set *s, int k) {
    char path[8300], what[64];
    snprintf(what, sizeof what, "shard %d of %d", k, s->tb.nshards);
    tzr_source *src;
    uint8_t *digests = NULL;
    uint64_t ndigests = s->tb.hashes ? s->tb.hashes[k].count : 0, used = 0;
    int rc = shard_hashes(s, k, what, &digests);
    if (rc) return rc;
    rc = shard_source(s, k, what, path, sizeof path, &src);
    if (rc) {
        free(digests);
        return rc;
    }
    rc = check_slices(s, k, what, path, src, digests, ndigests, &used);
    if (!rc && digests && used != ndigests)
        rc = tzr_fail(TZR_EFORMAT, "%s: %s: %llu header digests for %llu slices", s->path, what,
                      (unsigned long long)ndigests, (unsigned long long)used);
    if (!digests) return rc;
    if (rc) { /* the slices given one keep none (a later use reads the section again) */
        uintptr_t lo = (uintptr_t)digests, hi = lo + 32 * ndigests; /* (digests may also be in the arena) */
        for (size_t i = 0; i < s->tb.n; i++)
            for (size_t q = 0; q < s->tb.t[i].nslices; q++) {
                shard_slice *sl = &s->tb.t[i].slices[q];
                if (sl->shard != k || (s->tb.t[i].shared && !s->tb.side[k].sha)) continue;
                const uint8_t **sha = shard_slice_sha(&s->tb, i, sl);
                if ((uintptr_t)*sha >= lo && (uintptr_t)*sha < hi) *sha = NULL;
            }
        free(digests);
    } else {
        free(s->tb.hashes[k].digests);
        s->tb.hashes[k].digests = digests;
    }
    return rc;
}

/* Shard k's reader opened from src, and each slice the manifest gives k
 * found in it (sl->local) with the dtype and local shape; digests (in
 * the order the manifest lists k's slices) become their header digests. */
static int check_slices(tzr_shard_set *s, int k, const char *what, const char *path, tzr_source *src,
                        const uint8_t *digests, uint64_t ndigests, uint64_t *used) {
    int rc;
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    ro.verify = s->verify;
    ro.crypt = s->crypt;
    rc = tzr_reader_open_source(&s->readers[k], src, &ro); /* takes src */
    if (rc) return tzr_fail_prefix(rc, "%s: ", what);
    tzr_reader *r = s->readers[k];
    if ((rc = shard_side_make(&s->tb, k))) return rc;
    size_t next = 0, count = tzr_reader_count(r);
    for (size_t i = 0; i < s->tb.n; i++) {
        shard_entry *e = &s->tb.t[i];
        char nb[TZR_NAMEBUF];
        size_t q = 0, qend = e->nslices;
        if (e->by_shard) {
            /* Shards in increasing order (a split, a holder list): k's
             * one slice, found without reading the others (a whole load
             * of 32 shards read every slice of the set 32 times). */
            size_t lo = 0, hi = e->nslices;
            if ((size_t)k < hi && e->slices[k].shard == k) lo = k;
            else
                while (lo < hi) {
                    size_t mid = lo + (hi - lo) / 2;
                    if (e->slices[mid].shard < k) lo = mid + 1;
                    else hi = mid;
                }
            q = lo;
            qend = q < e->nslices && e->slices[q].shard == k ? q + 1 : q;
        }
        for (; q < qend; q++) {
            shard_slice *sl = &e->slices[q];
            if (sl->shard != k) continue;
            size_t *local = shard_slice_local(&s->tb, i, sl);
            if (digests && *used < ndigests) *shard_slice_sha(&s->tb, i, sl) = digests + 32 * *used;
            ++*used;
            /* Shards hold their tensors in the manifest's order as the
             * writers leave them: the one after the last found first
             * (names are unique in a reader), then the name index (the
             * lookups were a fifth of a 100k-tensor open). */
            const tzr_tensor_info *t = next < count ? tzr_reader_tensor(r, next) : NULL;
            if (t && t->name_len == e->pub.name_len && memcmp(t->name, e->name, t->name_len) == 0)
                *local = next;
            else if (tzr_reader_find(r, e->name, e->pub.name_len, local))
                return tzr_fail(TZR_EFORMAT, "%s: tensor '%s' is not in %s ('%s')", s->path, ename(e, nb), what, path);
            next = *local + 1;
            t = tzr_reader_tensor(r, *local);
            uint64_t want[TZR_MAX_DIMS];
            shard_local_shape(e, sl, want);
            if (t->dtype_len != e->pub.dtype_len || memcmp(t->dtype_str, e->dtype, t->dtype_len))
                return tzr_fail(TZR_EFORMAT, "%s: tensor '%s' in %s: dtype differs from the manifest", s->path,
                                ename(e, nb), what);
            if (t->ndim != e->pub.ndim || memcmp(t->shape, want, t->ndim * sizeof *want))
                return tzr_fail(TZR_EFORMAT, "%s: tensor '%s' in %s: local shape differs from the manifest's slice (dim %d, %u dims, first extent %llu vs %llu)",
                                s->path, ename(e, nb), what, e->pub.dim, t->ndim,
                                (unsigned long long)(t->ndim ? t->shape[0] : 0),
                                (unsigned long long)(e->pub.ndim ? want[0] : 0));
        }
    }
    return 0;
}

/* Failures a later try may not meet (memory, the disk, the network, a
 * file moved back): the shard stays unopened and the next use tries again.
 * Any other (the file is not what the manifest says) is kept. */
static int transient(int rc) {
    return rc == TZR_ENOMEM || rc == TZR_EIO || rc == TZR_ENET || rc == TZR_EHTTP || rc == TZR_ENOTFOUND ||
           rc == TZR_ECHANGED || rc == TZR_ECANCELED;
}

/* Opened on first use: readers, sl->local of its slices and its state are
 * written under its mutex; the state is published last. A kept failure is
 * reported by every later use (its reader freed: nothing half-checked is
 * ever handed out). */
tzr_reader *shard_ready(tzr_shard_set *s, int k) {
    shard_lazy *z = s->lazy;
    if (!z || atomic_load_explicit(&z->state[k], memory_order_acquire) == SHARD_READY) return s->readers[k];
    pthread_mutex_lock(&z->mu[k]);
    unsigned char st = atomic_load_explicit(&z->state[k], memory_order_relaxed);
    if (st == SHARD_UNOPENED) {
        int rc = check_shard(s, k);
        if (rc) {
            tzr_reader_free(s->readers[k]);
            s->readers[k] = NULL;
        }
        if (rc && !transient(rc) && (z->err[k] = malloc(sizeof *z->err[k]))) {
            tzr_error_keep(z->err[k]);
            atomic_store_explicit(&z->state[k], SHARD_FAILED, memory_order_release);
        } else if (!rc) {
            atomic_store_explicit(&z->state[k], SHARD_READY, memory_order_release);
        }
        /* else left unopened: this call reports its error, the next tries again */
        pthread_mutex_unlock(&z->mu[k]);
        return rc ? NULL : s->readers[k];
    }
    if (st == SHARD_FAILED) tzr_error_put(z->err[k]);
    pthread_mutex_unlock(&z->mu[k]);
    return st == SHARD_READY ? s->readers[k] : NULL;
}

tzr_reader *shard_if_open(const tzr_shard_set *s, int k) {
    if (!s->lazy) return s->readers[k];
    return atomic_load_explicit(&s->lazy->state[k], memory_order_acquire) == SHARD_READY ? s->readers[k] : NULL;
}

static int ready_one(tzr_shard_set *s, int k, void *ctx) { return shard_ready(s, k) ? 0 : tzr_last_error_code(); }

/* The shard files are opened and checked on one thread each, up to the
 * core count (one after the other, the two indexes of a 100k-tensor set
 * were a quarter of its open). Each check writes only its own reader, the
 * slices of its own shard and its own side arrays. The lowest failing
 * shard reports, with the message its thread left: the failure a
 * one-by-one open would report. */
typedef struct check_job {
    tzr_shard_set *s;
    int (*one)(tzr_shard_set *s, int k, void *ctx);
    void *ctx;
    const unsigned char *need; /* NULL: every shard */
    atomic_int next;
    atomic_int first_bad; /* lowest failing shard so far, or nshards */
    pthread_mutex_t mu;
    int rc;
    tzr_error_state err;
} check_job;

static void *check_worker(void *arg) {
    check_job *j = arg;
    for (int k; (k = atomic_fetch_add(&j->next, 1)) < j->s->tb.nshards;) {
        if (k > atomic_load(&j->first_bad)) break; /* a lower one failed: this one would not be reached */
        if (j->need && !j->need[k]) continue;
        int rc = j->one(j->s, k, j->ctx);
        if (!rc) continue;
        pthread_mutex_lock(&j->mu);
        if (k < atomic_load(&j->first_bad)) {
            atomic_store(&j->first_bad, k);
            j->rc = rc;
            tzr_error_keep(&j->err);
        }
        pthread_mutex_unlock(&j->mu);
    }
    return NULL;
}

int shard_each(tzr_shard_set *s, int (*one)(tzr_shard_set *, int, void *), void *ctx, const unsigned char *need) {
    int todo = 0;
    for (int k = 0; k < s->tb.nshards; k++) todo += !need || need[k];
    check_job j = {.s = s, .one = one, .ctx = ctx, .need = need, .rc = 0};
    atomic_init(&j.next, 0);
    atomic_init(&j.first_bad, s->tb.nshards);
    pthread_mutex_init(&j.mu, NULL);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int nth = cpus < todo ? (int)cpus : todo, started = 0;
    if (nth > 32) nth = 32;
    pthread_t th[32];
    for (; started < nth - 1; started++) /* and this thread */
        if (tzr_thread_start(&th[started], check_worker, &j) != 0) break;
    check_worker(&j);
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    pthread_mutex_destroy(&j.mu);
    if (j.rc) tzr_error_put(&j.err);
    return j.rc;
}

static int check_one(tzr_shard_set *s, int k, void *ctx) { return check_shard(s, k); }

int shard_ready_all(tzr_shard_set *s, const unsigned char *need) {
    if (!s->lazy) return 0;
    int todo = 0;
    for (int k = 0; k < s->tb.nshards && !todo; k++)
        todo = need[k] && atomic_load_explicit(&s->lazy->state[k], memory_order_acquire) != SHARD_READY;
    return todo ? shard_each(s, ready_one, NULL, need) : 0;
}

/* A lazy set's open still finds every local shard file with its size (a
 * missing or truncated file fails here, as before); URLs are asked at
 * first use, as each would be a request. */
static int check_file(tzr_shard_set *s, int k) {
    char path[8300], what[64];
    snprintf(what, sizeof what, "shard %d of %d", k, s->tb.nshards);
    tzr_source *src;
    if (s->tb.files[k] && tzr_is_url(s->path)) return 0;
    int rc = shard_source(s, k, what, path, sizeof path, &src);
    tzr_source_free(src);
    return rc;
}

/* No key or password (the readers would need it after the caller's copy
 * is gone) and no network settings (the caller's, borrowed while opening). */
static int lazy_init(tzr_shard_set *s) {
    int n = s->tb.nshards;
    shard_lazy *z = calloc(1, sizeof *z);
    if (!z) return tzr_fail(TZR_ENOMEM, "out of memory");
    s->lazy = z;
    z->mu = calloc((size_t)n, sizeof *z->mu);
    z->state = calloc((size_t)n, sizeof *z->state);
    z->err = calloc((size_t)n, sizeof *z->err);
    if (!z->mu || !z->state || !z->err) {
        free(z->mu), free(z->state), free(z->err), free(z);
        s->lazy = NULL;
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    for (int k = 0; k < n; k++) {
        pthread_mutex_init(&z->mu[k], NULL);
        atomic_init(&z->state[k], SHARD_UNOPENED);
    }
    for (int k = 0; k < n; k++) {
        int rc = check_file(s, k);
        if (rc) return rc;
    }
    return 0;
}

static void lazy_free(tzr_shard_set *s) {
    shard_lazy *z = s->lazy;
    if (!z) return;
    for (int k = 0; k < s->tb.nshards; k++) {
        pthread_mutex_destroy(&z->mu[k]);
        free(z->err[k]);
    }
    free(z->mu);
    free(z->state);
    free(z->err);
    free(z);
    s->lazy = NULL;
}

int shard_url_dir(const char *path) {
    size_t end = strcspn(path, "?#");
    return tzr_is_url(path) && end > 0 && path[end - 1] == '/';
}

static int is_dir(const char *path) {
    struct stat st;
    return shard_url_dir(path) || (!tzr_is_url(path) && stat(path, &st) == 0 && S_ISDIR(st.st_mode));
}

static int open_set(tzr_shard_set **out, const char *path, const char *const *list, size_t nlist,
                    const tzr_shard_open_options *opt) {
    *out = NULL;
    tzr_shard_open_options o = TZR_SHARD_OPEN_OPTIONS_INIT;
    if (TZR_OPTS(tzr_shard_open_options, o, opt, offsetof(tzr_shard_open_options, crypt))) return TZR_EINVAL;
    if (o.crypt_params) o.crypt = *o.crypt_params; /* by pointer wins */
    opt = &o;
    if (!path) return tzr_fail(TZR_EINVAL, "no path");
    tzr_shard_set *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    s->verify = opt ? opt->verify : 1;
    s->crypt = opt->crypt;
    s->http = opt->http;
    int rc;
    size_t at, end;
    if (!list && shard_rank_field(path, &at, &end)) {
        rc = shard_open_ranks(s, path, opt->rank_rules ? opt->rank_rules : TZR_SHARD_RULES_VLLM);
    } else if (list || is_dir(path) || (ends_with(path, ".index.json") && !ends_with(path, TZR_SHARD_MANIFEST_SUFFIX))) {
        rc = shard_open_hf(s, path, list, nlist); /* Hugging Face: a directory, its index, or files */
    } else if (!ends_with(path, ".json")) {
        rc = open_plain(s, path);
    } else {
        int side;
        rc = shard_json_read(path, s->http, &s->tb, &side);
        if (!rc && side >= 0)
            rc = tzr_fail(TZR_EINVAL, "%s is a per-shard sidecar; build the manifest first", path);
        if (!rc) rc = shard_table_validate(&s->tb, path);
        if (!rc) rc = shard_table_sides(&s->tb);
        if (!rc && !(s->readers = calloc((size_t)s->tb.nshards, sizeof *s->readers)))
            rc = tzr_fail(TZR_ENOMEM, "out of memory");
        int lazy = !s->crypt.key && !s->crypt.password && !s->http;
        if (!rc) rc = lazy ? lazy_init(s) : shard_each(s, check_one, NULL, NULL);
    }
    memset(&s->crypt, 0, sizeof s->crypt); /* the caller's key: only borrowed while opening */
    s->http = NULL;                        /* and its network settings */
    if (rc) {
        if (rc == TZR_ENOMEM && !*tzr_last_error()) tzr_fail(rc, "out of memory");
        tzr_shard_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

int tzr_shard_open(tzr_shard_set **out, const char *path, const tzr_shard_open_options *opt) {
    if (!out) return tzr_fail(TZR_EINVAL, "NULL output pointer");
    return open_set(out, path, NULL, 0, opt);
}

int tzr_shard_open_files(tzr_shard_set **out, const char *const *paths, size_t n, const tzr_shard_open_options *opt) {
    if (!out) return tzr_fail(TZR_EINVAL, "NULL output pointer");
    *out = NULL;
    if (!paths || n == 0) return tzr_fail(TZR_EINVAL, "no files");
    return open_set(out, paths[0], paths, n, opt);
}

void tzr_shard_close(tzr_shard_set *s) {
    TZR_KEEP_ERROR;
    if (!s) return;
    for (int k = 0; s->readers && k < s->tb.nshards; k++) tzr_reader_free(s->readers[k]);
    free(s->readers);
    lazy_free(s);
    shard_table_free(&s->tb);
    free(s->path);
    free(s);
}

size_t tzr_shard_count(const tzr_shard_set *s) { return s ? s->tb.n : 0; }
int tzr_shard_nshards(const tzr_shard_set *s) { return s ? s->tb.nshards : 0; }
const tzr_shard_tensor *tzr_shard_tensor_at(const tzr_shard_set *s, size_t i) {
    return s && i < s->tb.n ? &s->tb.t[i].pub : NULL;
}
tzr_reader *tzr_shard_reader(const tzr_shard_set *s, int k) {
    if (!s || k < 0 || k >= s->tb.nshards) {
        tzr_fail(TZR_EINVAL, "shard reader: bad set or shard %d", k);
        return NULL;
    }
    return shard_ready((tzr_shard_set *)s, k); /* opening it changes no state the caller sees */
}
