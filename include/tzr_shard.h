/* libtzr sharded checkpoints: one plain `.tensors` file per rank plus a JSON
 * manifest describing how each global tensor is cut across the shards
 * (formats/shards.md), and loading any rank's slices of a sharded
 * checkpoint for any rank count (resharding on load). Only standard headers.
 *
 * Files for prefix "out/model" and 8 shards:
 *   out/model-rank-00000-of-00008.tensors ... out/model-rank-00007-of-00008.tensors
 *   out/model.tzr-index.json                  (the manifest)
 *   out/model-rank-0000N-of-00008.tzr-part.json (per-shard sidecars, merged
 *                                              into the manifest and removed)
 *
 * Split rules (for tzr_shard_split and for the target layout of a load):
 * comma-separated "glob=DIM" or "glob=replicate" entries, first match wins,
 * e.g. "*.weight=0,*embed*=1,*norm*=replicate". Globs are fnmatch patterns
 * over the name bytes (for structured names: the JSON array text after the
 * 0x1E marker). When cutting a checkpoint (tzr_shard_split), a rule that
 * matches a tensor lacking its dimension (a 0-d tensor and dim 0, say) is
 * an error; as a load's target layout it means replicate. Splits may be uneven: a dimension of length L cut into
 * P parts gives part p the range starting at p*(L/P) + min(p, L%P) with
 * L/P + (p < L%P) entries (the first L%P parts are one longer). */
#ifndef TZR_SHARD_H
#define TZR_SHARD_H

#include "tzr.h"
#include "tzr_load.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TZR_SHARD_REPLICATED (-1)
#define TZR_SHARD_MANIFEST_SUFFIX ".tzr-index.json"
#define TZR_SHARD_PART_SUFFIX ".tzr-part.json"
#define TZR_SHARD_HASHES_SUFFIX ".tzr-hashes" /* the shards' header digests (version 2) */
#define TZR_SHARD_MAX 99999

/* "<prefix>-rank-00003-of-00008<suffix>" into buf (suffix ".tensors",
 * TZR_SHARD_PART_SUFFIX, ...). TZR_ELIMIT when it does not fit. */
TZR_API int tzr_shard_file_name(char *buf, size_t cap, const char *prefix, int shard, int nshards,
                                const char *suffix);
/* Part p of a dimension of length len cut into parts (see above). */
TZR_API void tzr_shard_chunk(uint64_t len, int parts, int p, uint64_t *offset, uint64_t *length);

/* ------------------------------------------------------------- writing */
typedef struct tzr_shard_writer tzr_shard_writer;

typedef struct tzr_shard_writer_options {
    size_t struct_size;
    uint64_t metadata_size; /* index reservation of the shard file (0: default) */
    int no_hash;            /* do not record sha256 of replicated tensors */
    /* The shard file's writer options (key or password, compression);
     * NULL: defaults. metadata_size above wins when set. */
    const tzr_writer_options *file;
    /* Added later. A path with one %d / %0Nd field: shard k's file is
     * the pattern with k in it ("model-rank-%03d.tensors", as vLLM names
     * per-rank files) instead of PREFIX-rank-0000k-of-0000N.tensors. The
     * sidecar and the manifest still follow the prefix. */
    const char *file_pattern;
} tzr_shard_writer_options;
#define TZR_SHARD_WRITER_OPTIONS_INIT { sizeof(tzr_shard_writer_options), 0, 0, 0, 0 }

/* The pattern's %d / %0Nd field replaced by rank; TZR_EINVAL when the
 * pattern does not hold exactly one such field. */
TZR_API int tzr_shard_rank_path(char *buf, size_t cap, const char *pattern, int rank);

/* One tensor's slice held by this shard. */
typedef struct tzr_shard_tensor_desc {
    const char *name;         /* global name: raw bytes (plain or 0x1E+JSON) */
    size_t name_len;
    const char *dtype_str;    /* raw dtype bytes; NULL: from dtype */
    size_t dtype_len;
    tzr_dtype dtype;
    uint32_t ndim;
    const uint64_t *shape;    /* global shape */
    int dim;                  /* split dimension, or TZR_SHARD_REPLICATED */
    uint64_t offset, length;  /* range of `dim` held here (ignored if replicated) */
    const uint8_t *sha256;    /* optional: sha256 of the whole global tensor */
} tzr_shard_tensor_desc;

