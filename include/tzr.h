/* libtzr: read and write CoreWeave tensorizer `.tensors` checkpoints.
 *
 * Conventions
 *  - Every function that can fail returns int: 0 on success or a negative
 *    TZR_E* code. Codes are never renumbered.
 *  - On failure the calling thread's message (tzr_last_error()) says what
 *    went wrong and where: tensor name and byte offset where known, and the
 *    lower cause (errno text, HTTP status, libsodium failure).
 *  - The library never prints, never aborts on bad input, never exits.
 *  - Handles are opaque; every *_free(NULL) is a no-op.
 *  - Option structs start with `struct_size`; initialise them with the
 *    matching *_INIT macro so later versions can add fields. Every entry
 *    point reads at most struct_size bytes (a struct from an older header
 *    keeps the defaults for fields it lacks), takes NULL as the defaults,
 *    and refuses a struct_size it does not know with TZR_EINVAL.
 *  - Callback tables (tzr_source, tzr_output, tzr_sink), tzr_tensor_desc and
 *    tzr_load_stats end their first layout with `struct_size`: fields
 *    added later come after it, and the library reads (or, for stats,
 *    writes) such a field only when the caller's struct_size covers it.
 *    0 means the first layout, so a struct made by zeroing it (as required)
 *    or by a positional initializer that stops early keeps working; tables
 *    the library makes set it. Nothing is added after it yet, so structs
 *    built before it existed still work unchanged.
 *  - Key material is given by pointer (`crypt_params` in the option
 *    structs); the `crypt` member embedded by value stays for older callers.
 *  - Freeing or aborting anything never changes the thread's last error.
 *  - This header includes only standard C headers.
 */
#ifndef TZR_H
#define TZR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TZR_API __attribute__((visibility("default")))
#else
#define TZR_API
#endif

#define TZR_VERSION_MAJOR 0
#define TZR_VERSION_MINOR 3
#define TZR_VERSION_PATCH 0
#define TZR_VERSION_NUMBER \
    (TZR_VERSION_MAJOR * 10000 + TZR_VERSION_MINOR * 100 + TZR_VERSION_PATCH)

/* Run-time version of the library (TZR_VERSION_NUMBER it was built with). */
TZR_API int tzr_version_number(void);
TZR_API const char *tzr_version_string(void);

/* ---------------------------------------------------------------- errors */
enum {
    TZR_OK = 0,
    TZR_EINVAL = -1,     /* bad argument from the caller */
    TZR_ENOMEM = -2,     /* allocation failed */
    TZR_EIO = -3,        /* the operating system refused a read/write */
    TZR_EFORMAT = -4,    /* malformed file: bad magic, lengths, offsets */
    TZR_EVERSION = -5,   /* unsupported data version or feature flags */
    TZR_EHASH = -6,      /* CRC32 or SHA-256 mismatch */
    TZR_ECRYPT = -7,     /* wrong/missing key, MAC failure, bad crypt info */
    TZR_ENOTFOUND = -8,  /* no tensor (or object) with that name */
    TZR_ELIMIT = -9,     /* a size limit was hit: index full, caps, overflow */
    TZR_EDUP = -10,      /* duplicate tensor name */
    TZR_ETRUNC = -11,    /* the source ended before the expected bytes */
    TZR_ENODEV = -12,    /* no CUDA runtime or device */
    TZR_ECANCELED = -13, /* stopped by the caller or by another error */
    TZR_ENOTSUP = -14,   /* feature not built in or not supported */
    TZR_ENET = -15,      /* network failure (connect, reset, timeout) */
    TZR_EHTTP = -16,     /* HTTP error status (403, 404, 5xx after retries) */
    TZR_ECHANGED = -17,  /* the remote object changed during the load */
    TZR_ECOMM = -18,     /* a peer rank failed or communication broke */
    TZR_EDEVICE = -19,   /* a CUDA call failed */
};

