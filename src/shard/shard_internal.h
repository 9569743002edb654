/* Shared by the shard_*.c files: the in-memory form of a manifest or a
 * sidecar (a table of global tensors and the slices each shard holds),
 * split rules, and the set handle. */
#ifndef TZR_SHARD_INTERNAL_H
#define TZR_SHARD_INTERNAL_H

#include "internal.h"
#include "mem.h"
#include "tzr_shard.h"

#include <pthread.h>
#include <stdatomic.h>

#define SHARD_FORMAT "tzr-shards"
#define SHARD_VERSION 2 /* written; 1 and 2 are read */
#define SHARD_HASHES_SUFFIX TZR_SHARD_HASHES_SUFFIX
/* The largest manifest read (formats/shards.md): a 100k-tensor checkpoint
 * cut 32 ways writes ~400 MB of JSON; the bound keeps a stray file from
 * being read whole into memory. */
#define SHARD_JSON_MAX ((uint64_t)2 << 30)

/* 40 bytes (an entry listing its slices one by one holds one a shard;
 * even splits share theirs, see shard_entry_split). */
typedef struct shard_slice {
    int shard;
    uint64_t offset, length;    /* along the tensor's split dim; 0,0 if replicated */
    size_t local;               /* index in that shard's reader (set when it opens) */
    const uint8_t *header_sha;  /* 32 bytes or NULL: the SHA-256 in that shard
                                   tensor's header, so a verified load proves its
                                   identity. In the table's arena, or (version 2)
                                   in the set's copy of the shard's digests. */
} shard_slice;

/* sl's header digest: a copy of sha in arena a (TZR_ENOMEM if it fails). */
TZR_HIDDEN int shard_slice_set_sha(tzr_arena *a, shard_slice *sl, const uint8_t *sha);

typedef struct shard_entry {
    tzr_shard_tensor pub;    /* name/dtype/shape point into the fields below */
    char *name;              /* name, dtype, shape and slices live in the */
    char *dtype;             /* table's arena (a 100k-tensor manifest made */
    uint64_t *shape;         /* 500k mallocs); entries of one dtype share it */
    shard_slice *slices;     /* replicated: one per holder */
    size_t nslices, slice_cap;
    int in_order;            /* slices listed by offset (shard_table_validate) */
    int by_shard;            /* each slice's shard above the one before (same) */
    int shared;              /* a split whose slices other entries of its length
                                share: never written, its slices' local and
                                header_sha are in the table's side arrays */
} shard_entry;

/* Shard k's view of the shared entries: the index of entry i's slice in
 * k's reader, and its header digest (NULL: none). Made when k opens. */
typedef struct shard_side {
    size_t *local;
    const uint8_t **sha;
} shard_side;

#define SHARD_SPLIT_CACHE 64

typedef struct shard_table {
    int nshards;
    char **files;            /* base names, nshards of them (NULL: unknown) */
    uint64_t *sizes;
    shard_entry *t;
    size_t n, cap;
    tzr_arena arena;         /* the entries' fields */
    /* Version 2: each shard's header digests in one section of the hashes
     * file (NULL: none), read when the shard opens (formats/shards.md). */
    char *hashes_file;
    struct shard_hashes {
        uint64_t offset, count; /* count digests of 32 bytes at offset */
        uint8_t sha256[32];     /* of the section */
        int present;
        uint8_t *digests;       /* the section, read and checked when the
                                   shard opens; its slices point into it */
    } *hashes;
    uint64_t *slots;         /* name -> hash tag << 32 | entry index + 1
                                (0: empty), linear probing, built by the
                                first find: a linear find made merging and
                                writing 100k tensors quadratic */
    size_t nslots;
    /* Shared split slices, one array per cut length (a 100k-tensor set cut
     * 32 ways wrote 3.2M slices at every open; MoE tensors repeat a few
     * shapes), and per shard the state of the entries using them. */
    struct { uint64_t len; shard_slice *sl; } split_cache[SHARD_SPLIT_CACHE];
    size_t nshared;
    shard_side *side;        /* nshards of them once the set opens, if nshared */
    size_t side_n;           /* entries each side array holds (tb->n then) */
} shard_table;

TZR_HIDDEN void shard_table_free(shard_table *tb);
/* Append a copy of the entry fields; returns the new entry or NULL (ENOMEM
 * set). */