/* Open the writer of shard `rank` of `nranks` (an atomic file write). */
TZR_API int tzr_shard_writer_open(tzr_shard_writer **out, const char *prefix, int rank, int nranks,
                                  const tzr_shard_writer_options *opt);
/* Size the shard file's index for the tensors about to be added, before
 * the first: as tzr_writer_reserve (their count and the sums of their name
 * lengths, dtype-string lengths, dimension counts and this shard's data
 * bytes). Without it a shard keeps tensorizer's 262144 bytes (about 4,500
 * small tensors). Since 0.3. */
TZR_API int tzr_shard_writer_reserve(tzr_shard_writer *w, uint64_t tensors, uint64_t name_bytes,
                                     uint64_t dtype_bytes, uint64_t dims, uint64_t data_bytes);
/* Add a tensor; data is the local slice (global shape with `dim` replaced
 * by `length`), row-major. */
TZR_API int tzr_shard_writer_add(tzr_shard_writer *w, const tzr_shard_tensor_desc *d, const void *data);
/* The same with the slice's bytes read from src at offset, on the shard
 * file writer's threads (tzr_writer_add_from); src must stay open until
 * close or abort. No whole-tensor sha256 is recorded unless d gives one:
 * the slice's header SHA-256 in the manifest proves its bytes. */
TZR_API int tzr_shard_writer_add_from(tzr_shard_writer *w, const tzr_shard_tensor_desc *d, tzr_source *src,
                                      uint64_t offset);
/* Finish the shard file and write its sidecar; frees w. */
TZR_API int tzr_shard_writer_close(tzr_shard_writer *w);
TZR_API void tzr_shard_writer_abort(tzr_shard_writer *w);

/* What the split rules say for one tensor: 1 and *dim (a dimension or
 * TZR_SHARD_REPLICATED) when a rule matches, 0 when none does (the default
 * rule applies); TZR_EINVAL for malformed rules or a matching rule naming a
 * dimension the tensor lacks. Lets a tool check rules before writing. */
TZR_API int tzr_shard_rule_dim(const char *rules, const char *name, size_t name_len, uint32_t ndim, int *dim);

/* Merge the nshards sidecars of prefix into the manifest, checking that
 * every tensor's slices tile it exactly (no gap, no overlap) with the same
 * dtype and shape everywhere; removes the sidecars on success. Writes
 * format version 2: the shards' header digests go to
 * prefix TZR_SHARD_HASHES_SUFFIX, published just before the manifest (and
 * removed if the manifest is not). */
TZR_API int tzr_shard_manifest_build(const char *prefix, int nshards);

typedef struct tzr_shard_split_options {
    size_t struct_size;
    uint64_t min_split_bytes; /* default rule: split dim 0 only from this size (0: 1 MiB) */
    uint64_t metadata_size;   /* index reservation of each shard (0: default) */
    const tzr_writer_options *file; /* each shard file's writer options; NULL: defaults */
    const char *file_pattern; /* added later: shard file names (tzr_shard_writer_options) */
} tzr_shard_split_options;
#define TZR_SHARD_SPLIT_OPTIONS_INIT { sizeof(tzr_shard_split_options), 0, 0, 0, 0 }

/* Cut a whole checkpoint into nshards shards + manifest. Default rule:
 * split dim 0 when shape[0] % nshards == 0 and the tensor holds at least
 * min_split_bytes; otherwise replicate. rules (may be NULL) override.
 * Every tensor's sha256 is recorded. Meta tensors are written as zeros. */
TZR_API int tzr_shard_split(tzr_reader *in, const char *prefix, int nshards, const char *rules,
                            const tzr_shard_split_options *opt);

/* The same cut, tensor by tensor from anywhere (a writer for a whole
 * checkpoint that lands as shards, with no joined copy): open, add each
 * whole tensor (its bytes in memory; meta tensors may pass NULL and are
 * written as zeros), close writes every shard file and the manifest.
 * abort (and a failed add or close) leaves nothing. With the file options'
 * no_replace, the manifest is published as the shard files are: one that
 * another writer published meanwhile is kept, and close fails "exists". */
typedef struct tzr_shard_splitter tzr_shard_splitter;
TZR_API int tzr_shard_splitter_open(tzr_shard_splitter **out, const char *prefix, int nshards, const char *rules,
                                    const tzr_shard_split_options *opt);
TZR_API int tzr_shard_splitter_add(tzr_shard_splitter *s, const tzr_tensor_desc *d, const void *data);
/* The same with the tensor's bytes read from src at offset by the shard
 * writers' threads, slice by slice, with no copy of the whole tensor in
 * memory; src must stay open until close or abort. The manifest records
 * each slice's header SHA-256 (no whole-tensor sha256). */
