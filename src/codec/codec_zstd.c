/* The zstd row of the codec table: one zstd frame per tensor frame. */
#include "codec.h"

#include <stdio.h>
#include <zstd.h>

static size_t zstd_bound(size_t len) { return ZSTD_compressBound(len); }

static void *zstd_encoder_new(int level) {
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    if (cc) ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, level ? level : 1);
    return cc;
}

static void zstd_encoder_free(void *enc) { ZSTD_freeCCtx(enc); }

static int zstd_encode(void *enc, uint8_t *dst, size_t cap, const uint8_t *src, size_t n, size_t *got, char *msg,
                       size_t msg_cap) {
    size_t r = ZSTD_compress2(enc, dst, cap, src, n);
    if (ZSTD_isError(r)) {
        snprintf(msg, msg_cap, "%s", ZSTD_getErrorName(r));
        return -1;
    }
    *got = r;
    return 0;
}

static void *zstd_decoder_new(void) { return ZSTD_createDCtx(); }

static void zstd_decoder_free(void *dec) { ZSTD_freeDCtx(dec); }

static int zstd_decode(void *dec, uint8_t *dst, size_t want, const uint8_t *src, size_t n, char *msg,
                       size_t msg_cap) {
    size_t got = ZSTD_decompressDCtx(dec, dst, want, src, n);
    /* A frame that says its size explains a too-small buffer better than
     * zstd's "destination buffer is too small". */
    unsigned long long says = ZSTD_getFrameContentSize(src, n);
    if (ZSTD_isError(got) && says != ZSTD_CONTENTSIZE_UNKNOWN && says != ZSTD_CONTENTSIZE_ERROR && says != want)
        snprintf(msg, msg_cap, "holds %llu bytes, the shape needs %zu", says, want);
    else if (ZSTD_isError(got))
        snprintf(msg, msg_cap, "corrupt zstd frame: %s", ZSTD_getErrorName(got));
    else if (got != want)
        snprintf(msg, msg_cap, "decompresses to %zu bytes, the shape needs %zu", got, want);
    else
        return 0;
    return -1;
}

const tzr_codec tzr_codec_zstd = {
    .id = 1, /* TZR_CODEC_ZSTD */
    .name = "zstd",
    .bound = zstd_bound,
    .encoder_new = zstd_encoder_new,
    .encoder_free = zstd_encoder_free,
    .encode = zstd_encode,
    .decoder_new = zstd_decoder_new,
    .decoder_free = zstd_decoder_free,
    .decode = zstd_decode,
};
