/* The .tensors byte layout: pure, bounds-checked parsing and emitting of the
 * file header, index entries and tensor headers. No I/O, threads or crypto
 * here; see formats/tensorizer.md for the layout. */
#ifndef TZR_FORMAT_H
#define TZR_FORMAT_H

#include "cursor.h"

#define TZR_MAGIC "|TZR|"
#define TZR_MAGIC_LEN 5

/* sniff.c: a file's kind from its first len bytes (of size in all):
 * TZR_FORMAT_TENSORIZER, _SAFETENSORS, _UNKNOWN, or one of these, which
 * no reader takes but a message should name. */
enum { TZR_FORMAT_EMPTY = 100, TZR_FORMAT_ZIP, TZR_FORMAT_PICKLE, TZR_FORMAT_GGUF, TZR_FORMAT_NUMPY, TZR_FORMAT_JSON,
       TZR_FORMAT_ST_CUT /* a safetensors file cut inside its header */ };
TZR_HIDDEN int tzr_sniff_format(const uint8_t *head, size_t len, uint64_t size);
/* What kind is, for messages ("this is a zip archive ..."). */
TZR_HIDDEN const char *tzr_format_what(int kind);
#define TZR_PROLOGUE_LEN 73          /* magic + version + 56-byte header + u64 meta len */
#define TZR_DEFAULT_METADATA 262144u  /* tensorizer's fixed index reservation */
#define TZR_MIN_VERSION 1
#define TZR_MAX_VERSION 4
#define TZR_FLAG_ENCRYPTED 1u
#define TZR_FLAG_COMPRESSED 2u       /* libtzr extension: compression blocks */

#define TZR_HASH_CRC32 0
#define TZR_HASH_SHA256 1

#define TZR_CHUNK_KDF 1
#define TZR_CHUNK_XSALSA_PARALLEL 2
#define TZR_CHUNK_XSALSA_SEQUENTIAL 3
#define TZR_KDF_PWHASH 1
#define TZR_ALG_ARGON2ID13 2
#define TZR_NONCE_BYTES 24
#define TZR_MAC_BYTES 16
#define TZR_CRYPT_CHUNK 2097152u     /* tensorizer's plaintext bytes per MAC */

typedef struct tzr_file_header {
    uint32_t version;
    uint8_t flags[32];      /* 256-bit little-endian feature flags */
    uint64_t tensor_size;   /* sum of data lengths (informational) */
    uint64_t tensor_count;
    uint64_t metadata_len;
} tzr_file_header;

/* Parse the 73-byte prologue. Checks magic, version range and flags. */
TZR_HIDDEN int tzr_parse_prologue(const uint8_t *buf, size_t len, tzr_file_header *h);
TZR_HIDDEN void tzr_emit_prologue(uint8_t out[TZR_PROLOGUE_LEN], const tzr_file_header *h);
/* Whether tensor headers carry a crypt block (v3, or v4+ with the flag). */
TZR_HIDDEN int tzr_has_crypt_info(const tzr_file_header *h);
/* Whether tensor headers carry a compression block (v4+ with flag bit 1). */
TZR_HIDDEN int tzr_has_comp_info(const tzr_file_header *h);

typedef struct tzr_index_entry {
    const uint8_t *name;
    uint16_t name_len;
    uint8_t type;
    const uint8_t *dtype;
    uint8_t dtype_len;
    uint8_t ndim;
    const uint8_t *dims;    /* ndim little-endian u32 */
    uint64_t header_offset;
    uint64_t data_offset;
    uint64_t data_length;
} tzr_index_entry;

/* Parse one index entry at the cursor (pointers refer into the buffer). */
TZR_HIDDEN int tzr_parse_index_entry(tzr_cursor *c, tzr_index_entry *e);
/* The byte size of the index entry at p[0, len) and its ndim, reading only
 * its lengths (finding where an entry starts, far into an index): 0 when
 * it runs past len. */
TZR_HIDDEN size_t tzr_index_entry_skip(const uint8_t *p, size_t len, uint32_t *ndim);
TZR_HIDDEN size_t tzr_index_entry_size(size_t name_len, size_t dtype_len, uint32_t ndim);
TZR_HIDDEN void tzr_emit_index_entry(uint8_t *out, const tzr_index_entry *e);

typedef struct tzr_crypt_info {
    int present;            /* the header had a crypt block */
    int encrypted;          /* it had an encryption chunk */
    int chunk_type;         /* TZR_CHUNK_XSALSA_* */
    uint64_t chunk_size;    /* parallel: plaintext bytes per MAC */
    const uint8_t *nonce;   /* 24 bytes */
    uint64_t num_macs;
    const uint8_t *macs;    /* num_macs * 16 */
    int has_kdf;
    uint64_t opslimit, memlimit;
    int32_t alg;
    const uint8_t *salt;
    uint16_t salt_len;
} tzr_crypt_info;