/* Name of an error code ("TZR_EHASH: hash mismatch"). Never NULL. */
TZR_API const char *tzr_strerror(int code);
/* Message of the last failure in this thread ("" if none). Valid until the
 * next libtzr call in this thread. */
TZR_API const char *tzr_last_error(void);
/* Code of the last failure in this thread (0 if none). */
TZR_API int tzr_last_error_code(void);
/* Where the last failure in this thread happened, when it concerns one
 * tensor: its name as the message shows it (printable, escaped; NULL when
 * the failure is not tied to a tensor), and the byte offset in the file
 * (TZR_NO_OFFSET when unknown). Valid until the next libtzr call. */
#define TZR_NO_OFFSET UINT64_MAX
TZR_API const char *tzr_last_error_tensor(void);
TZR_API uint64_t tzr_last_error_offset(void);
/* Finer cause of the last failure beyond its code (TZR_CAUSE_NONE if none):
 * TZR_CAUSE_KEY: TZR_ECRYPT because the key or password is missing or
 * wrong, so every encrypted tensor would fail the same way. */
enum { TZR_CAUSE_NONE = 0, TZR_CAUSE_KEY = 1 };
TZR_API int tzr_last_error_cause(void);
/* For custom sources, outputs and sinks: record code and message as this
 * thread's last error and return code. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
TZR_API int tzr_set_error(int code, const char *fmt, ...);

/* ---------------------------------------------------------------- dtypes */
typedef enum tzr_dtype {
    TZR_DTYPE_UNKNOWN = 0, /* a dtype string this library does not know */
    TZR_DTYPE_BOOL,
    TZR_DTYPE_U8, TZR_DTYPE_I8,
    TZR_DTYPE_U16, TZR_DTYPE_I16,
    TZR_DTYPE_U32, TZR_DTYPE_I32,
    TZR_DTYPE_U64, TZR_DTYPE_I64,
    TZR_DTYPE_F16, TZR_DTYPE_BF16, TZR_DTYPE_F32, TZR_DTYPE_F64,
    TZR_DTYPE_C32, TZR_DTYPE_C64, TZR_DTYPE_C128,
    TZR_DTYPE_F8_E4M3FN, TZR_DTYPE_F8_E5M2,
    TZR_DTYPE_F8_E4M3FNUZ, TZR_DTYPE_F8_E5M2FNUZ, TZR_DTYPE_F8_E8M0FNU,
    TZR_DTYPE_BITS8, TZR_DTYPE_BITS16,
    TZR_DTYPE_COUNT
} tzr_dtype;

/* Parse a tensorizer dtype string (numpy "<f4", or opaque
 * "<V2\0torch.bfloat16"; len bytes, may contain one NUL). Fills the enum,
 * the element size in bytes and whether it is the opaque form. Unknown but
 * well-formed strings give TZR_DTYPE_UNKNOWN with the numpy item size.
 * Returns TZR_EFORMAT for malformed strings. */
TZR_API int tzr_dtype_parse(const char *str, size_t len, tzr_dtype *dtype,
                            uint32_t *itemsize, int *opaque);
/* The dtype string tensorizer writes for this dtype; *len gets its length
 * (opaque strings contain a NUL). NULL for TZR_DTYPE_UNKNOWN. */
TZR_API const char *tzr_dtype_string(tzr_dtype dtype, size_t *len);
/* Short name ("bf16", "f32", ...). */
TZR_API const char *tzr_dtype_name(tzr_dtype dtype);
TZR_API uint32_t tzr_dtype_size(tzr_dtype dtype);

/* ---------------------------------------------------------------- tensors */
typedef enum tzr_tensor_type {
    TZR_PARAM = 0,
    TZR_BUFFER = 1,
    TZR_STATE_DICT = 2,
} tzr_tensor_type;

#define TZR_MAX_DIMS 255

/* What the index (and, once read, the header) says about one tensor. All
 * pointers stay valid while the reader lives. */
