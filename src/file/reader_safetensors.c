/* A safetensors file through the reader: its JSON header becomes the
 * tensor table (names, dtypes, shapes, data offsets), so tzr_load, the
 * sinks, filters, shard sets and multi-rank loads take safetensors exactly
 * as they take .tensors files, from any source (local, S3, HTTP). The
 * tensors have no headers and no hashes: each one's header is empty
 * (header_offset == data_offset) and reads as st_header, all zero.
 *
 * The parse puts each entry straight into the reader's table (one table:
 * building it from a parse table of its own was a second 18 MB for 100k
 * tensors and a second name hash table); what spans entries, file order,
 * duplicate names and overlaps, is checked here, worded as the parse
 * words it. A header read here is kept (r->st_json) and plain names point
 * into it. */
#include "mem.h"
#include "reader_internal.h"
#include "reader_struct.h"
#include "st_internal.h"
#include "tzr_safetensors.h"

#include <string.h>

typedef struct put_state {
    tzr_reader *r;
    int rc_grow;             /* out of memory growing the table */
    /* Consecutive tensors mostly share a dtype: its string parsed once. */
    tzr_dtype st_dt;
    dtype_memo memo;         /* its tensorizer form (a static string) */
    int unsorted;            /* an entry starts before the previous one */
    uint64_t prev_off;
    /* While in file order: the furthest-reaching tensor with bytes so
     * far, and the first tensor that starts before its end (with the one
     * it overlaps). */
    size_t far, overlap, overlap_far; /* index + 1; 0: none */
    uint64_t far_end;
    size_t high;             /* slots [0, high) were written */
} put_state;

/* Room for slot i: the table was sized for as many entries as the header
 * can hold, so this grows only if that bound were wrong. */
static int room(tzr_reader *r, size_t i) {
    if (i < r->t_cap) return 0;
    size_t cap = 2 * r->t_cap;
    tensor_slot *t = tzr_map_zeroed(cap, sizeof *t);
    if (!t) return tzr_fail(TZR_ENOMEM, "out of memory for %zu tensors", cap);
    memcpy(t, r->t, r->t_cap * sizeof *t);
    tzr_unmap_zeroed(r->t, r->t_cap, sizeof *r->t);
    r->t = t;
    r->t_cap = cap;
    return 0;
}

/* Tensor i (in file order) holds [off, off + nbytes). */
static void see_bytes(put_state *ps, size_t i, uint64_t off, uint64_t nbytes) {
    if (!nbytes || ps->overlap) return; /* empty tensors overlap nothing */
    if (ps->far && off < ps->far_end) {
        ps->overlap = i + 1;
        ps->overlap_far = ps->far;
    } else if (!ps->far || off + nbytes > ps->far_end) {
        ps->far = i + 1;
        ps->far_end = off + nbytes;
    }
}

static int put_tensor(void *ctx, size_t i, const tzr_st_tensor *st) {
    put_state *ps = ctx;
    tzr_reader *r = ps->r;
    if (i == 0) { /* (again, when the tree parse retries) */
        r->totals_known = 1;
        r->total_nbytes = r->total_stored = 0;
        r->total_empty = 0;
        ps->unsorted = 0;
        ps->far = ps->overlap = ps->overlap_far = 0;
        ps->far_end = 0;
    }
    int rc = room(r, i);
    if (rc) return rc;
    if (i == 0 || st->dtype != ps->st_dt) {
        size_t dlen;
        const char *dtype = tzr_dtype_string(st->dtype, &dlen);
        if (!dtype)
            return tzr_fail(TZR_ENOTSUP, "%s: tensor '%s': dtype %s has no tensorizer form", r->src->name, st->name,
                            st->st_dtype);
        if ((rc = reader_memo_dtype(&ps->memo, dtype, dlen))) return rc;
        ps->st_dt = st->dtype;
    }
    tensor_slot *s = &r->t[i];
    if (i < ps->high) memset(s, 0, sizeof *s); /* a retry: the slot holds the first pass's entry */
    else ps->high = i + 1; /* fresh pages are zero: writing them again cost a pass */
    tzr_tensor_info *t = &s->info;
    /* No header: it "starts" where the data does, and holds nothing. */
    tensor_row row = {st->name, st->name_len, TZR_STATE_DICT, 0, st->ndim, st->shape,
                      st->data_offset, st->data_offset, st->nbytes, TZR_COMPRESSION_NONE};
    (void)reader_fill_info(t, &row, &ps->memo); /* cannot overflow: the parse checked shape and size */
    s->hdr = &r->st_header;
    s->hdr_bytes = (uint8_t *)&r->st_header; /* "read": there is nothing to read */
    reader_count_tensor(r, t);
    ps->unsorted |= i > 0 && st->data_offset < ps->prev_off;
    ps->prev_off = st->data_offset;
    if (!ps->unsorted) see_bytes(ps, i, st->data_offset, st->nbytes);
    return 0;
}

/* File order (data offset, then JSON order) for a table put in another:
 * rare, writers list their tensors in file order. */
typedef struct order_key {
    uint64_t off;
    size_t i;
} order_key;

