/* The codec table: one row per compression codec a compressed tensor's
 * frames may use (formats/tensorizer.md section 11). The frame layout,
 * byte planes and checks are the codec-independent part (compress.c); a
 * row only turns one frame into bytes and back. Everything that must know
 * whether a codec exists asks this table, never a specific id, so a new
 * codec is a new row (and its file), and an id no row has is refused at
 * open instead of being read as raw data. */
#ifndef TZR_CODEC_H
#define TZR_CODEC_H
#include "internal.h"

typedef struct tzr_codec {
    unsigned id;            /* the compression block's codec byte; also the public TZR_COMPRESSION_* value */
    const char *name;       /* for messages and tools ("zstd") */
    /* Largest encoding of len bytes. */
    size_t (*bound)(size_t len);
    /* Encoder state at a level (0: the codec's default), one per thread. */
    void *(*encoder_new)(int level);
    void (*encoder_free)(void *enc);
    /* Encode n bytes into dst (cap >= bound(n)): 0 and *got, or nonzero
     * with a reason in msg. */
    int (*encode)(void *enc, uint8_t *dst, size_t cap, const uint8_t *src, size_t n, size_t *got, char *msg,
                  size_t msg_cap);
    /* Decoder state, one per thread. */
    void *(*decoder_new)(void);
    void (*decoder_free)(void *dec);
    /* Decode one frame of n stored bytes into exactly `want` bytes: 0, or
     * nonzero with a reason in msg ("corrupt ... frame: ...", "decompresses
     * to X bytes, the shape needs Y"). */
    int (*decode)(void *dec, uint8_t *dst, size_t want, const uint8_t *src, size_t n, char *msg, size_t msg_cap);
} tzr_codec;

/* The row for a codec id; NULL for TZR_CODEC_NONE, -1 (not yet known) and
 * ids no row has. */
TZR_HIDDEN const tzr_codec *tzr_codec_find(int id);
/* TZR_EFORMAT naming the id and the codecs this build knows. */
TZR_HIDDEN int tzr_codec_unknown(int id);
/* Tests only: use `rows` (n of them) instead of the built-in table; NULL
 * restores it. Not thread-safe: call with no reader or writer at work. */
TZR_HIDDEN void tzr_codec_table_use(const tzr_codec *const *rows, size_t n);

/* The built-in rows (codec_zstd.c, ...). */
extern TZR_HIDDEN const tzr_codec tzr_codec_zstd;
#endif