typedef struct tzr_tensor_info {
    const char *name;      /* raw name bytes as stored, NUL-terminated copy */
    size_t name_len;
    int structured;        /* name is 0x1E + JSON array (validated) */
    tzr_tensor_type type;
    int module_idx;        /* from the header; -1 until the header was read */
    const char *dtype_str; /* raw dtype bytes (may hold a NUL), NUL-terminated */
    size_t dtype_len;
    tzr_dtype dtype;
    uint32_t itemsize;
    int opaque;            /* opaque "<Vn\0torch.x" form */
    uint32_t ndim;
    const uint64_t *shape;
    uint64_t numel;
    uint64_t nbytes;       /* bytes a loaded tensor occupies: itemsize*numel */
    uint64_t header_offset;
    uint64_t data_offset;
    uint64_t data_length;  /* bytes stored in the file (0 for meta) */
    int meta;              /* meta tensor: no data, loads as zeros */
    int encrypted;         /* data is encrypted (known once header read) */
    /* Compressed tensors (libtzr extension, see tzr_writer_options). */
    uint64_t stored_length;       /* = data_length: bytes stored in the file */
    uint64_t uncompressed_length; /* bytes the stored data expands to: nbytes
                                     (0 for meta) */
    int compression;              /* TZR_COMPRESSION_*; -1 in a compressed
                                     file until the header was read */
    uint32_t byte_planes;         /* zstd: 1, or 2/4 with the byte-plane split */
    uint64_t frame_size;          /* zstd: uncompressed bytes per frame */
    uint64_t frames;              /* zstd: number of frames */
} tzr_tensor_info;

enum {
    TZR_COMPRESSION_NONE = 0,
    TZR_COMPRESSION_ZSTD = 1,
};
/* The name of a compression id as tools print it: "none" for
 * TZR_COMPRESSION_NONE, the codec's name ("zstd") for one this build
 * knows, NULL for any other id (including -1, not yet known). Since 0.3. */
TZR_API const char *tzr_compression_name(int id);

/* ---------------------------------------------------------------- sources */
/* One buffer of a vectored read. */
typedef struct tzr_iovec {
    void *base;
    size_t len;
} tzr_iovec;

/* A positional byte source. Implementations zero the whole struct before
 * filling it in (`tzr_source s = {0}` or calloc), so fields added later
 * start off, and set struct_size (see the conventions above).
 * read_at must read exactly len bytes at offset
 * off into buf and be safe to call from several threads at once on disjoint
 * or overlapping ranges. It returns 0, TZR_ETRUNC when the source ends
 * first, or another TZR_E* code with the thread's message set. */
typedef struct tzr_source tzr_source;
struct tzr_source {
    int (*read_at)(tzr_source *src, void *buf, size_t len, uint64_t off);
    void (*destroy)(tzr_source *src); /* frees src itself */
    uint64_t size;          /* total bytes */
    const char *name;       /* path or URL for messages (no secrets) */
    size_t preferred_chunk; /* good read size for the pipeline (0: default) */
    int preferred_inflight; /* good number of reads in flight (0: default) */
    /* Optional: 1 if [off, off+len) is already in memory (page cache). */
    int (*is_cached)(tzr_source *src, uint64_t off, uint64_t len);
    /* Optional: read around the page cache (O_DIRECT) from now on where a
     * request allows it: the part of [off, off+len) whose file offsets and
     * buffer addresses are both `direct_align`-aligned; the rest is read
     * normally. Returns 0, or TZR_ENOTSUP where the file system refuses. */
    int (*set_direct)(tzr_source *src, int on);
    size_t direct_align;    /* alignment O_DIRECT needs (0: no O_DIRECT) */
    /* Optional: read the sum of the iov lengths at off, scattered into the
     * buffers in order (preadv). Lets many small tensors land straight in
     * their destinations with one call. Same return codes as read_at. */
    int (*readv_at)(tzr_source *src, const tzr_iovec *iov, int iovcnt, uint64_t off);
    void *ctx;              /* implementation data */
    /* Each read costs a request (a round trip, server CPU): the loader then
     * packs tensors into as few reads of preferred_chunk bytes as it can,
     * copying from staging rather than issuing one read per tensor. */
    int pack_reads;
    size_t struct_size;     /* sizeof(tzr_source); 0: the fields above only */
    /* Fields added later go here. */
};