TZR_HIDDEN shard_entry *shard_table_add(shard_table *tb, const char *name, size_t name_len, const char *dtype,
                                        size_t dtype_len, uint32_t ndim, const uint64_t *shape, int dim);
TZR_HIDDEN int shard_entry_add_slice(shard_table *tb, shard_entry *e, int shard, uint64_t offset, uint64_t length);
/* Version 2's "split": D: dim D cut over all tb->nshards shards as
 * tzr_shard_chunk cuts it, part p in shard p. shard_entry_is_split says
 * whether e's slices are exactly that. With share, e uses the slices of
 * an earlier entry of its length (e->shared): only for a table that is
 * read and loaded, never given digests of its own. */
TZR_HIDDEN int shard_entry_split(shard_table *tb, shard_entry *e, int share);
/* Shard sl->shard's tensor index and header digest for entry i's slice
 * sl, wherever the entry keeps them. */
static inline size_t *shard_slice_local(shard_table *tb, size_t i, shard_slice *sl) {
    return tb->t[i].shared ? &tb->side[sl->shard].local[i] : &sl->local;
}
static inline const uint8_t **shard_slice_sha(shard_table *tb, size_t i, shard_slice *sl) {
    return tb->t[i].shared ? &tb->side[sl->shard].sha[i] : &sl->header_sha;
}
/* The same, to read: the index only once shard sl->shard is open; the
 * digest NULL where that shard has none (or has not opened). */
static inline size_t shard_slice_local_of(const shard_table *tb, size_t i, const shard_slice *sl) {
    return tb->t[i].shared ? tb->side[sl->shard].local[i] : sl->local;
}
static inline const uint8_t *shard_slice_sha_of(const shard_table *tb, size_t i, const shard_slice *sl) {
    if (!tb->t[i].shared) return sl->header_sha;
    return tb->side[sl->shard].sha ? tb->side[sl->shard].sha[i] : NULL;
}
/* The side arrays of every shard (tb->side), for a table with shared
 * entries, before any shard opens; shard k's arrays come with
 * shard_side_make. */
TZR_HIDDEN int shard_table_sides(shard_table *tb);
TZR_HIDDEN int shard_side_make(shard_table *tb, int k);
TZR_HIDDEN int shard_entry_is_split(const shard_entry *e, int nshards);
/* 0 and *idx, TZR_ENOTFOUND, or TZR_ENOMEM (the first call builds the
 * name index, which later adds keep up to date). */
TZR_HIDDEN int shard_table_find(shard_table *tb, const char *name, size_t name_len, size_t *idx);
/* Room for n entries. */
TZR_HIDDEN int shard_table_reserve(shard_table *tb, size_t n);
/* The name index built (if it was not) with room for n entries, so that
 * adding that many never rehashes it. */
TZR_HIDDEN int shard_table_index_reserve(shard_table *tb, size_t n);
/* shard_table_add for a name (of hash h) not in the table yet: 0 and
 * *out, TZR_EDUP (no message set) with *other the entry holding it, or
 * TZR_ENOMEM. One lookup where a find and an add took two. */
TZR_HIDDEN int shard_table_add_new(shard_table *tb, const char *name, size_t name_len, uint64_t h, const char *dtype,
                                   size_t dtype_len, uint32_t ndim, const uint64_t *shape, int dim, shard_entry **out,
                                   size_t *other);
/* Lookups in a 100k-name index miss the cache about once each: callers
 * going through many names hash a few ahead (tzr_name_hash, names.h) and
 * prefetch their slots, then add or find by the hash. */
TZR_HIDDEN void shard_table_prefetch(const shard_table *tb, uint64_t h);
TZR_HIDDEN int shard_table_find_hashed(shard_table *tb, const char *name, size_t name_len, uint64_t h, size_t *idx);
/* Take back the entry shard_table_add just made. */
TZR_HIDDEN void shard_table_drop_last(shard_table *tb);
/* Every slice list tiles its tensor exactly; dtypes parse; shards in range. */
TZR_HIDDEN int shard_table_validate(shard_table *tb, const char *what);
/* How shard_entry_text writes an entry: as version 1 wrote it (form NULL
 * or zeroed: what JSON_COMPACT | JSON_ENSURE_ASCII makes of
 * shard_entry_json's tree), or with "split": D for slices cut evenly
 * over split_over shards and without the header digests of shards whose
 * digests_elsewhere[shard] is set (they are in the hashes file). */
