/* A rank set without a manifest: per-rank files named by a printf-style
 * %d / %0Nd field ("model-rank-%03d.tensors", as vLLM writes them), each
 * holding every tensor under its global name with its local shape. The
 * split rules say how each tensor was cut; the global shape is the sum
 * of the local ones along that dim, and the set then loads like any
 * manifest (any rank count, any sink). */
#include "shard_internal.h"
#include "scheme.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* The one %d / %0Nd field of path: where it starts and ends; 0 if none. */
int shard_rank_field(const char *path, size_t *at, size_t *end) {
    const char *p = strchr(path, '%');
    if (!p) return 0;
    const char *q = p + 1;
    if (*q == '0')
        while (*q >= '0' && *q <= '9') q++;
    if (*q != 'd' || strchr(q, '%')) return 0; /* not a rank field (a URL escape), or two of them */
    *at = (size_t)(p - path);
    *end = (size_t)(q + 1 - path);
    return 1;
}

/* Widest rank field honoured: a file name component is at most 255 bytes. */
#define RANK_WIDTH_MAX 255

int tzr_shard_rank_path(char *buf, size_t cap, const char *pattern, int k) {
    size_t at, end;
    if (!pattern || !shard_rank_field(pattern, &at, &end))
        return tzr_fail(TZR_EINVAL, "'%s': want one %%d or %%0Nd field for the rank", pattern ? pattern : "(null)");
    if (k < 0) return tzr_fail(TZR_EINVAL, "%s: rank %d", pattern, k);
    /* Formatted here, not by printf with the user's field as the format:
     * any width up to the bound is honoured exactly, so two ranks never
     * share a name (a cut number or a bad spec once made them collide). */
    size_t width = 0;
    for (size_t i = at + 1; i < end - 1; i++) {
        width = width * 10 + (size_t)(pattern[i] - '0');
        if (width > RANK_WIDTH_MAX)
            return tzr_fail(TZR_EINVAL, "%s: rank field '%.*s' is wider than %d digits", pattern, (int)(end - at),
                            pattern + at, RANK_WIDTH_MAX);
    }
    char digits[16], num[RANK_WIDTH_MAX + 1];
    int nd = snprintf(digits, sizeof digits, "%d", k);
    size_t pad = width > (size_t)nd ? width - (size_t)nd : 0;
    memset(num, '0', pad);
    memcpy(num + pad, digits, (size_t)nd + 1);
    int n = snprintf(buf, cap, "%.*s%s%s", (int)at, pattern, num, pattern + end);
    return n < 0 || (size_t)n >= cap ? tzr_fail(TZR_ELIMIT, "%s: path too long", pattern) : 0;
}

/* Whether rank k's file is there (a URL: its HEAD; nothing else is tried).
 * Missing: no such file, or at a URL a 404, or a 403 past rank 0 (S3
 * answers 403 for a missing key without s3:ListBucket); *denied says
 * which, for the message when a higher rank turns out to exist. */
static int open_rank(tzr_shard_set *s, const char *path, int k, tzr_reader **r, int *missing, int *denied) {
    *missing = *denied = 0;
    struct stat st;
    if (!tzr_is_url(path) && stat(path, &st) != 0) {
        *missing = 1;
        return 0;
    }
    tzr_source *src = NULL;
    int rc = tzr_source_open_path(&src, path, 0, s->http);
    if (rc && tzr_is_url(path) && (rc == TZR_ENOTFOUND || (k > 0 && strstr(tzr_last_error(), "HTTP 403")))) {
        *denied = rc != TZR_ENOTFOUND;
        *missing = 1;
        return 0;
    }
    if (rc) return rc;
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    ro.verify = s->verify;
    ro.crypt = s->crypt;
    ro.http = s->http;
    return tzr_reader_open_source(r, src, &ro);
}

/* Whether rank k's file exists: 1, 0 (missing, 404 or 403), or an error. */
static int rank_exists(const tzr_shard_set *s, const char *pattern, int k, char *path, size_t cap) {
    int rc = tzr_shard_rank_path(path, cap, pattern, k);
    if (rc) return rc;
    struct stat st;
    if (!tzr_is_url(path)) return stat(path, &st) == 0;
    tzr_source *src = NULL;
    rc = tzr_source_open_path(&src, path, 0, s->http);
    if (!rc) {
        tzr_source_free(src);
        return 1;
    }
    return rc == TZR_ENOTFOUND || strstr(tzr_last_error(), "HTTP 403") ? 0 : rc;
}

/* A local pattern whose field is in the file name: the highest rank above
 * k whose file is in the directory, or -1. */