enum {
    TZR_SOURCE_DIRECT = 1,  /* start with O_DIRECT reads (see set_direct) */
};
/* Open a local file. flags: TZR_SOURCE_*. */
TZR_API int tzr_source_open_file(tzr_source **out, const char *path, unsigned flags);
/* A caller's open descriptor of a regular file (a binding's file object):
 * the source reads a duplicate with pread from byte 0, so fd's own offset
 * is untouched and fd may be closed at once. name is for messages. */
TZR_API int tzr_source_open_fd(tzr_source **out, int fd, const char *name, unsigned flags);
/* Wrap memory the caller keeps alive while the source lives. */
TZR_API int tzr_source_open_memory(tzr_source **out, const void *data, size_t len,
                                   const char *name);
TZR_API void tzr_source_free(tzr_source *src);

/* ---------------------------------------------------------------- paths */
/* What a path names, by its scheme (matched case-insensitively); anything
 * without a known scheme is a local path. Every path-taking open
 * dispatches on this, so callers ask it instead of testing prefixes.
 * Returns a TZR_PATH_* value, or TZR_EINVAL for NULL. */
enum { TZR_PATH_FILE = 0, TZR_PATH_HTTP = 1, TZR_PATH_HTTPS = 2, TZR_PATH_S3 = 3 };
TZR_API int tzr_path_kind(const char *path);
/* Per-call network settings for URL paths, defined in tzr_http.h. */
struct tzr_http_options;

/* ---------------------------------------------------------------- keys */
#define TZR_KEY_BYTES 32
#define TZR_SALT_BYTES 16

/* Key material for encrypted files: a raw 32-byte key, or a password that
 * Argon2id turns into a key (parameters from the file when reading). */
typedef struct tzr_crypt_params {
    const uint8_t *key;     /* 32 bytes, or NULL */
    const char *password;   /* or NULL */
    size_t password_len;
    /* Writing with a password only (0 = tensorizer's defaults: MODERATE). */
    uint64_t opslimit;
    uint64_t memlimit;
    const uint8_t *salt;    /* 16 bytes, or NULL for random */
} tzr_crypt_params;

/* The key a writer derives from a password and salt (Argon2id13; limits 0 =
 * tensorizer's MODERATE defaults, as tzr_crypt_params), for callers that
 * show or keep the derived key, as tensorizer's EncryptionParams.key does. */
TZR_API int tzr_key_derive(uint8_t key[TZR_KEY_BYTES], const char *password, size_t password_len,
                           const uint8_t salt[TZR_SALT_BYTES], uint64_t opslimit, uint64_t memlimit);

/* ---------------------------------------------------------------- reader */
typedef struct tzr_reader tzr_reader;

typedef struct tzr_reader_options {
    size_t struct_size;
    tzr_crypt_params crypt;   /* needed for encrypted files */
    int verify;               /* check CRC32 and SHA-256 on every read */
    int read_headers;         /* read and check every tensor header at open
                                 (fills module_idx and encrypted); costs a
                                 pass over small-tensor files. Default 0:
                                 headers are read when a tensor is. */
    /* Caps on untrusted input (0 = default). */
    uint64_t max_tensors;     /* default 1<<24 */
    uint64_t max_index_bytes; /* default 1 GiB */
    /* Added later: key material by pointer; set, it is used instead of
     * `crypt` (which then stays zero). */
    const tzr_crypt_params *crypt_params;
    /* Added later. Network settings (tzr_http.h) for a URL path, used for
     * this open only; NULL: the defaults (AWS environment and files). */
    const struct tzr_http_options *http;
} tzr_reader_options;

