/* The reader's state, shared by reader.c (tensorizer files) and
 * reader_safetensors.c (safetensors files read through the same reader,
 * so every loader path takes them). Nothing outside src/file includes it. */
#ifndef TZR_READER_STRUCT_H
#define TZR_READER_STRUCT_H

#include "crypt.h"
#include "format.h"
#include "mem.h"

#include <pthread.h>

/* The parsed header lives out of line, in the headers arena: most loads
 * never keep one, and inline it tripled the per-tensor memory the index
 * parse touches (44 MB for 100k tensors instead of 18). */
typedef struct tensor_slot {
    tzr_tensor_info info;
    uint8_t *hdr_bytes;     /* NULL until the header was read */
    tzr_tensor_header *hdr; /* points into hdr_bytes */
} tensor_slot;

typedef struct kept_header {
    tzr_tensor_header h;
    uint8_t bytes[];
} kept_header;

typedef struct dir_entry {
    tzr_comp_info ci;       /* frame_sizes point into dir_bytes */
    size_t at, len;         /* the block's bytes in dir_bytes */
} dir_entry;

typedef struct derived_key {
    uint64_t ops, mem;
    int32_t alg;
    uint8_t salt[TZR_SALT_BYTES];
    uint8_t key[32];
} derived_key;

struct tzr_reader {
    tzr_source *src;
    tzr_file_header fh;
    int crypt_info;
    int comp_info;          /* headers carry compression blocks */
    size_t n;
    tensor_slot *t;         /* tzr_map_zeroed, t_cap slots */
    size_t t_cap;
    uint64_t *dims;
    uint64_t *buckets;      /* open addressing: name hash tag << 32 | index+1; 0 = empty */
    size_t nbuckets;
    int verify;
    int have_key;
    uint8_t key[32];
    char *password;
    size_t password_len;
    pthread_mutex_t lock;   /* header cache and derived keys */
    derived_key *dkeys;
    size_t ndkeys;
    tzr_arena strings;      /* names and dtypes (open only) */
    dir_entry *dir;         /* frame directory, per tensor; NULL without one */
    uint8_t *dir_bytes;
    tzr_arena headers;      /* header copies, under lock */
    uint64_t records_end;   /* where the end-of-tensors marker is */
    int marker_checked;     /* its bytes were read and are zero (atomic) */
    int safetensors;        /* a safetensors file: no tensor headers, no hashes */
    /* Each tensor's SHA-256 as its checked header states it: 32 bytes,
     * then HDR_SHA_EMPTY / _WRITING / _KNOWN (tzr_reader_want_header_sha;
     * NULL until asked, then published with release). */
    uint8_t (*hdr_sha)[33];
    /* Over every tensor, summed at open (tzr_reader_totals): a whole-file
     * load then needs no pass over the tensor table to size itself. */
    int totals_known;
    uint64_t total_nbytes, total_stored;
    size_t total_empty;
    tzr_tensor_header st_header; /* what every tensor's header reads as then */
    uint8_t *st_json;       /* its header when read at open: names point into it */
};

/* The dtype of the tensor last put in the table: consecutive tensors
 * mostly share one, parsed once. */
typedef struct dtype_memo {
    const char *dtype; /* kept as long as the reader; NULL before the first */
    size_t dtype_len;
    tzr_dtype parsed;
    uint32_t itemsize;
    int opaque;
} dtype_memo;

/* One tensor as either index form (a .tensors index entry, a safetensors
 * header entry) gives it, after that form's own checks: name, dtype and
 * shape are kept as long as the reader. */
typedef struct tensor_row {
    const char *name;
    size_t name_len;
    tzr_tensor_type type;
    int module_idx;         /* -1: known with the tensor's header */
    uint32_t ndim;
    const uint64_t *shape;
    uint64_t header_offset, data_offset, data_length;
    int compression;        /* -1: known with the tensor's header */
} tensor_row;

/* Parse dtype (len bytes, kept) into m; m is unchanged on failure (the
 * code of tzr_dtype_parse, its message set). */
TZR_HIDDEN int reader_memo_dtype(dtype_memo *m, const char *dtype, size_t len);
/* Tensor t's table row from row and the dtype in m: numel and nbytes
 * from the shape, the stored lengths from data_length (meta when it is 0
 * for a tensor with bytes). The one fill of both forms; it leaves
 * `structured`, `encrypted` and the frame fields to the caller.
 * READER_FILL_NUMEL / READER_FILL_NBYTES: that product overflows (the
 * caller words the error). */
#define READER_FILL_NUMEL 1
#define READER_FILL_NBYTES 2
TZR_HIDDEN int reader_fill_info(tzr_tensor_info *t, const tensor_row *row, const dtype_memo *m);
/* Fill r (source, options set) from a safetensors file whose first
 * head_len bytes are head. */
TZR_HIDDEN int reader_open_safetensors(tzr_reader *r, const uint8_t *head, size_t head_len);
/* Add tensor t to the open's totals (tzr_reader_totals); an overflow
 * leaves them unknown. */
static inline void reader_count_tensor(struct tzr_reader *r, const tzr_tensor_info *t) {
    if (__builtin_add_overflow(r->total_nbytes, t->nbytes, &r->total_nbytes) ||
        __builtin_add_overflow(r->total_stored, t->data_length, &r->total_stored))
        r->totals_known = 0;
    r->total_empty += t->data_length == 0;
}
/* Enter every tensor's name in the lookup table (sized at open); TZR_EDUP,
 * with no message set, when tensors *dup and *other (the earlier) share one. */
TZR_HIDDEN int reader_index_names(tzr_reader *r, size_t *dup, size_t *other);
#endif