static int rank_in_dir(const char *pattern, int k) {
    size_t at, end;
    if (tzr_is_url(pattern) || !shard_rank_field(pattern, &at, &end)) return -1;
    const char *slash = strrchr(pattern, '/');
    size_t base = slash ? (size_t)(slash + 1 - pattern) : 0;
    if (base > at) return -1; /* the field is in a directory name */
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", base ? (int)base : 1, base ? pattern : ".");
    DIR *d = opendir(dir);
    if (!d) return -1;
    const char *pre = pattern + base, *suf = pattern + end;
    size_t pl = at - base, sl = strlen(suf);
    int best = -1;
    for (struct dirent *e; (e = readdir(d));) {
        size_t nl = strlen(e->d_name);
        if (nl <= pl + sl || memcmp(e->d_name, pre, pl) || memcmp(e->d_name + nl - sl, suf, sl)) continue;
        long v = 0;
        size_t i = pl;
        for (; i < nl - sl && e->d_name[i] >= '0' && e->d_name[i] <= '9' && v <= TZR_SHARD_MAX; i++)
            v = v * 10 + (e->d_name[i] - '0');
        char want[8300]; /* r-0010 is not rank 10 of r-%03d */
        if (i == nl - sl && v > k && v <= TZR_SHARD_MAX && v > best &&
            !tzr_shard_rank_path(want, sizeof want, pattern, (int)v) && strcmp(want + base, e->d_name) == 0)
            best = (int)v;
    }
    closedir(d);
    return best;
}

/* Rank k is missing: an error when a higher rank exists (a set with a
 * hole would load as a smaller model), else 0: the set ends at k. The
 * next few ranks are probed wherever the set is; a local directory is
 * also scanned for the pattern. */
#define RANK_PROBES 3
static int check_end(const tzr_shard_set *s, const char *pattern, int k, const char *path, int denied) {
    char probe[8300];
    int found = -1;
    for (int j = k + 1; j <= k + RANK_PROBES && j < TZR_SHARD_MAX && found < 0; j++) {
        int rc = rank_exists(s, pattern, j, probe, sizeof probe);
        if (rc < 0) return rc;
        if (rc) found = j;
    }
    if (found < 0 && (found = rank_in_dir(pattern, k)) >= 0) tzr_shard_rank_path(probe, sizeof probe, pattern, found);
    if (found < 0) return 0;
    return tzr_fail(TZR_ENOTFOUND, "%s: rank %d's file (%s) is %s, but rank %d's (%s) exists", pattern, k, path,
                    denied ? "not readable (HTTP 403: missing, or access denied)" : "missing", found, probe);
}

static int add_tensor(tzr_shard_set *s, const shard_rules *rules, size_t i0) {
    tzr_reader *r0 = s->readers[0];
    const tzr_tensor_info *t0 = tzr_reader_tensor(r0, i0);
    char nb[TZR_NAMEBUF];
    const char *nm = tzr_printable(t0->name, t0->name_len, nb, sizeof nb);
    int dim = TZR_SHARD_REPLICATED;
    if (shard_rules_match(rules, t0->name, t0->name_len, t0->ndim, &dim) != 1) dim = TZR_SHARD_REPLICATED;
    uint64_t shape[TZR_MAX_DIMS];
    for (uint32_t d = 0; d < t0->ndim; d++) shape[d] = t0->shape[d];
    if (dim != TZR_SHARD_REPLICATED) shape[dim] = 0;
    int n = s->tb.nshards;
    size_t *idx = calloc((size_t)n, sizeof *idx);
    if (!idx) return tzr_fail(TZR_ENOMEM, "out of memory");
    int rc = 0;
    for (int k = 0; k < n && !rc; k++) {
        tzr_reader *r = s->readers[k];
        const char *file = tzr_reader_source(r)->name;
        if (tzr_reader_find(r, t0->name, t0->name_len, &idx[k])) {
            rc = tzr_fail(TZR_EFORMAT, "%s: tensor '%s' is in rank 0's file but not in rank %d's (%s)", s->path, nm,
                          k, file);
            break;
        }
        const tzr_tensor_info *t = tzr_reader_tensor(r, idx[k]);
        if (t->dtype_len != t0->dtype_len || memcmp(t->dtype_str, t0->dtype_str, t->dtype_len) || t->ndim != t0->ndim) {
            rc = tzr_fail(TZR_EFORMAT, "%s: tensor '%s': rank %d's dtype or rank differs from rank 0's (%s)", s->path,
                          nm, k, file);
            break;
        }
        for (uint32_t d = 0; d < t->ndim && !rc; d++) {
            if ((int)d == dim) shape[d] += t->shape[d];
            else if (t->shape[d] != t0->shape[d])
                rc = tzr_fail(TZR_EFORMAT, "%s: tensor '%s': rank %d has extent %llu in dim %u, rank 0 %llu (%s; %s)",
                              s->path, nm, k, (unsigned long long)t->shape[d], d, (unsigned long long)t0->shape[d],
                              file, dim == TZR_SHARD_REPLICATED ? "replicated by the rules" : "not the cut dim");
        }
    }
    shard_entry *e = rc ? NULL : shard_table_add(&s->tb, t0->name, t0->name_len, t0->dtype_str, t0->dtype_len, t0->ndim,
                                                 shape, dim);
    if (!rc && !e) rc = TZR_ENOMEM;
    uint64_t off = 0;
    for (int k = 0; k < n && !rc; k++) {
        uint64_t len = dim == TZR_SHARD_REPLICATED ? 0 : tzr_reader_tensor(s->readers[k], idx[k])->shape[dim];
        if ((rc = shard_entry_add_slice(&s->tb, e, k, dim == TZR_SHARD_REPLICATED ? 0 : off, len))) break;
        e->slices[e->nslices - 1].local = idx[k];
        off += len;
    }
    free(idx);
    return rc;
}

