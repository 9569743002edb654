/* Writing one rank's shard: a plain .tensors file whose tensors are the
 * local slices under their global names, plus a sidecar JSON describing
 * the slices for tzr_shard_manifest_build. */
#include "hash.h"
#include "shard_internal.h"

#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The header SHA-256 of a tensor streamed by the writer's workers, known
 * once its record is written: copied into its slice at close. */
typedef struct pending_sha {
    size_t entry;
    uint8_t sha[32];
    struct pending_sha *next;
} pending_sha;

struct tzr_shard_writer {
    tzr_writer *w;
    shard_table tb;
    int rank, nranks, no_hash;
    pending_sha *pending;
    char path[4096], side[4096];
};

static void free_pending(tzr_shard_writer *sw) {
    while (sw->pending) {
        pending_sha *p = sw->pending;
        sw->pending = p->next;
        free(p);
    }
}

int tzr_shard_writer_open(tzr_shard_writer **out, const char *prefix, int rank, int nranks,
                          const tzr_shard_writer_options *opt) {
    *out = NULL;
    tzr_shard_writer_options o = TZR_SHARD_WRITER_OPTIONS_INIT;
    if (TZR_OPTS(tzr_shard_writer_options, o, opt, offsetof(tzr_shard_writer_options, file))) return TZR_EINVAL;
    opt = &o;
    tzr_shard_writer *sw = calloc(1, sizeof *sw);
    if (!sw) return tzr_fail(TZR_ENOMEM, "out of memory");
    int rc = opt->file_pattern ? tzr_shard_rank_path(sw->path, sizeof sw->path, opt->file_pattern, rank)
                               : tzr_shard_file_name(sw->path, sizeof sw->path, prefix, rank, nranks, ".tensors");
    if (!rc) rc = tzr_shard_file_name(sw->side, sizeof sw->side, prefix, rank, nranks, TZR_SHARD_PART_SUFFIX);
    if (rc) {
        free(sw);
        return rc;
    }
    sw->rank = rank;
    sw->nranks = nranks;
    sw->no_hash = opt && opt->no_hash;
    sw->tb.nshards = nranks;
    sw->tb.files = calloc((size_t)nranks, sizeof *sw->tb.files);
    sw->tb.sizes = calloc((size_t)nranks, sizeof *sw->tb.sizes);
    const char *base = strrchr(sw->path, '/');
    if (!sw->tb.files || !sw->tb.sizes || !(sw->tb.files[rank] = strdup(base ? base + 1 : sw->path))) {
        shard_table_free(&sw->tb);
        free(sw);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    tzr_writer_options wo = TZR_WRITER_OPTIONS_INIT;
    if (opt->file && TZR_OPTS(tzr_writer_options, wo, opt->file, offsetof(tzr_writer_options, compression))) {
        shard_table_free(&sw->tb);
        free(sw);
        return TZR_EINVAL;
    }
    if (opt->metadata_size) wo.metadata_size = opt->metadata_size;
    if ((rc = tzr_writer_open(&sw->w, sw->path, &wo))) {
        shard_table_free(&sw->tb);
        free(sw);
        return rc;
    }
    *out = sw;
    return 0;
}

int tzr_shard_writer_reserve(tzr_shard_writer *sw, uint64_t tensors, uint64_t name_bytes, uint64_t dtype_bytes,
                             uint64_t dims, uint64_t data_bytes) {
    if (!sw) return tzr_fail(TZR_EINVAL, "NULL shard writer");
    return tzr_writer_reserve(sw->w, tensors, name_bytes, dtype_bytes, dims, data_bytes);
}

/* Check d, enter the tensor and this shard's slice in the sidecar table,
 * and describe the shard tensor (local shape into local[]). */
static int slice_enter(tzr_shard_writer *sw, const tzr_shard_tensor_desc *d, uint64_t *local, tzr_tensor_desc *td,
                       shard_entry **entry) {
    if (!sw || !d || !d->name || d->ndim > TZR_MAX_DIMS) return tzr_fail(TZR_EINVAL, "bad shard tensor description");
    char nb[TZR_NAMEBUF];
    const char *nm = tzr_printable(d->name, d->name_len, nb, sizeof nb);
    const char *dstr = d->dtype_str;
    size_t dlen = d->dtype_len;
    if (!dstr && !(dstr = tzr_dtype_string(d->dtype, &dlen)))
        return tzr_fail(TZR_EINVAL, "tensor '%s': no dtype", nm);
    int dim = d->dim;
    for (uint32_t k = 0; k < d->ndim; k++) local[k] = d->shape[k];
    if (dim != TZR_SHARD_REPLICATED) {
        uint64_t end;
        if (dim < 0 || (uint32_t)dim >= d->ndim)
            return tzr_fail(TZR_EINVAL, "tensor '%s': split dim %d but %u dims", nm, dim, d->ndim);
        if (!tzr_add_ok(d->offset, d->length, &end) || end > d->shape[dim])
            return tzr_fail(TZR_EINVAL, "tensor '%s': slice [%llu, +%llu) passes dim %d of length %llu", nm,
                            (unsigned long long)d->offset, (unsigned long long)d->length, dim,
                            (unsigned long long)d->shape[dim]);
        local[dim] = d->length;
    }
    if (shard_table_find(&sw->tb, d->name, d->name_len, &(size_t){0}) == 0)
        return tzr_fail(TZR_EDUP, "tensor '%s' added twice to shard %d", nm, sw->rank);
    shard_entry *e = shard_table_add(&sw->tb, d->name, d->name_len, dstr, dlen, d->ndim, d->shape, dim);
    if (!e) return TZR_ENOMEM;
    if (!e->pub.itemsize) {
        shard_table_drop_last(&sw->tb);
        return tzr_fail(TZR_EINVAL, "tensor '%s': bad dtype string", nm);
    }
    int rc = shard_entry_add_slice(&sw->tb, e, sw->rank, dim == TZR_SHARD_REPLICATED ? 0 : d->offset,
                                   dim == TZR_SHARD_REPLICATED ? 0 : d->length);
    if (rc) return rc;
    if (d->sha256) {
        memcpy(e->pub.sha256, d->sha256, 32);
        e->pub.has_sha256 = 1;
    }
    *td = (tzr_tensor_desc){d->name, d->name_len, d->name_len && d->name[0] == 0x1E ? TZR_STATE_DICT : TZR_PARAM,
                            0, dstr, dlen, d->dtype, d->ndim, local, 0, sizeof(tzr_tensor_desc)};
    *entry = e;
    return 0;
}

int tzr_shard_writer_add(tzr_shard_writer *sw, const tzr_shard_tensor_desc *d, const void *data) {
    uint64_t local[TZR_MAX_DIMS];
    tzr_tensor_desc td;
    shard_entry *e;
    int rc = slice_enter(sw, d, local, &td, &e);
    if (!rc) rc = tzr_writer_add(sw->w, &td, data);
    if (rc) return rc;
    uint8_t sha[32];
    tzr_writer_last_sha256(sw->w, sha);
    if ((rc = shard_slice_set_sha(&sw->tb.arena, &e->slices[e->nslices - 1], sha))) return rc;
    if (!d->sha256 && d->dim == TZR_SHARD_REPLICATED && !sw->no_hash) {
        tzr_sha256(data, (size_t)e->pub.nbytes, e->pub.sha256);
        e->pub.has_sha256 = 1;
    }
    return 0;
}

/* No whole-tensor sha256 here unless the caller gives one: the header
 * SHA-256 recorded for the slice proves it (formats/shards.md). */
int tzr_shard_writer_add_from(tzr_shard_writer *sw, const tzr_shard_tensor_desc *d, tzr_source *src,
                              uint64_t offset) {
    if (!src) return tzr_fail(TZR_EINVAL, "NULL source");
    uint64_t local[TZR_MAX_DIMS];
    tzr_tensor_desc td;
    shard_entry *e;
    int rc = slice_enter(sw, d, local, &td, &e);
    if (rc) return rc;
    pending_sha *p = calloc(1, sizeof *p);
    if (!p) return tzr_fail(TZR_ENOMEM, "out of memory");
    p->entry = (size_t)(e - sw->tb.t);
    if ((rc = tzr_writer_add_from_sha(sw->w, &td, src, offset, p->sha))) {
        free(p);
        return rc;
    }
    p->next = sw->pending;
    sw->pending = p;
    return 0;
}

int tzr_shard_writer_close(tzr_shard_writer *sw) {
    if (!sw) return tzr_fail(TZR_EINVAL, "no shard writer");
    int rc = tzr_writer_close(sw->w);
    for (pending_sha *p = sw->pending; p && !rc; p = p->next) {
        shard_entry *e = &sw->tb.t[p->entry];
        rc = shard_slice_set_sha(&sw->tb.arena, &e->slices[e->nslices - 1], p->sha);
    }
    free_pending(sw);
    struct stat st;
    if (!rc && stat(sw->path, &st) != 0) rc = tzr_fail(TZR_EIO, "shard %d: cannot stat '%s'", sw->rank, sw->path);
    else if (!rc) {
        sw->tb.sizes[sw->rank] = (uint64_t)st.st_size;
        /* A shard without its sidecar is no part of a set: not left behind. */
        if ((rc = shard_json_write(&sw->tb, sw->rank, sw->side, 0))) unlink(sw->path);
    }
    shard_table_free(&sw->tb);
    free(sw);
    return rc;
}

void tzr_shard_writer_abort(tzr_shard_writer *sw) {
    TZR_KEEP_ERROR;
    if (!sw) return;
    tzr_writer_abort(sw->w);
    free_pending(sw);
    shard_table_free(&sw->tb);
    free(sw);
}