typedef struct shard_text_form {
    int split_over;
    const unsigned char *digests_elsewhere;
} shard_text_form;
/* A manifest entry as JSON text appended to b. dtype_text and *dtype_of
 * (zeroed at first) carry the previous entry's dtype text. 0; -1 out of
 * memory; 1 the name or dtype has no JSON form. */
struct tzr_text;
TZR_HIDDEN int shard_entry_text(struct tzr_text *b, const shard_entry *e, const shard_text_form *form,
                                struct tzr_text *dtype_text, const shard_entry **dtype_of);
TZR_HIDDEN struct json_t *shard_entry_json(const shard_entry *e);
/* Local shape of slice sl of e into out (ndim entries). */
TZR_HIDDEN void shard_local_shape(const shard_entry *e, const shard_slice *sl, uint64_t *out);

/* JSON (jansson stays inside shard_manifest*.c). kind: "manifest" or the
 * sidecar of shard `shard`; written as tzr_output_open_file_flags(flags). */
TZR_HIDDEN int shard_json_write(const shard_table *tb, int sidecar_shard, const char *path, unsigned flags);
/* tzr_shard_manifest_build with the manifest's output flags
 * (TZR_OUTPUT_NOREPLACE: a manifest another writer published is kept). */
TZR_HIDDEN int shard_manifest_write(const char *prefix, int nshards, unsigned flags);
TZR_HIDDEN int shard_json_read(const char *path, const struct tzr_http_options *http, shard_table *tb,
                               int *sidecar_shard);
/* The manifest text's entries of the usual shape straight into tb, the
 * other top-level members as a jansson object in *root (its "tensors" an
 * empty array): 0, TZR_ENOMEM, or SHARD_RETRY for anything else (tb then
 * holds what was added, to be freed, and the caller parses the whole
 * text with jansson). shard_manifest_fast.c. */
#define SHARD_RETRY 1
/* The scan reads an entry list of at least this many bytes in two halves
 * on two threads when there is a second core; 0: always (for tests). */
TZR_HIDDEN extern size_t shard_scan_split_min;
struct json_t;
TZR_HIDDEN int shard_manifest_scan(const char *text, size_t len, shard_table *tb, struct json_t **root);

/* A Hugging Face model.safetensors.index.json: its weight_map, tensor
 * name -> file (a plain name beside the index). shard_hf_index.c. */
typedef struct shard_hf_map {
    const char **names;   /* n tensor names, in the index's order */
    uint32_t *file;       /* each one's file: an index into files */
    const char **files;   /* the nfiles files named, sorted, each once */
    size_t n, nfiles;
    char *text;           /* what the strings point into (the scan's), */
    struct json_t *root;  /* or jansson's tree */
} shard_hf_map;
TZR_HIDDEN int shard_hf_index_read(const char *path, const struct tzr_http_options *http, shard_hf_map *m);
/* The same from the document's text (len bytes, from tzr_alloc_big; m
 * owns it from here): scan 0 reads it by jansson's tree alone. */
TZR_HIDDEN int shard_hf_index_parse(const char *path, char *text, size_t len, int scan, shard_hf_map *m);
TZR_HIDDEN void shard_hf_map_free(shard_hf_map *m);
/* The whole text of a JSON document at path, a local file or an
 * http(s)/s3 URL, in huge pages (free with free()). */
TZR_HIDDEN int shard_json_bytes(const char *path, const struct tzr_http_options *http, char **out, size_t *len);
/* 1 if path is a URL naming a prefix ("s3://b/model/", "https://h/m/"):
 * a directory of a Hugging Face checkpoint. */
TZR_HIDDEN int shard_url_dir(const char *path);
/* one(s, k, ctx) for every shard k (where need[k], need may be NULL), on
 * one thread each up to the core count. Each call must write only what
 * belongs to its shard. The lowest failing shard's code, with the message
 * its thread left (what a one-by-one pass would report). shard_open.c. */
TZR_HIDDEN int shard_each(tzr_shard_set *s, int (*one)(tzr_shard_set *s, int k, void *ctx), void *ctx,
                          const unsigned char *need);