int shard_open_ranks(tzr_shard_set *s, const char *pattern, const char *rules_text) {
    shard_rules rules;
    int rc = shard_rules_parse(rules_text, &rules);
    if (rc) return rc;
    int cap = 8, n = 0;
    s->readers = calloc((size_t)cap, sizeof *s->readers);
    if (!s->readers) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    char path[8300];
    for (int k = 0; !rc && k < TZR_SHARD_MAX; k++) {
        if ((rc = tzr_shard_rank_path(path, sizeof path, pattern, k))) break;
        if (n == cap) {
            tzr_reader **g = realloc(s->readers, (size_t)(cap *= 2) * sizeof *g);
            if (!g) {
                rc = tzr_fail(TZR_ENOMEM, "out of memory");
                break;
            }
            s->readers = g;
        }
        int missing, denied;
        s->readers[n] = NULL;
        if (n > 0 && strcmp(path, tzr_reader_source(s->readers[n - 1])->name) == 0) {
            rc = tzr_fail(TZR_EINVAL, "%s: ranks %d and %d both name %s", pattern, n - 1, n, path);
            break;
        }
        if ((rc = open_rank(s, path, n, &s->readers[n], &missing, &denied))) break;
        if (missing) {
            if (n > 0) rc = check_end(s, pattern, n, path, denied);
            break;
        }
        n++;
    }
    s->tb.nshards = n;
    if (!rc && n == 0) rc = tzr_fail(TZR_ENOTFOUND, "%s: no rank file: rank 0's (%s) is missing", pattern, path);
    if (!rc) {
        s->tb.files = calloc((size_t)n, sizeof *s->tb.files);
        s->tb.sizes = calloc((size_t)n, sizeof *s->tb.sizes);
        if (!s->tb.files || !s->tb.sizes) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    }
    for (int k = 0; k < n && !rc; k++) {
        const char *name = tzr_reader_source(s->readers[k])->name, *base = strrchr(name, '/');
        if (!(s->tb.files[k] = strdup(base ? base + 1 : name))) rc = tzr_fail(TZR_ENOMEM, "out of memory");
        s->tb.sizes[k] = tzr_reader_source(s->readers[k])->size;
    }
    for (size_t i = 0; !rc && i < tzr_reader_count(s->readers[0]); i++) rc = add_tensor(s, &rules, i);
    for (int k = 1; k < n && !rc; k++) /* every tensor of rank k was matched to one of rank 0 */
        if (tzr_reader_count(s->readers[k]) != tzr_reader_count(s->readers[0]))
            for (size_t i = 0; i < tzr_reader_count(s->readers[k]) && !rc; i++) {
                const tzr_tensor_info *t = tzr_reader_tensor(s->readers[k], i);
                size_t j;
                char nb[TZR_NAMEBUF];
                if (tzr_reader_find(s->readers[0], t->name, t->name_len, &j))
                    rc = tzr_fail(TZR_EFORMAT, "%s: tensor '%s' is in rank %d's file (%s) but not in rank 0's", s->path,
                                  tzr_printable(t->name, t->name_len, nb, sizeof nb), k,
                                  tzr_reader_source(s->readers[k])->name);
            }
    if (!rc) rc = shard_table_validate(&s->tb, s->path);
    shard_rules_free(&rules);
    return rc;
}
