/* A Hugging Face checkpoint as a set: model-0000k-of-0000N.safetensors
 * files (with their model.safetensors.index.json, or a directory, or a
 * plain list). Each file is one "shard" holding its tensors whole, so the
 * set loads through the same engine as a tzr manifest: any rank count,
 * any sink, the pipelined reader per file. With an index, its weight map
 * must match the files exactly: a tensor a file holds but the index maps
 * elsewhere (or not at all), or one the index lists that its file lacks,
 * is an error naming both. */
#include "names.h"
#include "shard_internal.h"
#include "scheme.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define HF_INDEX "model.safetensors.index.json"

/* File k of the set: open it (its tensors are entered once all are open,
 * into a table reserved for them all). */
static int open_file(tzr_shard_set *s, int k, void *ctx) {
    const char *path = ((const char *const *)ctx)[k];
    tzr_reader_options ro = TZR_READER_OPTIONS_INIT;
    ro.verify = s->verify;
    ro.crypt = s->crypt;
    ro.http = s->http;
    int rc = tzr_reader_open(&s->readers[k], path, &ro);
    if (rc) return rc;
    const char *base = strrchr(path, '/');
    if (!(s->tb.files[k] = strdup(base ? base + 1 : path))) return tzr_fail(TZR_ENOMEM, "out of memory");
    s->tb.sizes[k] = tzr_reader_source(s->readers[k])->size;
    return 0;
}

static const char *file_path(const tzr_shard_set *s, int k) { return tzr_reader_source(s->readers[k])->name; }

/* Names hashed this far ahead of their lookup, their slots prefetched;
 * the hashes wait in a ring of RING. */
#define AHEAD 8
#define RING (2 * AHEAD)

/* Every tensor file k holds, into the table. */
static int add_tensors(tzr_shard_set *s, int k) {
    tzr_reader *r = s->readers[k];
    size_t n = tzr_reader_count(r);
    uint64_t h[RING];
    for (size_t i = 0; i < n + AHEAD; i++) {
        if (i < n) {
            const tzr_tensor_info *a = tzr_reader_tensor(r, i);
            h[i % RING] = tzr_name_hash(a->name, a->name_len);
            shard_table_prefetch(&s->tb, h[i % RING]);
        }
        if (i < AHEAD) continue;
        size_t j = i - AHEAD, other;
        const tzr_tensor_info *t = tzr_reader_tensor(r, j);
        shard_entry *e;
        int rc = shard_table_add_new(&s->tb, t->name, t->name_len, h[j % RING], t->dtype_str, t->dtype_len, t->ndim,
                                     t->shape, TZR_SHARD_REPLICATED, &e, &other);
        if (rc == TZR_EDUP) {
            char nb[TZR_NAMEBUF];
            return tzr_fail(TZR_EDUP, "%s: tensor '%s' is in both %s and %s", s->path,
                            tzr_printable(t->name, t->name_len, nb, sizeof nb),
                            file_path(s, s->tb.t[other].slices[0].shard), file_path(s, k));
        }
        if (rc || shard_entry_add_slice(&s->tb, e, k, 0, 0)) return TZR_ENOMEM;
        e->slices[e->nslices - 1].local = j;
    }
    return 0;
}

/* The index's weight map against the files: each name it lists is a
 * tensor of the file it maps it to, and every tensor is listed (the map
 * names none twice, so once). Shard k was opened from m->files[k]. */
static int check_map(tzr_shard_set *s, const char *index, const shard_hf_map *m) {
    const shard_table *tb = &s->tb;
    uint8_t *listed = calloc(tb->n ? tb->n : 1, 1);
    if (!listed) return tzr_fail(TZR_ENOMEM, "out of memory");
    int rc = 0;
    char nb[TZR_NAMEBUF];
    uint64_t h[RING];
    size_t len[RING];
    for (size_t i = 0; i < m->n + AHEAD && !rc; i++) {
        if (i < m->n) {
            len[i % RING] = strlen(m->names[i]);
            h[i % RING] = tzr_name_hash(m->names[i], len[i % RING]);
            shard_table_prefetch(tb, h[i % RING]);
        }
        if (i < AHEAD) continue;
        size_t at = i - AHEAD, j;
        const char *name = m->names[at], *file = m->files[m->file[at]];
        if (shard_table_find_hashed(&s->tb, name, len[at % RING], h[at % RING], &j)) {
            rc = tzr_fail(TZR_EFORMAT, "%s: the index lists tensor '%s' in %s, but that file does not hold it", index,
                          name, file);
            break;
        }
        int k = tb->t[j].slices[0].shard;
        if ((uint32_t)k != m->file[at])
            rc = tzr_fail(TZR_EFORMAT, "%s: tensor '%s' is in %s but the index maps it to %s", s->path,
                          tzr_printable(tb->t[j].name, tb->t[j].pub.name_len, nb, sizeof nb), file_path(s, k), file);
        listed[j] = 1;
    }
    for (size_t j = 0; j < tb->n && !rc; j++)
        if (!listed[j])
            rc = tzr_fail(TZR_EFORMAT, "%s: tensor '%s' is in %s but the index does not list it", s->path,
                          tzr_printable(tb->t[j].name, tb->t[j].pub.name_len, nb, sizeof nb),
                          file_path(s, tb->t[j].slices[0].shard));
    free(listed);
    return rc;
}

int shard_open_hf(tzr_shard_set *s, const char *path, const char *const *list, size_t nlist) {
    char index[8300] = "", **owned = NULL;
    size_t nfiles = 0;
    shard_hf_map m = {0};
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
        if (!m.nfiles) {
            rc = tzr_fail(TZR_EFORMAT, "%s: the weight map is empty", index);
            goto out;
        }
        if (!(owned = calloc(m.nfiles, sizeof *owned))) rc = tzr_fail(TZR_ENOMEM, "out of memory");
        for (size_t i = 0; i < m.nfiles && !rc; i++) {
            char loc[8300];
            if (!(rc = shard_location(index, m.files[i], loc, sizeof loc)) && !(owned[nfiles++] = strdup(loc)))
                rc = tzr_fail(TZR_ENOMEM, "out of memory");
        }
        if (rc) goto out;
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
    /* The files on one thread each up to the core count (one after the
     * other, their headers were half of a 100k-tensor set's open). */
    if (!rc) rc = shard_each(s, open_file, (void *)files, NULL);
    if (rc == TZR_ENOTFOUND && single)
        rc = tzr_fail(TZR_ENOTFOUND, "%s: no %s and no model.safetensors here (an HTTP server cannot be listed: "
                      "name the index or the files)", path, HF_INDEX);
    /* The table and its name index sized once for every tensor. */
    size_t total = 0;
    for (size_t k = 0; k < n && !rc; k++) total += tzr_reader_count(s->readers[k]);
    if (!rc) rc = shard_table_reserve(&s->tb, total);
    if (!rc) rc = shard_table_index_reserve(&s->tb, total);
    for (size_t k = 0; k < n && !rc; k++) rc = add_tensors(s, (int)k);
    if (!rc && index[0]) rc = check_map(s, index, &m);
out:
    for (size_t i = 0; owned && i < nfiles; i++) free(owned[i]);
    free(owned);
    shard_hf_map_free(&m);
    return rc;
}