TZR_API int tzr_shard_splitter_add_from(tzr_shard_splitter *s, const tzr_tensor_desc *d, tzr_source *src,
                                        uint64_t offset);
TZR_API int tzr_shard_splitter_close(tzr_shard_splitter *s);
TZR_API void tzr_shard_splitter_abort(tzr_shard_splitter *s);

/* ------------------------------------------------------------- loading */
typedef struct tzr_shard_set tzr_shard_set;

/* A global tensor of a sharded checkpoint. */
typedef struct tzr_shard_tensor {
    const char *name;       /* raw name bytes, NUL-terminated copy */
    size_t name_len;
    const char *dtype_str;  /* raw dtype bytes (may hold a NUL) */
    size_t dtype_len;
    tzr_dtype dtype;
    uint32_t itemsize;
    uint32_t ndim;
    const uint64_t *shape;  /* global shape */
    uint64_t nbytes;        /* bytes of the whole tensor */
    int dim;                /* split dimension, or TZR_SHARD_REPLICATED */
    int has_sha256;
    uint8_t sha256[32];
} tzr_shard_tensor;

typedef struct tzr_shard_open_options {
    size_t struct_size;
    int verify;             /* check shard hashes and manifest sha256 */
    tzr_crypt_params crypt; /* key or password of encrypted shard files */
    /* Added later. A rank set without a manifest (a path with a %d or
     * %0Nd field, as vLLM names its per-rank files): how each tensor was
     * cut, "glob=DIM,glob=replicate,..." (first match wins; no match:
     * replicated). NULL: TZR_SHARD_RULES_VLLM. */
    const char *rank_rules;
    const tzr_crypt_params *crypt_params; /* added later: used instead of
                                 `crypt` when set */
    /* Added later. Network settings (tzr_http.h) for URL manifests,
     * listings and shard files, this open only; NULL: the defaults. */
    const struct tzr_http_options *http;
} tzr_shard_open_options;
#define TZR_SHARD_OPEN_OPTIONS_INIT { sizeof(tzr_shard_open_options), 1, {0, 0, 0, 0, 0, 0}, 0, 0, 0 }

/* Tensor-parallel layers as vLLM (and Megatron) cut them: column-parallel
 * weights and biases (q/k/v, merged qkv, gate/up, merged gate_up, the
 * vocabulary embedding and lm_head) along dim 0, row-parallel weights
 * (o_proj, down_proj) along dim 1, everything else (norms, row-parallel
 * biases) replicated. Merged layers (qkv_proj, gate_up_proj) hold each
 * rank's parts back to back, so a set of them loads exactly onto its own
 * rank count; onto another count their rows are regrouped as one tensor. */
#define TZR_SHARD_RULES_VLLM                                                                             \
    "*.qkv_proj.*=0,*.q_proj.*=0,*.k_proj.*=0,*.v_proj.*=0,*.gate_up_proj.*=0,*.gate_proj.*=0,*.up_proj.*=0," \
    "*embed_tokens.*=0,*lm_head.*=0,*.o_proj.weight=1,*.down_proj.weight=1"


/* Open a manifest: parses it, checks the tiling, and checks that every
 * local shard file exists with the recorded size. Each shard file's index
 * is read, and checked to hold every listed slice with the expected dtype
 * and local shape, when a load, tzr_shard_reader or
 * tzr_shard_check_headers first needs that shard: a rank that reads one
 * shard of eight reads one index. A shard file that does not hold what
 * the manifest says fails every use with the same error; one that could
 * not be read (I/O, network, memory) is tried again at the next use. With
 * a key or password (`crypt`) or
 * network settings (`http`), which are only borrowed while opening, every
 * shard file (URLs too) is opened and checked here instead. A plain
 * `.tensors` path is accepted too and opened as one shard holding every
 * tensor replicated. */
TZR_API int tzr_shard_open(tzr_shard_set **out, const char *path, const tzr_shard_open_options *opt);
/* path may also be a Hugging Face checkpoint: a directory (its
 * model.safetensors.index.json, else every *.safetensors file in it,
 * sorted), or such an index (local or a URL; its files beside it). A URL
 * ending in '/' is a directory: its index, else (s3://) the .safetensors
 * objects directly under the prefix, else (http(s)://, which cannot be
 * listed) its model.safetensors. Each
 * file is one shard holding its tensors whole; with an index the weight
 * map must match the files exactly (an error names the tensor and both
 * files otherwise). tzr_shard_open_files opens a list of .safetensors or
 * .tensors files the same way (each tensor in exactly one file). */
