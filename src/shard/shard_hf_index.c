/* A Hugging Face model.safetensors.index.json read into its weight map
 * (tensor name -> file). jansson's tree of a 100k-tensor index (9 MB)
 * took 0.32 s, most of a 0.5 s set open. The usual document (names and
 * files in plain ASCII, no duplicate key) is scanned here instead, its
 * strings kept where they lie in the text; anything else goes to
 * jansson's tree, whose results and messages stay the reference
 * (fuzz/fuzz_hf_index.c holds the two to the same map). */
#include "json_scan.h"
#include "names.h"
#include "shard_internal.h"
#include "tzr_http.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Strings seen so far, each once, numbered in order and found by their
 * bytes: the files the weight map names (a handful, 100k times), and the
 * names of a map not written in sorted order, to find one given twice. */
typedef struct str_ids {
    const char **name; /* n first spellings (not NUL-terminated in a scan) */
    size_t *len;
    size_t n, cap;
    uint32_t *slots;   /* id + 1; 0 = empty */
    size_t nslots;
    uint32_t last;     /* the previous string's id: files come in runs */
} str_ids;

static void ids_free(str_ids *f) {
    free(f->name);
    free(f->len);
    free(f->slots);
}

static int ids_grow(str_ids *f) {
    size_t cap = f->cap ? 2 * f->cap : 16, ns = 2 * cap;
    const char **nm = realloc(f->name, cap * sizeof *nm);
    if (nm) f->name = nm;
    size_t *ln = nm ? realloc(f->len, cap * sizeof *ln) : NULL;
    if (ln) f->len = ln;
    uint32_t *sl = ln ? calloc(ns, sizeof *sl) : NULL;
    if (!sl) return tzr_fail(TZR_ENOMEM, "out of memory");
    for (size_t k = 0; k < f->n; k++) {
        size_t b = tzr_name_hash(f->name[k], f->len[k]) & (ns - 1);
        while (sl[b]) b = (b + 1) & (ns - 1);
        sl[b] = (uint32_t)k + 1;
    }
    free(f->slots);
    f->slots = sl, f->nslots = ns, f->cap = cap;
    return 0;
}

/* The id of string s (len bytes), entered if new: 0, or TZR_ENOMEM. */
static int ids_of(str_ids *f, const char *s, size_t len, uint32_t *id) {
    if (f->n && f->len[f->last] == len && memcmp(f->name[f->last], s, len) == 0) {
        *id = f->last;
        return 0;
    }
    if (f->n == f->cap && ids_grow(f)) return TZR_ENOMEM;
    size_t mask = f->nslots - 1, b = tzr_name_hash(s, len) & mask;
    for (; f->slots[b]; b = (b + 1) & mask) {
        uint32_t k = f->slots[b] - 1;
        if (f->len[k] == len && memcmp(f->name[k], s, len) == 0) return *id = f->last = k, 0;
    }
    f->name[f->n] = s, f->len[f->n] = len;
    f->slots[b] = (uint32_t)f->n + 1;
    *id = f->last = (uint32_t)f->n++;
    return 0;
}

/* Room for one more pair. */
static int map_room(shard_hf_map *m, size_t *cap) {
    if (m->n < *cap) return 0;
    size_t c = *cap ? 2 * *cap : 1024;
    const char **nm = realloc(m->names, c * sizeof *nm);
    if (nm) m->names = nm;
    uint32_t *fl = nm ? realloc(m->file, c * sizeof *fl) : NULL;
    if (!fl) return tzr_fail(TZR_ENOMEM, "out of memory");
    m->file = fl;
    *cap = c;
    return 0;
}

typedef struct file_order {
    const char *name;
    uint32_t id;
} file_order;
static int cmp_order(const void *a, const void *b) {
    return strcmp(((const file_order *)a)->name, ((const file_order *)b)->name);
}

/* m->files from ids (NUL-terminated by now), sorted, and every pair's
 * file renumbered to match: shard k of the set is the k-th file by name. */