static int cmp_key(const void *a, const void *b) {
    const order_key *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int sort_table(tzr_reader *r, size_t n) {
    order_key *order = malloc(n * sizeof *order);
    tensor_slot *t = tzr_map_zeroed(r->t_cap, sizeof *t);
    if (!order || !t) {
        free(order);
        tzr_unmap_zeroed(t, r->t_cap, sizeof *t);
        return tzr_fail(TZR_ENOMEM, "out of memory sorting %zu tensors", n);
    }
    for (size_t i = 0; i < n; i++) order[i] = (order_key){r->t[i].info.data_offset, i};
    qsort(order, n, sizeof *order, cmp_key);
    for (size_t i = 0; i < n; i++) t[i] = r->t[order[i].i];
    free(order);
    tzr_unmap_zeroed(r->t, r->t_cap, sizeof *r->t);
    r->t = t;
    return 0;
}

static tzr_st_tensor as_st(const tzr_tensor_info *t) {
    tzr_st_tensor s = {0};
    s.name = t->name;
    s.name_len = t->name_len;
    s.data_offset = t->data_offset;
    s.nbytes = t->nbytes;
    return s;
}

/* What spans entries, in the parse's order: duplicate names, then the
 * first tensor (in file order) whose bytes overlap an earlier one's. */
static int check_table(tzr_reader *r, const tzr_st_file *f, put_state *ps) {
    size_t dup, other;
    if (reader_index_names(r, &dup, &other)) return tzr_st_fail_dup(f, r->t[dup].info.name, r->t[dup].info.name_len);
    if (ps->unsorted) { /* the check made while putting saw another order */
        ps->far = ps->overlap = ps->overlap_far = 0;
        for (size_t i = 0; i < r->n && !ps->overlap; i++)
            see_bytes(ps, i, r->t[i].info.data_offset, r->t[i].info.nbytes);
    }
    if (!ps->overlap) return 0;
    tzr_st_tensor a = as_st(&r->t[ps->overlap - 1].info), b = as_st(&r->t[ps->overlap_far - 1].info);
    return tzr_st_fail_overlap(f, &a, &b);
}

/* The whole JSON header: from head when it holds it, else read. */
static int parse(tzr_reader *r, const uint8_t *head, size_t head_len, put_state *ps, tzr_st_file **f) {
    uint64_t n = tzr_ld64(head);
    if (n > TZR_ST_MAX_HEADER)
        return tzr_fail(TZR_ELIMIT, "%s: safetensors header length %llu (byte 0) is over the %llu-byte cap",
                        r->src->name, (unsigned long long)n, (unsigned long long)TZR_ST_MAX_HEADER);
    /* As many slots as the header can hold entries: address space, only
     * the slots put are touched. */
    r->t_cap = (size_t)(n / TZR_ST_MIN_ENTRY) + 1;
    if (!(r->t = tzr_map_zeroed(r->t_cap, sizeof *r->t)))
        return tzr_fail(TZR_ENOMEM, "out of memory for a %llu-byte header", (unsigned long long)n);
    if (8 + n <= head_len) /* (head is the caller's: names are copied) */
        return tzr_st_parse_header_each(f, head, head_len, r->src->size, r->src->name, put_tensor, ps, NULL);
    uint8_t *all = tzr_alloc_big((size_t)(8 + n)); /* huge pages: 1,900 faults fewer for a 7.8 MB header */
    if (!all) return tzr_fail(TZR_ENOMEM, "out of memory for a %llu-byte header", (unsigned long long)n);
    /* Kept as long as the reader: plain names point into it. */
    r->st_json = all;
    memcpy(all, head, head_len);
    int rc = r->src->read_at(r->src, all + head_len, (size_t)(8 + n - head_len), head_len);
    if (rc) rc = tzr_fail_prefix(rc, "%s: reading the safetensors header: ", r->src->name);
    if (!rc) rc = tzr_st_parse_header_each(f, all, (size_t)(8 + n), r->src->size, r->src->name, put_tensor, ps, all);
    return rc;
}

int reader_open_safetensors(tzr_reader *r, const uint8_t *head, size_t head_len) {
    tzr_st_file *f = NULL;
    put_state ps = {0};
    ps.r = r;
    r->safetensors = 1;
    r->verify = 0; /* nothing stored to verify against */
    r->marker_checked = 1;
    r->records_end = r->src->size;
    int rc = parse(r, head, head_len, &ps, &f);
    if (rc) return rc;
    /* Names and shapes stay where the parse put them (now the reader's). */
    tzr_st_take_strings(f, &r->strings);
    size_t n = tzr_st_count(f);
    if (n == 0) r->totals_known = 1;
    if (ps.unsorted) rc = sort_table(r, n);
    r->n = n;
    r->nbuckets = 16;
    while (r->nbuckets < 2 * n) r->nbuckets *= 2;
    if (!rc && !(r->buckets = tzr_map_zeroed(r->nbuckets, sizeof *r->buckets)))
        rc = tzr_fail(TZR_ENOMEM, "out of memory for %zu tensors", n);
    if (!rc) rc = check_table(r, f, &ps);
    tzr_st_free(f);
    return rc;
}
