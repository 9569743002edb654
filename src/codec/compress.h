/* Framed compression of tensor data (codecs: codec.h) for libtzr's compressed-tensor extension
 * (formats/tensorizer.md section 11): independent frames of a fixed
 * uncompressed size, each optionally byte-plane split first. Pure CPU work
 * on memory; no I/O. */
#ifndef TZR_COMPRESS_H
#define TZR_COMPRESS_H
#include "format.h"

/* Byte planes: plane k of dst holds byte k of every element of src.
 * len is a multiple of planes. */
TZR_HIDDEN void tzr_planes_split(uint8_t *dst, const uint8_t *src, size_t len, unsigned planes);
TZR_HIDDEN void tzr_planes_join(uint8_t *dst, const uint8_t *src, size_t len, unsigned planes);

/* A compressed tensor as the writer stores it. */
typedef struct tzr_zdata {
    int codec;              /* TZR_CODEC_NONE: did not shrink, store the input */
    unsigned planes;
    uint32_t frame_size;
    uint32_t nframes;
    uint32_t *frame_sizes;  /* nframes stored sizes */
    uint8_t *stored;        /* the frames back to back */
    uint64_t stored_len;
} tzr_zdata;

/* Compress len bytes with codec (a codec table id) in frames of
 * frame_size (planes: 1, 2 or 4, dividing frame_size and len) at the
 * codec's level, on up to `threads` threads. */
TZR_HIDDEN int tzr_zcompress(int codec, const uint8_t *data, uint64_t len, unsigned planes, uint32_t frame_size, int level,
                             int threads, tzr_zdata *out);
TZR_HIDDEN void tzr_zdata_free(tzr_zdata *z);

/* Decompression context (a decoder of the codec last used), one per thread. */
typedef struct tzr_zctx tzr_zctx;
TZR_HIDDEN tzr_zctx *tzr_zctx_new(void);
TZR_HIDDEN void tzr_zctx_free(tzr_zctx *z);

/* Decompress frames [f0, f1) of a tensor: src holds their stored bytes back
 * to back (src_len of them), dst receives the uncompressed bytes from
 * f0 * frame_size on. scratch (frame_size bytes) is needed with planes > 1.
 * file_off is the file offset of src[0], for messages. Every size is
 * checked: a frame that does not decode to exactly its length is
 * TZR_EFORMAT naming the frame and its offset. */
TZR_HIDDEN int tzr_zdecompress(tzr_zctx *z, const tzr_comp_info *ci, uint64_t f0, uint64_t f1, const uint8_t *src,
                               uint64_t src_len, uint8_t *dst, uint8_t *scratch, uint64_t file_off);
/* Uncompressed bytes of frames [f0, f1). */
TZR_HIDDEN uint64_t tzr_zframes_len(const tzr_comp_info *ci, uint64_t f0, uint64_t f1);
#endif