/* Open a Hugging Face checkpoint as a set (shard_hf.c): a directory (its
 * index, else its *.safetensors files), an index, or a list of files. */
TZR_HIDDEN int shard_open_hf(tzr_shard_set *s, const char *path, const char *const *files, size_t nfiles);

/* Where file `name` listed by the manifest or index at `manifest` lives:
 * beside it (same directory or URL prefix). */
TZR_HIDDEN int shard_location(const char *manifest, const char *name, char *buf, size_t cap);

/* Rank sets named by a %d / %0Nd field (shard_ranks.c). */
TZR_HIDDEN int shard_rank_field(const char *path, size_t *at, size_t *end);
TZR_HIDDEN int shard_open_ranks(tzr_shard_set *s, const char *pattern, const char *rules);

/* Split rules. */
typedef struct shard_rule {
    char *glob;
    int dim; /* TZR_SHARD_REPLICATED or >= 0 */
} shard_rule;
typedef struct shard_rules {
    shard_rule *r;
    size_t n;
} shard_rules;
TZR_HIDDEN int shard_rules_parse(const char *text, shard_rules *out);
TZR_HIDDEN void shard_rules_free(shard_rules *r);
/* The rule's dim for this tensor: 1 and *dim set if a rule matched
 * (replicate where the tensor lacks that dimension), 0 if none did. */
TZR_HIDDEN int shard_rules_match(const shard_rules *r, const char *name, size_t name_len, uint32_t ndim, int *dim);
/* The same for cutting a checkpoint (strict): a matching rule naming a
 * dimension the tensor lacks is TZR_EINVAL, naming the rule and tensor. */
TZR_HIDDEN int shard_rules_pick(const shard_rules *r, const char *name, size_t name_len, uint32_t ndim, int *dim);

/* A source over one slice of a tensor in base, cut along a dimension
 * other than the first: `outer` runs of `run` bytes, the first at input
 * offset `first`, one every `stride` bytes. base must outlive it. */
TZR_HIDDEN int shard_slice_source_open(tzr_source **out, tzr_source *base, uint64_t first, uint64_t outer,
                                       uint64_t run, uint64_t stride);

/* The set handle. A manifest set without a key or network settings to
 * keep opens its shards on first use (shard_ready): a rank reading one
 * shard of eight then reads one index, not eight. */
typedef struct shard_lazy {
    pthread_mutex_t *mu;        /* one per shard: opens of several run at once */
    atomic_uchar *state;        /* SHARD_UNOPENED, SHARD_READY, SHARD_FAILED */
    tzr_error_state **err;      /* a kept failure (not a transient one), reported by every use */
} shard_lazy;
enum { SHARD_UNOPENED, SHARD_READY, SHARD_FAILED };

struct tzr_shard_set {
    shard_table tb;
    tzr_reader **readers;    /* one per shard; NULL until opened (lazy sets) */
    shard_lazy *lazy;        /* NULL: every reader was opened by tzr_shard_open */
    int verify;
    tzr_crypt_params crypt;  /* during tzr_shard_open only: the readers copy it */
    const struct tzr_http_options *http; /* the caller's, during tzr_shard_open only */
    char *path;
};

/* Shard k's reader, opened and checked against the manifest if not yet;
 * NULL with the error set (the same error at every call) if it cannot be. */
TZR_HIDDEN tzr_reader *shard_ready(tzr_shard_set *s, int k);
/* Shard k's reader if it is open, else NULL (opens nothing). */
TZR_HIDDEN tzr_reader *shard_if_open(const tzr_shard_set *s, int k);
/* Every shard with need[k] set ready, opened side by side: 0, or the
 * error of the lowest shard that failed. */
TZR_HIDDEN int shard_ready_all(tzr_shard_set *s, const unsigned char *need);

/* The pieces rank `rank` of `nranks` gets (shapes, nbytes, names copied
 * so the result outlives the set), no memory yet: each piece's data holds
 * its offset in a block of *total bytes (pieces 64-byte aligned). */
TZR_HIDDEN int shard_rank_layout(tzr_shard_set *s, int rank, int nranks, const char *rules, tzr_shard_result **out,
                                 uint64_t *total);
#endif
