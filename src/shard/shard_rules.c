/* Split rules ("glob=dim|replicate,..."), shard file names and the uneven
 * chunking of one dimension. */
#include "shard_internal.h"

#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

int tzr_shard_file_name(char *buf, size_t cap, const char *prefix, int shard, int nshards, const char *suffix) {
    if (!prefix || nshards < 1 || nshards > TZR_SHARD_MAX || shard < 0 || shard >= nshards)
        return tzr_fail(TZR_EINVAL, "shard %d of %d: bad shard number or count (1..%d shards)", shard, nshards,
                        TZR_SHARD_MAX);
    int n = snprintf(buf, cap, "%s-rank-%05d-of-%05d%s", prefix, shard, nshards, suffix ? suffix : "");
    if (n < 0 || (size_t)n >= cap) return tzr_fail(TZR_ELIMIT, "shard file name for prefix '%s' is too long", prefix);
    return 0;
}

void tzr_shard_chunk(uint64_t len, int parts, int p, uint64_t *offset, uint64_t *length) {
    if (parts < 1) parts = 1;
    uint64_t q = len / (uint64_t)parts, r = len % (uint64_t)parts, up = (uint64_t)p;
    *offset = up * q + (up < r ? up : r);
    *length = q + (up < r);
}

void shard_rules_free(shard_rules *r) {
    for (size_t i = 0; i < r->n; i++) free(r->r[i].glob);
    free(r->r);
    r->r = NULL;
    r->n = 0;
}

int shard_rules_parse(const char *text, shard_rules *out) {
    memset(out, 0, sizeof *out);
    if (!text) return 0;
    const char *p = text;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = NULL; /* the last '=' splits glob and value */
        for (const char *q = p; q < p + len; q++)
            if (*q == '=') eq = q;
        if (len == 0) {
            p += end ? 1 : 0;
            if (!end) break;
            continue;
        }
        if (!eq || eq == p) {
            shard_rules_free(out);
            return tzr_fail(TZR_EINVAL, "split rule '%.*s': want glob=DIM or glob=replicate", (int)len, p);
        }
        const char *v = eq + 1;
        size_t vlen = len - (size_t)(v - p);
        int dim;
        if (vlen == 9 && memcmp(v, "replicate", 9) == 0) {
            dim = TZR_SHARD_REPLICATED;
        } else {
            char tmp[16];
            char *stop;
            if (vlen == 0 || vlen >= sizeof tmp) goto bad;
            memcpy(tmp, v, vlen);
            tmp[vlen] = 0;
            long d = strtol(tmp, &stop, 10);
            if (*stop || d < 0 || d >= TZR_MAX_DIMS) goto bad;
            dim = (int)d;
        }
        shard_rule *g = realloc(out->r, (out->n + 1) * sizeof *g);
        if (!g) {
            shard_rules_free(out);
            return tzr_fail(TZR_ENOMEM, "out of memory");
        }
        out->r = g;
        g[out->n].glob = strndup(p, (size_t)(eq - p));
        g[out->n].dim = dim;
        if (!g[out->n].glob) {
            shard_rules_free(out);
            return tzr_fail(TZR_ENOMEM, "out of memory");
        }
        out->n++;
        if (!end) break;
        p = end + 1;
        continue;
    bad:
        shard_rules_free(out);
        return tzr_fail(TZR_EINVAL, "split rule '%.*s': '%.*s' is neither a dimension nor 'replicate'", (int)len, p,
                        (int)vlen, v);
    }
    return 0;
}

/* The first rule whose glob matches the name: its index, or -1. */
static long rules_find(const shard_rules *r, const char *name, size_t name_len) {
    if (!r || !r->n) return -1;
    char stack[512], *s = stack;
    if (name_len && name[0] == 0x1E) name++, name_len--;
    if (name_len >= sizeof stack && !(s = malloc(name_len + 1))) return -1;
    memcpy(s, name, name_len);
    s[name_len] = 0;
    long hit = -1;
    for (size_t i = 0; i < r->n && hit < 0; i++)
        if (fnmatch(r->r[i].glob, s, 0) == 0) hit = (long)i;
    if (s != stack) free(s);
    return hit;
}

int shard_rules_match(const shard_rules *r, const char *name, size_t name_len, uint32_t ndim, int *dim) {
    long k = rules_find(r, name, name_len);
    if (k < 0) return 0;
    *dim = r->r[k].dim;
    if (*dim >= 0 && (uint32_t)*dim >= ndim) *dim = TZR_SHARD_REPLICATED;
    return 1;
}

int shard_rules_pick(const shard_rules *r, const char *name, size_t name_len, uint32_t ndim, int *dim) {
    long k = rules_find(r, name, name_len);
    if (k < 0) return 0;
    const shard_rule *g = &r->r[k];
    if (g->dim >= 0 && (uint32_t)g->dim >= ndim) {
        char nb[TZR_NAMEBUF];
        return tzr_fail(TZR_EINVAL, "split rule '%s=%d' matches tensor '%s', which has %u dims%s", g->glob, g->dim,
                        tzr_printable(name, name_len, nb, sizeof nb), ndim,
                        ndim ? "" : " (a scalar: give it 'replicate')");
    }
    *dim = g->dim;
    return 1;
}

int tzr_shard_rule_dim(const char *rules, const char *name, size_t name_len, uint32_t ndim, int *dim) {
    if (!name || !dim) return tzr_fail(TZR_EINVAL, "split rules: no tensor name");
    shard_rules rl;
    int rc = shard_rules_parse(rules, &rl);
    if (!rc) rc = shard_rules_pick(&rl, name, name_len, ndim, dim);
    shard_rules_free(&rl);
    return rc;
}