#define TZR_READER_OPTIONS_INIT \
    { sizeof(tzr_reader_options), {0, 0, 0, 0, 0, 0}, 0, 0, 0, 0, 0, 0 }

/* Open a path: a local file, or an http://, https:// or s3:// URL
 * (tzr_path_kind) opened with opt->http. */
TZR_API int tzr_reader_open(tzr_reader **out, const char *path,
                            const tzr_reader_options *opt);
/* Open over a source. The reader takes ownership of src in every case
 * (it is freed on failure too). */
TZR_API int tzr_reader_open_source(tzr_reader **out, tzr_source *src,
                                   const tzr_reader_options *opt);
TZR_API void tzr_reader_free(tzr_reader *r);

TZR_API uint32_t tzr_reader_data_version(const tzr_reader *r);
/* What the reader opened: tzr_reader_open takes both formats, told apart
 * by their bytes. A safetensors reader has data version 0, no tensor
 * headers and no hashes (verifying one is TZR_ENOTSUP). */
enum { TZR_FORMAT_UNKNOWN = 0, TZR_FORMAT_TENSORIZER = 1, TZR_FORMAT_SAFETENSORS = 2 };
TZR_API int tzr_reader_format(const tzr_reader *r);
TZR_API int tzr_reader_encrypted(const tzr_reader *r); /* file carries crypt info */
TZR_API int tzr_reader_compressed(const tzr_reader *r); /* file carries compression blocks */
TZR_API size_t tzr_reader_count(const tzr_reader *r);
TZR_API const tzr_tensor_info *tzr_reader_tensor(const tzr_reader *r, size_t i);
TZR_API tzr_source *tzr_reader_source(const tzr_reader *r);
/* Index of the tensor with exactly these name bytes, or TZR_ENOTFOUND. */
TZR_API int tzr_reader_find(const tzr_reader *r, const char *name, size_t name_len,
                            size_t *index);
/* Read tensor i into dst (dst_len >= info->nbytes): reads and checks the
 * header, decrypts, verifies when asked, zero-fills meta tensors. On
 * failure dst holds unspecified bytes. Thread-safe for distinct dst. */
TZR_API int tzr_reader_read(tzr_reader *r, size_t i, void *dst, size_t dst_len);
/* Verify tensor i's hashes (decrypting when the file is encrypted). */
TZR_API int tzr_reader_verify(tzr_reader *r, size_t i);

/* ---------------------------------------------------------------- writer */
/* Where a writer's bytes go. pwrite_at may be called with any offsets;
 * finish makes the result visible atomically, abort discards it. */
typedef struct tzr_output tzr_output;
struct tzr_output {
    int (*pwrite_at)(tzr_output *out, const void *buf, size_t len, uint64_t off);
    int (*finish)(tzr_output *out);
    void (*abort)(tzr_output *out);
    void (*destroy)(tzr_output *out); /* frees out itself */
    const char *name;
    void *ctx;
    size_t struct_size;       /* sizeof(tzr_output); 0: the fields above only */
};

/* Atomic local file: a temporary file beside path, fsync, rename on finish;
 * removed on abort. An existing file at path is untouched until finish.
 * An existing path must be a regular file (a device, FIFO, socket or
 * directory is refused at once); a symbolic link is written through: the
 * file it resolves to is replaced, the link stays. The temporary name
 * ".NAME.HASH.PID.XXXXXX.tmp" (NAME cut to 200 bytes) carries the pid; at
 * open, such files of the same target whose process is gone are removed. */
TZR_API int tzr_output_open_file(tzr_output **out, const char *path);
/* The same, with TZR_OUTPUT_DIRECT: whole blocks (4 KiB, or the page or
 * file-system block where larger) are written with
 * O_DIRECT where the file system allows it (else, silently, through the
 * page cache), so writing a checkpoint larger than memory neither fills
 * the page cache nor evicts what else runs there; the few bytes at the
 * unaligned edges of each write go through the cache. */
