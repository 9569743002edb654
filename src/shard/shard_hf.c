/* A Hugging Face checkpoint as a set: model-0000k-of-0000N.safetensors
 * files (with their model.safetensors.index.json, or a directory, or a
 * plain list). Each file is one "shard" holding its tensors whole, so the
 * set loads through the same engine as a tzr manifest: any rank count,
 * any sink, the pipelined reader per file. With an index, its weight map
 * must match the files exactly: a tensor a file holds but the index maps
 * elsewhere (or not at all), or one the index lists that its file lacks,
 * is an error naming both. */
#include "shard_internal.h"
#include "scheme.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define HF_INDEX "model.safetensors.index.json"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The index's name -> file pairs sorted by name, for lookups. */
typedef struct hf_pair { const char *name, *file; int seen; } hf_pair;
static int cmp_pair(const void *a, const void *b) { return strcmp(((const hf_pair *)a)->name, ((const hf_pair *)b)->name); }

/* File k of the set: open it and enter every tensor it holds. */
static int add_file(tzr_shard_set *s, int k, const char *path, hf_pair *pairs, size_t npairs, const char *fname) {
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    ro.verify = s->verify;
    ro.crypt = s->crypt;
    ro.http = s->http;
    int rc = tzr_reader_open(&s->readers[k], path, &ro);
    if (rc) return rc;
    tzr_reader *r = s->readers[k];
    const char *base = strrchr(path, '/');
    if (!(s->tb.files[k] = strdup(base ? base + 1 : path))) return tzr_fail(TZR_ENOMEM, "out of memory");
    s->tb.sizes[k] = tzr_reader_source(r)->size;
    for (size_t i = 0; i < tzr_reader_count(r); i++) {
        const tzr_tensor_info *t = tzr_reader_tensor(r, i);
        char nb[TZR_NAMEBUF];
        const char *nm = tzr_printable(t->name, t->name_len, nb, sizeof nb);
        if (pairs) {
            hf_pair key = {t->name, NULL, 0}, *p = bsearch(&key, pairs, npairs, sizeof *pairs, cmp_pair);
            if (!p) return tzr_fail(TZR_EFORMAT, "%s: tensor '%s' is in %s but the index does not list it", s->path, nm, path);
            if (strcmp(p->file, fname))
                return tzr_fail(TZR_EFORMAT, "%s: tensor '%s' is in %s but the index maps it to %s", s->path, nm, path,
                                p->file);
            p->seen = 1;
        }
        size_t other;
        if (shard_table_find(&s->tb, t->name, t->name_len, &other) == 0) {
            int k0 = s->tb.t[other].slices[0].shard;
            return tzr_fail(TZR_EDUP, "%s: tensor '%s' is in both %s and %s", s->path, nm,
                            tzr_reader_source(s->readers[k0])->name, path);
        }
        shard_entry *e = shard_table_add(&s->tb, t->name, t->name_len, t->dtype_str, t->dtype_len, t->ndim, t->shape,
                                         TZR_SHARD_REPLICATED);
        if (!e || shard_entry_add_slice(&s->tb, e, k, 0, 0)) return TZR_ENOMEM;
        e->slices[e->nslices - 1].local = i;
    }
    return 0;
}

