/* A safetensors file through the reader: its JSON header becomes the
 * tensor table (names, dtypes, shapes, data offsets), so tzr_load, the
 * sinks, filters, shard sets and multi-rank loads take safetensors exactly
 * as they take .tensors files, from any source (local, S3, HTTP). The
 * tensors have no headers and no hashes: each one's header is empty
 * (header_offset == data_offset) and reads as st_header, all zero. */
#include "mem.h"
#include "reader_internal.h"
#include "reader_struct.h"
#include "st_internal.h"
#include "tzr_safetensors.h"

#include <string.h>

/* The whole JSON header: from head when it holds it, else read. */
static int parse(tzr_reader *r, const uint8_t *head, size_t head_len, tzr_st_file **f) {
    uint64_t n = tzr_ld64(head);
    if (n > TZR_ST_MAX_HEADER)
        return tzr_fail(TZR_ELIMIT, "%s: safetensors header length %llu (byte 0) is over the %llu-byte cap",
                        r->src->name, (unsigned long long)n, (unsigned long long)TZR_ST_MAX_HEADER);
    if (8 + n <= head_len) return tzr_st_parse_header(f, head, head_len, r->src->size, r->src->name);
    uint8_t *all = tzr_alloc_big((size_t)(8 + n)); /* huge pages: 1,900 faults fewer for a 7.8 MB header */
    if (!all) return tzr_fail(TZR_ENOMEM, "out of memory for a %llu-byte header", (unsigned long long)n);
    memcpy(all, head, head_len);
    int rc = r->src->read_at(r->src, all + head_len, (size_t)(8 + n - head_len), head_len);
    if (rc) rc = tzr_fail_prefix(rc, "%s: reading the safetensors header: ", r->src->name);
    if (!rc) rc = tzr_st_parse_header(f, all, (size_t)(8 + n), r->src->size, r->src->name);
    free(all);
    return rc;
}

int reader_open_safetensors(tzr_reader *r, const uint8_t *head, size_t head_len) {
    tzr_st_file *f = NULL;
    int rc = parse(r, head, head_len, &f);
    if (rc) return rc;
    size_t n = tzr_st_count(f);
    r->safetensors = 1;
    r->verify = 0; /* nothing stored to verify against */
    r->marker_checked = 1;
    r->records_end = r->src->size;
    r->n = n;
    r->t = tzr_map_zeroed(n ? n : 1, sizeof *r->t);
    r->t_cap = n ? n : 1;
    r->nbuckets = 16;
    while (r->nbuckets < 2 * n) r->nbuckets *= 2;
    r->buckets = tzr_map_zeroed(r->nbuckets, sizeof *r->buckets);
    if (!r->t || !r->buckets) rc = tzr_fail(TZR_ENOMEM, "out of memory for %zu tensors", n);
    /* Names and shapes stay where the parse put them (now the reader's):
     * copying them was 4 MB of fresh memory for 100k tensors. */
    tzr_st_take_strings(f, &r->strings);
    r->totals_known = 1;
    /* Consecutive tensors mostly share a dtype: parse its string once. */
    tzr_dtype last = TZR_DTYPE_UNKNOWN, last_dt = TZR_DTYPE_UNKNOWN;
    const char *dtype = NULL;
    size_t dlen = 0;
    uint32_t itemsize = 0;
    int opaque = 0;
    for (size_t i = 0; i < n && !rc; i++) { /* file order: tzr_st_get is sorted by offset */
        const tzr_st_tensor *st = tzr_st_get(f, i);
        tensor_slot *s = &r->t[i];
        tzr_tensor_info *t = &s->info;
        if (st->dtype != last || i == 0) {
            /* A static string, NUL-terminated at dlen, shared by all. */
            if (!(dtype = tzr_dtype_string(st->dtype, &dlen))) {
                rc = tzr_fail(TZR_ENOTSUP, "%s: tensor '%s': dtype %s has no tensorizer form", r->src->name,
                              st->name, st->st_dtype);
                break;
            }
            if ((rc = tzr_dtype_parse(dtype, dlen, &last_dt, &itemsize, &opaque))) break;
            last = st->dtype;
        }
        t->name = st->name;
        t->name_len = st->name_len;
        t->type = TZR_STATE_DICT;
        t->module_idx = 0;
        t->dtype_str = dtype;
        t->dtype_len = dlen;
        t->dtype = last_dt;
        t->itemsize = itemsize;
        t->opaque = opaque;
        t->ndim = st->ndim;
        t->numel = 1;
        for (uint32_t d = 0; d < st->ndim; d++) t->numel *= st->shape[d];
        t->shape = st->shape;
        t->nbytes = st->nbytes; /* checked against shape and dtype by the parser */
        t->header_offset = t->data_offset = st->data_offset;
        t->data_length = t->stored_length = t->uncompressed_length = st->nbytes;
        t->compression = TZR_COMPRESSION_NONE;
        t->byte_planes = 1;
        s->hdr = &r->st_header;
        s->hdr_bytes = (uint8_t *)&r->st_header; /* "read": there is nothing to read */
        reader_count_tensor(r, t);
    }
    size_t dup, other;
    if (!rc && reader_index_names(r, &dup, &other))
        rc = tzr_fail(TZR_EDUP, "%s: tensor '%s' appears twice", r->src->name, r->t[dup].info.name);
    tzr_st_free(f);
    return rc;
}