/* TZR_OUTPUT_NOREPLACE: finish publishes only if nothing is at path then
 * (renameat2 RENAME_NOREPLACE, else link + unlink): a file created there
 * while this one was written (another writer) is never replaced; finish
 * fails TZR_EIO "exists" and removes the temporary file. */
enum { TZR_OUTPUT_DIRECT = 1, TZR_OUTPUT_NOREPLACE = 2 };
TZR_API int tzr_output_open_file_flags(tzr_output **out, const char *path, unsigned flags);
/* A caller's descriptor, open for writing, of a regular file: written in
 * place with pwrite from byte 0 (not atomic: the file is the caller's).
 * fd's own offset is untouched and fd may be closed at once (a duplicate
 * is kept). finish flushes to the device (fdatasync); abort truncates the
 * file back to its length at open, so a failed write leaves nothing that
 * reads as a checkpoint. name is for messages. */
TZR_API int tzr_output_open_fd(tzr_output **out, int fd, const char *name);

typedef struct tzr_writer tzr_writer;

typedef struct tzr_writer_options {
    size_t struct_size;
    tzr_crypt_params crypt;   /* key or password: encrypt every tensor */
    uint64_t metadata_size;   /* index reservation; 0 = 262144 (tensorizer) */
    /* Compression (libtzr extension): TZR_COMPRESSION_ZSTD stores each
     * tensor as independent zstd frames (tensors that do not shrink stay
     * raw). The file gets feature flag bit 1 and data version 4, so
     * tensorizer refuses it; hashes still cover the uncompressed bytes. */
    int compression;          /* TZR_COMPRESSION_NONE (0) or _ZSTD */
    int compression_level;    /* zstd level; 0 = 1 (on byte planes, level 1 is
                                 both smaller and faster to decode than 3) */
    uint64_t frame_size;      /* uncompressed bytes per frame; 0 = 4 MiB */
    int byte_planes;          /* TZR_PLANES_AUTO (0): split 2- and 4-byte
                                 dtypes into byte planes; TZR_PLANES_OFF */
    int threads;              /* compression threads, and tzr_writer_add_from's
                                 workers; 0 = CPUs (at most 16) */
    int direct;               /* local paths: TZR_OUTPUT_DIRECT (O_DIRECT where
                                 the file system allows; the page cache keeps
                                 almost none of the file) */
    int no_replace;           /* added later. local paths: TZR_OUTPUT_NOREPLACE
                                 (never replace a file at the path) */
    const tzr_crypt_params *crypt_params; /* added later: used instead of
                                 `crypt` when set */
    const struct tzr_http_options *http; /* added later: an s3:// path's
                                 network settings (tzr_http.h); NULL: defaults */
} tzr_writer_options;

enum { TZR_PLANES_AUTO = 0, TZR_PLANES_OFF = 1 };