static int files_sorted(shard_hf_map *m, const str_ids *ids) {
    file_order *o = calloc(ids->n ? ids->n : 1, sizeof *o);
    uint32_t *to = calloc(ids->n ? ids->n : 1, sizeof *to);
    m->files = calloc(ids->n ? ids->n : 1, sizeof *m->files);
    if (!o || !to || !m->files) {
        free(o), free(to);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    for (size_t k = 0; k < ids->n; k++) o[k] = (file_order){ids->name[k], (uint32_t)k};
    qsort(o, ids->n, sizeof *o, cmp_order);
    for (size_t k = 0; k < ids->n; k++) m->files[k] = o[k].name, to[o[k].id] = (uint32_t)k;
    m->nfiles = ids->n;
    for (size_t i = 0; i < m->n; i++) m->file[i] = to[m->file[i]];
    free(o);
    free(to);
    return 0;
}

/* A plain string (printable ASCII, no escape) at p[i]: index past it and
 * its length, or 0. */
static size_t plain_string(const uint8_t *p, size_t n, size_t i, size_t *len) {
    int plain;
    size_t e = i < n && p[i] == '"' ? tzr_js_plain_end(p, n, i, &plain) : 0;
    if (!e || !plain) return 0;
    *len = e - i - 2;
    return e;
}

/* 1 if the value p[i..e) nests deeper than jansson reads in a document
 * one level up (its limit is 2048: a member at its bound alone would pass
 * and fail in place); deep ones go to jansson. */
static int too_deep(const uint8_t *p, size_t i, size_t e) {
    size_t depth = 0;
    for (; i < e; i++) {
        if (p[i] == '"') {
            size_t end = tzr_js_string_end(p, e, i);
            if (!end) return 1;
            i = end - 1;
        } else if (p[i] == '{' || p[i] == '[') {
            if (++depth > 1000) return 1;
        } else if (p[i] == '}' || p[i] == ']') {
            depth--;
        }
    }
    return 0;
}

/* A file value the map takes: a plain name beside the index. */
static int file_ok(const uint8_t *f, size_t len) {
    return len && !memchr(f, '/', len) && !(len == 2 && f[0] == '.' && f[1] == '.');
}

/* 1 if two of the n names (lens bytes each) are the same (0 if not, -1
 * out of memory). Only for maps not written in sorted order. */
static int any_duplicate(const char **names, const size_t *lens, size_t n) {
    str_ids seen = {0};
    int dup = 0;
    for (size_t i = 0; i < n && !dup; i++) {
        size_t had = seen.n;
        uint32_t id;
        if (ids_of(&seen, names[i], lens[i], &id)) dup = -1;
        else dup = seen.n == had;
    }
    ids_free(&seen);
    return dup;
}

/* The weight map's object at p[i]: pairs into m, file names into ids,
 * lens[i] each name's length (grown with m). Index past it, 0 to retry,
 * (size_t)-1 out of memory. */
static size_t scan_map(const uint8_t *p, size_t n, size_t i, shard_hf_map *m, str_ids *ids, size_t **lens,
                       int *sorted) {
    size_t cap = 0;
    if (i >= n || p[i] != '{') return 0;
    i = tzr_js_skip_ws(p, n, i + 1);
    if (i < n && p[i] == '}') return i + 1;
    for (;;) {
        size_t nl, fl, at = i;
        if (!(i = plain_string(p, n, i, &nl))) return 0;
        const char *name = (const char *)p + at + 1;
        i = tzr_js_skip_ws(p, n, i);
        if (i >= n || p[i] != ':') return 0;
        at = tzr_js_skip_ws(p, n, i + 1);
        if (!(i = plain_string(p, n, at, &fl)) || !file_ok(p + at + 1, fl)) return 0;
        size_t had = cap;
        if (map_room(m, &cap)) return (size_t)-1;
        if (cap != had) {
            size_t *g = realloc(*lens, cap * sizeof *g);
            if (!g) return tzr_fail(TZR_ENOMEM, "out of memory"), (size_t)-1;
            *lens = g;
        }
        if (m->n && *sorted) { /* strictly increasing: no name twice */
            const char *prev = m->names[m->n - 1];
            size_t pl = (*lens)[m->n - 1];
            int c = memcmp(prev, name, pl < nl ? pl : nl);
            *sorted = c < 0 || (c == 0 && pl < nl);
        }
        uint32_t id;
        if (ids_of(ids, (const char *)p + at + 1, fl, &id)) return (size_t)-1;
        m->names[m->n] = name, m->file[m->n] = id, (*lens)[m->n] = nl;
        m->n++;
        i = tzr_js_skip_ws(p, n, i);
        if (i < n && p[i] == '}') return i + 1;
        if (i >= n || p[i] != ',') return 0;
        i = tzr_js_skip_ws(p, n, i + 1);
    }
}

/* The document by hand: 0, TZR_ENOMEM, or SHARD_RETRY (m then holds what
 * was added, to be dropped). */
static int scan_index(char *text, size_t len, shard_hf_map *m, str_ids *ids) {
    const uint8_t *p = (const uint8_t *)text;
    size_t n = len, i = tzr_js_skip_ws(p, n, 0), *lens = NULL, nkeys = 0;
    const uint8_t *keys[16];
    size_t klens[16];
    int rc = SHARD_RETRY, have_map = 0, sorted = 1;
    if (i >= n || p[i] != '{') return SHARD_RETRY;
    i = tzr_js_skip_ws(p, n, i + 1);
    for (;;) { /* an empty document has no weight map: jansson words it */
        size_t kl, at = i;
        if (!(i = plain_string(p, n, i, &kl)) || nkeys == 16) goto out;
        for (size_t k = 0; k < nkeys; k++)
            if (klens[k] == kl && memcmp(keys[k], p + at + 1, kl) == 0) goto out; /* a duplicate */
        keys[nkeys] = p + at + 1, klens[nkeys++] = kl;
        i = tzr_js_skip_ws(p, n, i);
        if (i >= n || p[i] != ':') goto out;
        i = tzr_js_skip_ws(p, n, i + 1);
        size_t e;
        if (kl == 10 && memcmp(p + at + 1, "weight_map", 10) == 0) {
            e = scan_map(p, n, i, m, ids, &lens, &sorted);
            if (e == (size_t)-1) {
                rc = TZR_ENOMEM;
                goto out;
            }
            have_map = 1;
        } else { /* "metadata" and the like: jansson checks it, unused */
            e = tzr_js_value_end(p, n, i);
            if (e && too_deep(p, i, e)) goto out;
            json_t *v = e ? json_loadb(text + i, e - i, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL) : NULL;
            if (!v) goto out;
            json_decref(v);
        }
        if (!e) goto out;
        i = tzr_js_skip_ws(p, n, e);
        if (i < n && p[i] == '}') break;
        if (i >= n || p[i] != ',') goto out;
        i = tzr_js_skip_ws(p, n, i + 1);
    }
    if (tzr_js_skip_ws(p, n, i + 1) != n || !have_map) goto out;
    if (!sorted) {
        int dup = any_duplicate(m->names, lens, m->n);
        if (dup < 0) rc = tzr_fail(TZR_ENOMEM, "out of memory");
        if (dup) goto out;
    }
    /* Every string ends at its closing quote. */
    for (size_t k = 0; k < m->n; k++) ((char *)m->names[k])[lens[k]] = 0;
    for (size_t k = 0; k < ids->n; k++) ((char *)ids->name[k])[ids->len[k]] = 0;
    rc = 0;
out:
    free(lens);
    return rc;
}

/* The same by jansson's tree. */
static int tree_index(const char *path, const char *text, size_t len, shard_hf_map *m, str_ids *ids) {
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return tzr_fail(TZR_EFORMAT, "%s: line %d: %s", path, jerr.line, jerr.text);
    m->root = root;
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm))
        return tzr_fail(TZR_EFORMAT, "%s: no \"weight_map\" object (not a Hugging Face model.safetensors.index.json)",
                        path);
    size_t cap = 0;
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) {
        const char *f = json_string_value(v);
        if (!f || !file_ok((const uint8_t *)f, strlen(f)))
            return tzr_fail(TZR_EFORMAT, "%s: weight_map entry '%s' must name a file beside the index", path, k);
        uint32_t id;
        if (map_room(m, &cap) || ids_of(ids, f, strlen(f), &id)) return TZR_ENOMEM;
        m->names[m->n] = k, m->file[m->n++] = id;
    }
    return 0;
}