/* Compression block (libtzr extension, formats/tensorizer.md section 11). */
#define TZR_CODEC_NONE 0
#define TZR_CODEC_ZSTD 1
#define TZR_COMP_FIXED 18                 /* block bytes after its u64 length, frames aside */
#define TZR_MIN_FRAME 4096u
#define TZR_MAX_FRAME ((uint32_t)64 << 20)
typedef struct tzr_comp_info {
    int present;
    uint8_t codec;          /* TZR_CODEC_* */
    uint8_t planes;         /* zstd: 1 (no split), 2 or 4 byte planes */
    uint32_t frame_size;    /* zstd: uncompressed bytes per frame */
    uint64_t uncompressed_length;
    uint32_t nframes;
    const uint8_t *frame_sizes; /* nframes little-endian u32 stored sizes */
} tzr_comp_info;

/* Stored size of frame k (k < nframes). */
static inline uint32_t tzr_comp_frame(const tzr_comp_info *ci, uint64_t k) {
    return tzr_ld32(ci->frame_sizes + 4 * k);
}

typedef struct tzr_tensor_header {
    uint64_t header_size;
    uint16_t module_idx;
    uint8_t type;
    const uint8_t *name;
    uint16_t name_len;
    const uint8_t *dtype;
    uint8_t dtype_len;
    uint8_t ndim;
    const uint8_t *dims;
    int has_crc32, has_sha256;
    uint32_t crc32;
    size_t crc32_at;        /* offset of the CRC32 value inside the header */
    const uint8_t *sha256;
    size_t sha256_at;
    size_t crypt_start, crypt_end; /* crypt block [start, end) incl. its u64 length */
    tzr_crypt_info crypt;
    size_t comp_start, comp_end;   /* compression block [start, end) incl. its u64 length */
    tzr_comp_info comp;
    int64_t data_length;    /* the header's last 8 bytes (stored bytes) */
} tzr_tensor_header;

/* Parse a whole tensor header (len == header_size). The blocks present
 * follow from the file header (tzr_has_crypt_info, tzr_has_comp_info). */
TZR_HIDDEN int tzr_parse_tensor_header(const uint8_t *buf, size_t len, int has_crypt_info,
                                       int has_comp_info, tzr_tensor_header *h);
/* libtzr's frame directory (formats/tensorizer.md §11.5): in a compressed
 * file, right after the index entries, the magic, a u64 length D, then D
 * bytes holding every tensor's compression block (u64 length + body, the
 * bytes its header holds) in index order. */
#define TZR_DIR_MAGIC "TZRZDIR1"
#define TZR_DIR_PREFIX 16 /* magic + u64 D */
/* Parse the compression block that starts at *pos in buf[0, len) (u64
 * length, then the body, as in a header); *pos moves past it. */
TZR_HIDDEN int tzr_parse_comp_block_at(const uint8_t *buf, size_t len, size_t *pos, tzr_comp_info *ci);
/* Checks of a parsed compression block against the header's data_length
 * (frame table sums, counts, codec rules). Pure; part of the parse. */
TZR_HIDDEN int tzr_check_comp_info(const tzr_comp_info *ci, uint64_t stored_length);
/* The bytes tensorizer hashes: the header with every hash value zeroed and
 * the crypt block removed. With a compression block, that block is removed
 * too and header_size and data_length are replaced by the values of the
 * same tensor stored uncompressed, so the hashes equal those of an
 * uncompressed copy. out must hold len bytes; returns its length. */
TZR_HIDDEN size_t tzr_hashable_header(const uint8_t *buf, size_t len, const tzr_tensor_header *h,
                                      uint8_t *out);

/* What the writer puts in a tensor header. */
typedef struct tzr_header_spec {
    uint16_t module_idx;
    uint8_t type;
    const uint8_t *name;
    uint16_t name_len;
    const uint8_t *dtype;
    uint8_t dtype_len;
    uint8_t ndim;
    const uint64_t *shape;
    int crypt_block;        /* file is encrypted: add a crypt block */
    int encrypted;          /* this tensor's data is encrypted (no CRC32) */
    int with_kdf;
    uint64_t opslimit, memlimit;
    const uint8_t *salt;    /* 16 bytes */
    const uint8_t *nonce;   /* 24 bytes */
    uint64_t num_macs;
    uint64_t data_length;   /* stored bytes */
    /* Compressed files: a compression block after the crypt block. */
    int comp_block;
    uint8_t codec, planes;
    uint32_t frame_size;
    uint64_t uncompressed_length;
    uint32_t nframes;
    const uint32_t *frame_sizes;
} tzr_header_spec;

typedef struct tzr_header_slots {
    size_t crc32_at, sha256_at, macs_at; /* 0: absent */
    size_t crypt_start, crypt_end;
    size_t comp_start, comp_end;
} tzr_header_slots;

TZR_HIDDEN size_t tzr_header_size(const tzr_header_spec *s);
/* Emit a header with zero hash values and MACs; slots says where they go. */
TZR_HIDDEN void tzr_emit_tensor_header(uint8_t *out, const tzr_header_spec *s, tzr_header_slots *slots);

#endif