#define TZR_WRITER_OPTIONS_INIT \
    { sizeof(tzr_writer_options), {0, 0, 0, 0, 0, 0}, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/* One tensor to write. */
typedef struct tzr_tensor_desc {
    const char *name;         /* raw name bytes (plain UTF-8 or 0x1E+JSON) */
    size_t name_len;
    tzr_tensor_type type;
    uint16_t module_idx;
    const char *dtype_str;    /* raw dtype bytes; NULL: from dtype */
    size_t dtype_len;
    tzr_dtype dtype;
    uint32_t ndim;
    const uint64_t *shape;
    int meta;                 /* meta tensor: no data written */
    size_t struct_size;       /* sizeof(tzr_tensor_desc); 0: the fields above only */
} tzr_tensor_desc;

/* Open a writer on a local path (atomic) or an s3:// URL (multipart
 * upload, tzr_output_open_s3 with opt->http). */
TZR_API int tzr_writer_open(tzr_writer **out, const char *path,
                            const tzr_writer_options *opt);
/* Open on an output; the writer owns it from now on (freed on failure). */
TZR_API int tzr_writer_open_output(tzr_writer **out, tzr_output *output,
                                   const tzr_writer_options *opt);
/* Size the index for the tensors about to be added, before the first one:
 * their count, and the sums of their name lengths, dtype-string lengths
 * (tzr_dtype_string's for an enum dtype), dimension counts and data
 * bytes. The reservation becomes exactly what their index entries need
 * (formats/tensorizer.md 3; a compressed writer adds its frame directory),
 * or stays tensorizer's 262144 bytes when that suffices, so such files
 * keep tensorizer's bytes. Without it a writer keeps 262144 bytes (about
 * 4,500 small tensors) and a later add fails "index full" (TZR_ELIMIT).
 * A metadata_size given in the options is kept as given. TZR_EINVAL
 * after the first tensor; TZR_ELIMIT above 1 GiB. */
TZR_API int tzr_writer_reserve(tzr_writer *w, uint64_t tensors, uint64_t name_bytes, uint64_t dtype_bytes,
                               uint64_t dims, uint64_t data_bytes);
/* Append one tensor; data holds itemsize*numel bytes (ignored for meta). */
TZR_API int tzr_writer_add(tzr_writer *w, const tzr_tensor_desc *desc, const void *data);
/* Append one tensor whose bytes are read from src at [offset, offset +
 * nbytes). It returns once the record's place in the file is fixed (the
 * output is the same bytes tzr_writer_add would write); worker threads
 * then read the bytes in 8 MiB pieces, hash them, seal them when
 * encrypting and write them, several tensors at once, so a model of any
 * size is written with about 10 MiB per worker and no mapping of the
 * input. src must stay open until tzr_writer_close or _abort; a read or
 * write failure is returned by a later add or by close (naming the tensor
 * and offset). Compressed writers read each tensor whole first. */
TZR_API int tzr_writer_add_from(tzr_writer *w, const tzr_tensor_desc *desc, tzr_source *src, uint64_t offset);
/* tzr_writer_add without waiting: the writer's worker threads hash, seal
 * and write the tensor straight from data (no copy) while the caller goes
 * on, several tensors at once. data is borrowed: it must stay valid and
 * unchanged until tzr_writer_close or _abort returns. Same bytes as
 * tzr_writer_add; failures come back from a later add or from close. */
TZR_API int tzr_writer_add_borrowed(tzr_writer *w, const tzr_tensor_desc *desc, const void *data);
/* Finish the file (header, index, end marker), make it visible, free w.
 * On failure nothing is left at the target. */
TZR_API int tzr_writer_close(tzr_writer *w);
/* Discard everything written and free w. */
TZR_API void tzr_writer_abort(tzr_writer *w);

/* ---------------------------------------------------------------- names */
/* Build a structured name (0x1E + compact JSON array, exactly as tensorizer
 * writes it) from components: each either a UTF-8 string or an integer.
 * Returns a malloc'd buffer in *out (caller frees) and its length. */
typedef struct tzr_name_part {
    const char *str; /* NULL: use idx */
    uint64_t idx;
} tzr_name_part;
TZR_API int tzr_name_build(const tzr_name_part *parts, size_t n, char **out, size_t *out_len);

/* ------------------------------------------------- interrupted outputs */
/* Async-signal-safe, for a SIGINT/SIGTERM/SIGHUP handler that then exits:
 * unlinks the temporary file of every local output of this process not yet
 * committed (tzr_output_open_file, writers on local paths); their finish
 * then fails and leaves the target untouched. Returns how many it removed
 * (0: nothing was being written, or every output is already committing).
 * Temporary files left by a process that died anyway (SIGKILL) are removed
 * by the next output opened on the same target. */
TZR_API int tzr_output_remove_temporaries(void);

#ifdef __cplusplus
}
#endif
#endif