int shard_open_hf(tzr_shard_set *s, const char *path, const char *const *list, size_t nlist) {
    char index[8300] = "", **owned = NULL, **names = NULL;
    size_t nfiles = 0;
    shard_hf_map m = {0};
    hf_pair *pairs = NULL;
    struct stat st;
    int rc = 0, index_read = 0, single = 0;
    if (!list && !tzr_is_url(path) && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(index, sizeof index, "%s/%s", path, HF_INDEX);
        if (stat(index, &st) != 0) {
            index[0] = 0;
            if (!(rc = tzr_path_list(path, ".safetensors", s->http, &owned, &nfiles)) && !nfiles)
                rc = tzr_fail(TZR_ENOTFOUND, "%s: no %s and no .safetensors files in this directory", path, HF_INDEX);
            if (rc) goto out;
        }
    } else if (!list && shard_url_dir(path)) {
        /* A prefix: its index, else (S3) the listing's .safetensors, else
         * (HTTP, which cannot be listed) a single model.safetensors. */
        size_t end = strcspn(path, "?#");
        snprintf(index, sizeof index, "%.*s%s", (int)end, path, HF_INDEX);
        rc = shard_hf_index_read(index, s->http, &m);
        if (rc == TZR_ENOTFOUND) {
            index[0] = 0;
            if (tzr_scheme_of(path)->list) {
                char prefix[8300];
                snprintf(prefix, sizeof prefix, "%.*s", (int)end, path); /* less any ?query */
                rc = tzr_path_list(prefix, ".safetensors", s->http, &owned, &nfiles);
                if (!rc && !nfiles)
                    rc = tzr_fail(TZR_ENOTFOUND, "%s: no %s and no .safetensors objects under this prefix", path,
                                  HF_INDEX);
            } else if (!(owned = calloc(1, sizeof *owned)) || !(owned[0] = malloc(end + 20))) {
                rc = tzr_fail(TZR_ENOMEM, "out of memory");
            } else {
                snprintf(owned[0], end + 20, "%.*smodel.safetensors", (int)end, path);
                nfiles = 1, single = 1;
            }
        }
        if (rc) goto out;
        index_read = index[0] != 0;
    } else if (!list) {
        snprintf(index, sizeof index, "%s", path);
    }
    if (index[0]) { /* the files the index names, sorted, once each */
        if (!index_read && (rc = shard_hf_index_read(index, s->http, &m))) goto out;
        if (!(pairs = calloc(m.n ? m.n : 1, sizeof *pairs)) || !(names = calloc(m.n ? m.n : 1, sizeof *names))) {
            rc = tzr_fail(TZR_ENOMEM, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < m.n; i++) pairs[i] = (hf_pair){m.names[i], m.files[i], 0}, names[i] = m.files[i];
        qsort(pairs, m.n, sizeof *pairs, cmp_pair);
        qsort(names, m.n, sizeof *names, cmp_str);
        size_t u = 0;
        for (size_t i = 0; i < m.n; i++)
            if (!u || strcmp(names[u - 1], names[i])) names[u++] = names[i];
        if (!(owned = calloc(u ? u : 1, sizeof *owned))) rc = tzr_fail(TZR_ENOMEM, "out of memory");
        for (size_t i = 0; i < u && !rc; i++) {
            char loc[8300];
            if (!(rc = shard_location(index, names[i], loc, sizeof loc)) && !(owned[nfiles++] = strdup(loc)))
                rc = tzr_fail(TZR_ENOMEM, "out of memory");
        }
        if (rc) goto out;
        if (!u) {
            rc = tzr_fail(TZR_EFORMAT, "%s: the weight map is empty", index);
            goto out;
        }
    }
    const char *const *files = list ? list : (const char *const *)owned;
    size_t n = list ? nlist : nfiles;
    if (n > TZR_SHARD_MAX) {
        rc = tzr_fail(TZR_ELIMIT, "%s: %zu files; at most %d", path, n, TZR_SHARD_MAX);
        goto out;
    }
    s->tb.nshards = (int)n;
    s->tb.files = calloc(n ? n : 1, sizeof *s->tb.files);
    s->tb.sizes = calloc(n ? n : 1, sizeof *s->tb.sizes);
    s->readers = calloc(n ? n : 1, sizeof *s->readers);
    if (!s->tb.files || !s->tb.sizes || !s->readers) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    for (size_t k = 0; k < n && !rc; k++) {
        const char *fname = strrchr(files[k], '/');
        rc = add_file(s, (int)k, files[k], index[0] ? pairs : NULL, m.n, fname ? fname + 1 : files[k]);
        if (rc == TZR_ENOTFOUND && single)
            rc = tzr_fail(TZR_ENOTFOUND, "%s: no %s and no model.safetensors here (an HTTP server cannot be listed: "
                          "name the index or the files)", path, HF_INDEX);
    }
    for (size_t i = 0; !rc && index[0] && i < m.n; i++)
        if (!pairs[i].seen)
            rc = tzr_fail(TZR_EFORMAT, "%s: the index lists tensor '%s' in %s, but that file does not hold it", index,
                          pairs[i].name, pairs[i].file);
out:
    for (size_t i = 0; owned && i < nfiles; i++) free(owned[i]);
    free(owned);
    free(names);
    free(pairs);
    shard_hf_map_free(&m);
    return rc;
}