int shard_hf_index_parse(const char *path, char *text, size_t len, int scan, shard_hf_map *m) {
    memset(m, 0, sizeof *m);
    str_ids ids = {0};
    int rc = scan ? scan_index(text, len, m, &ids) : SHARD_RETRY;
    if (rc == SHARD_RETRY) {
        free(m->names), free(m->file);
        m->names = NULL, m->file = NULL, m->n = 0;
        ids_free(&ids);
        memset(&ids, 0, sizeof ids);
        rc = tree_index(path, text, len, m, &ids);
        free(text);
    } else {
        m->text = text;
    }
    if (!rc) rc = files_sorted(m, &ids);
    ids_free(&ids);
    if (rc) shard_hf_map_free(m);
    return rc;
}

int shard_hf_index_read(const char *path, const tzr_http_options *http, shard_hf_map *m) {
    char *text;
    size_t len = 0;
    memset(m, 0, sizeof *m);
    int rc = shard_json_bytes(path, http, &text, &len);
    return rc ? rc : shard_hf_index_parse(path, text, len, 1, m);
}

void shard_hf_map_free(shard_hf_map *m) {
    free(m->names);
    free(m->file);
    free(m->files);
    free(m->text);
    json_decref(m->root);
    memset(m, 0, sizeof *m);
}