/* A path with a %d or %0Nd field ("model-rank-%03d.tensors", vLLM's
 * per-rank files) opens ranks 0, 1, ... up to the first missing file as one
 * sharded set: every file holds every tensor under its global name with
 * its local shape, cut as opt->rank_rules say (the global shape is the sum
 * along the cut dim; replicated tensors must agree everywhere). */
TZR_API int tzr_shard_open_files(tzr_shard_set **out, const char *const *paths, size_t n,
                                 const tzr_shard_open_options *opt);
TZR_API void tzr_shard_close(tzr_shard_set *s);
TZR_API size_t tzr_shard_count(const tzr_shard_set *s);
TZR_API int tzr_shard_nshards(const tzr_shard_set *s);
TZR_API const tzr_shard_tensor *tzr_shard_tensor_at(const tzr_shard_set *s, size_t i);
/* Shard k's reader (valid while s lives), opened and checked first if no
 * load has needed it yet; NULL with the error set if it cannot be. Safe
 * from several threads. */
TZR_API tzr_reader *tzr_shard_reader(const tzr_shard_set *s, int k);
/* Every tensor header of shard k against the header SHA-256 the manifest
 * records for it (headers not yet read are read): TZR_EHASH naming the
 * shard, tensor and header offset on the first that differs (the shard
 * file is another one than the manifest lists). Sets without recorded
 * hashes pass. A --verify of the shard's hashes plus this proves the set. */
TZR_API int tzr_shard_check_headers(tzr_shard_set *s, int k);

/* What one rank holds of one global tensor after a load. */
typedef struct tzr_shard_piece {
    size_t tensor;          /* index in the set */
    const char *name;       /* owned by whatever holds the piece */
    size_t name_len;
    tzr_dtype dtype;
    int dim;                /* split dimension, or TZR_SHARD_REPLICATED (whole) */
    uint64_t offset, length;/* range of `dim` held (whole: 0 and 0) */
    uint32_t ndim;
    uint64_t *shape;        /* local shape */
    void *data;             /* row-major local bytes */
    uint64_t nbytes;
} tzr_shard_piece;

typedef struct tzr_shard_result {
    size_t count;
    tzr_shard_piece *pieces;
    uint64_t bytes;         /* bytes delivered */
    uint64_t bytes_read;    /* bytes read from shard files */
    void *arena;            /* private: one allocation holding every piece */
} tzr_shard_result;

/* The target layout for rank `rank` of `nranks`: every tensor keeps its
 * split dimension (cut into nranks parts, unevenly where needed; nranks 1
 * gives whole tensors) and replicated tensors stay whole, unless rules
 * (may be NULL) say otherwise. Reads only the byte ranges of the shards
 * that hold the needed slices; whole shard tensors are hash-checked and
 * whole global tensors are checked against the manifest sha256 when the
 * set was opened with verify. */
TZR_API int tzr_shard_load_rank(tzr_shard_set *s, int rank, int nranks, const char *rules,
                                tzr_shard_result **out);
/* The same load into any sink (host, caller memory, CUDA, ...): one
 * pipelined tzr_load per shard file, of exactly the byte ranges the rank
 * needs (whole shard tensors when the set verifies). The sink's tensor
 * index is the index in the set; begin_tensor gets the rank's piece (its
 * local shape and bytes), called for every tensor before any bytes move,
 * end_tensor for every tensor at the end. opt (may be NULL) gives ring,
 * chunk, threads, progress and cancel, and its filter picks tensors of the
 * set (called with the rank's piece); select and the per-tensor callbacks
 * are the loader's own. */
TZR_API int tzr_shard_load_rank_into(tzr_shard_set *s, int rank, int nranks, const char *rules, tzr_sink *sink,
                                     const tzr_load_options *opt, tzr_load_stats *stats);
/* The slice rank `rank` of `nranks` gets of tensor i (no I/O). */
TZR_API int tzr_shard_target(const tzr_shard_set *s, size_t i, int rank, int nranks, const char *rules,
                             int *dim, uint64_t *offset, uint64_t *length);
TZR_API void tzr_shard_result_free(tzr_shard_result *r);

#ifdef __cplusplus
}
#endif
#endif
