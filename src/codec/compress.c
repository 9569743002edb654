/* Frames and byte planes for compressed tensors, over any row of the
 * codec table (codec.h). Frames are
 * independent so the pipeline can decompress them in parallel and in any
 * order; the byte-plane split puts the low-entropy high bytes (sign and
 * exponent) of 2- and 4-byte floats together, which is what compresses. */
#include "thread.h"
#include "compress.h"
#include "codec.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

void tzr_planes_split(uint8_t *dst, const uint8_t *src, size_t len, unsigned planes) {
    size_t n = len / planes;
    if (planes == 2) {
        uint8_t *a = dst, *b = dst + n;
        for (size_t i = 0; i < n; i++) {
            a[i] = src[2 * i];
            b[i] = src[2 * i + 1];
        }
    } else if (planes == 4) {
        uint8_t *a = dst, *b = dst + n, *c = dst + 2 * n, *d = dst + 3 * n;
        for (size_t i = 0; i < n; i++) {
            a[i] = src[4 * i];
            b[i] = src[4 * i + 1];
            c[i] = src[4 * i + 2];
            d[i] = src[4 * i + 3];
        }
    } else {
        memcpy(dst, src, len);
    }
}

/* The join runs on every byte a compressed load delivers, so it
 * interleaves 16 bytes per plane at a time (SSE2, on every x86-64). */
void tzr_planes_join(uint8_t *dst, const uint8_t *src, size_t len, unsigned planes) {
    size_t n = len / planes, i = 0;
    if (planes == 2) {
        const uint8_t *a = src, *b = src + n;
#ifdef __SSE2__
        for (; i + 16 <= n; i += 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(a + i)), y = _mm_loadu_si128((const __m128i *)(b + i));
            _mm_storeu_si128((__m128i *)(dst + 2 * i), _mm_unpacklo_epi8(x, y));
            _mm_storeu_si128((__m128i *)(dst + 2 * i + 16), _mm_unpackhi_epi8(x, y));
        }
#endif
        for (; i < n; i++) {
            dst[2 * i] = a[i];
            dst[2 * i + 1] = b[i];
        }
    } else if (planes == 4) {
        const uint8_t *a = src, *b = src + n, *c = src + 2 * n, *d = src + 3 * n;
#ifdef __SSE2__
        for (; i + 16 <= n; i += 16) {
            __m128i va = _mm_loadu_si128((const __m128i *)(a + i)), vb = _mm_loadu_si128((const __m128i *)(b + i));
            __m128i vc = _mm_loadu_si128((const __m128i *)(c + i)), vd = _mm_loadu_si128((const __m128i *)(d + i));
            __m128i ab_lo = _mm_unpacklo_epi8(va, vb), ab_hi = _mm_unpackhi_epi8(va, vb);
            __m128i cd_lo = _mm_unpacklo_epi8(vc, vd), cd_hi = _mm_unpackhi_epi8(vc, vd);
            _mm_storeu_si128((__m128i *)(dst + 4 * i), _mm_unpacklo_epi16(ab_lo, cd_lo));
            _mm_storeu_si128((__m128i *)(dst + 4 * i + 16), _mm_unpackhi_epi16(ab_lo, cd_lo));
            _mm_storeu_si128((__m128i *)(dst + 4 * i + 32), _mm_unpacklo_epi16(ab_hi, cd_hi));
            _mm_storeu_si128((__m128i *)(dst + 4 * i + 48), _mm_unpackhi_epi16(ab_hi, cd_hi));
        }
#endif
        for (; i < n; i++) {
            dst[4 * i] = a[i];
            dst[4 * i + 1] = b[i];
            dst[4 * i + 2] = c[i];
            dst[4 * i + 3] = d[i];
        }
    } else {
        memcpy(dst, src, len);
    }
}

/* ---- compression (writer) ------------------------------------------- */
typedef struct zjob {
    const tzr_codec *codec;
    const uint8_t *data;
    uint64_t len;
    unsigned planes;
    uint32_t frame_size, nframes;
    int level;
    size_t bound;           /* output bytes reserved per frame */
    uint8_t *out;           /* nframes * bound */
    uint32_t *sizes;
    atomic_uint_fast64_t next;
    atomic_int failed;
    char msg[256];
} zjob;

static void *zworker(void *arg) {
    zjob *j = arg;
    void *cc = j->codec->encoder_new(j->level);
    uint8_t *scratch = j->planes > 1 ? malloc(j->frame_size) : NULL;
    if (!cc || (j->planes > 1 && !scratch)) {
        snprintf(j->msg, sizeof j->msg, "out of memory for a %s compressor", j->codec->name);
        atomic_store(&j->failed, 1);
    }
    while (!atomic_load(&j->failed)) {
        uint64_t f = atomic_fetch_add(&j->next, 1);
        if (f >= j->nframes) break;
        uint64_t off = f * j->frame_size;
        size_t n = (size_t)(j->len - off < j->frame_size ? j->len - off : j->frame_size);
        const uint8_t *in = j->data + off;
        if (scratch) {
            tzr_planes_split(scratch, in, n, j->planes);
            in = scratch;
        }
        size_t got = 0;
        char why[160];
        if (j->codec->encode(cc, j->out + f * j->bound, j->bound, in, n, &got, why, sizeof why)) {
            snprintf(j->msg, sizeof j->msg, "%s compression of frame %llu failed: %s", j->codec->name,
                     (unsigned long long)f, why);
            atomic_store(&j->failed, 1);
            break;
        }
        j->sizes[f] = (uint32_t)got;
    }
    if (cc) j->codec->encoder_free(cc);
    free(scratch);
    return NULL;
}

void tzr_zdata_free(tzr_zdata *z) {
    free(z->frame_sizes);
    free(z->stored);
    memset(z, 0, sizeof *z);
}

int tzr_zcompress(int codec, const uint8_t *data, uint64_t len, unsigned planes, uint32_t frame_size, int level,
                  int threads, tzr_zdata *out) {
    memset(out, 0, sizeof *out);
    out->codec = TZR_CODEC_NONE;
    const tzr_codec *c = tzr_codec_find(codec);
    if (!c) return tzr_codec_unknown(codec);
    if (len == 0) return 0;
    if (planes < 1) planes = 1;
    uint64_t nframes = len / frame_size + (len % frame_size != 0);
    if (nframes > ((uint64_t)TZR_MAX_FRAME / 4))
        return tzr_fail(TZR_ELIMIT, "%llu frames do not fit in a tensor header", (unsigned long long)nframes);
    zjob j;
    memset(&j, 0, sizeof j);
    j.codec = c;
    j.data = data;
    j.len = len;
    j.planes = planes;
    j.frame_size = frame_size;
    j.nframes = (uint32_t)nframes;
    j.level = level;
    j.bound = c->bound(frame_size);
    j.out = malloc((size_t)nframes * j.bound);
    j.sizes = calloc((size_t)nframes, sizeof *j.sizes);
    if (!j.out || !j.sizes) {
        free(j.out);
        free(j.sizes);
        return tzr_fail(TZR_ENOMEM, "out of memory compressing %llu bytes", (unsigned long long)len);
    }
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    if (threads < 1) threads = 1;
    if ((uint64_t)threads > nframes) threads = (int)nframes;
    if (threads > 64) threads = 64;
    pthread_t th[64];
    int started = 0;
    for (; started < threads - 1; started++)
        if (tzr_thread_start(&th[started], zworker, &j) != 0) break;
    zworker(&j);
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    if (atomic_load(&j.failed)) {
        free(j.out);
        free(j.sizes);
        return tzr_fail(TZR_ENOMEM, "%s", j.msg);
    }
    /* Pack the frames back to back (each moves towards the front). */
    uint64_t total = 0;
    for (uint64_t f = 0; f < nframes; f++) {
        memmove(j.out + total, j.out + f * j.bound, j.sizes[f]);
        total += j.sizes[f];
    }
    if (total >= len) { /* did not shrink: store raw */
        free(j.out);
        free(j.sizes);
        return 0;
    }
    uint8_t *shrunk = realloc(j.out, (size_t)total);
    out->codec = (int)c->id;
    out->planes = planes;
    out->frame_size = frame_size;
    out->nframes = (uint32_t)nframes;
    out->frame_sizes = j.sizes;
    out->stored = shrunk ? shrunk : j.out;
    out->stored_len = total;
    return 0;
}

/* ---- decompression (reader, pipeline) ---------------------------------- */
/* One decoder, for the codec last used (a thread meets one codec per file). */
struct tzr_zctx {
    const tzr_codec *codec;
    void *dec;
};

tzr_zctx *tzr_zctx_new(void) { return calloc(1, sizeof(tzr_zctx)); }

void tzr_zctx_free(tzr_zctx *z) {
    if (!z) return;
    if (z->dec) z->codec->decoder_free(z->dec);
    free(z);
}

uint64_t tzr_zframes_len(const tzr_comp_info *ci, uint64_t f0, uint64_t f1) {
    uint64_t a = f0 * ci->frame_size, b = f1 * ci->frame_size;
    if (b > ci->uncompressed_length) b = ci->uncompressed_length;
    return b > a ? b - a : 0;
}

int tzr_zdecompress(tzr_zctx *z, const tzr_comp_info *ci, uint64_t f0, uint64_t f1, const uint8_t *src,
                    uint64_t src_len, uint8_t *dst, uint8_t *scratch, uint64_t file_off) {
    const tzr_codec *c = tzr_codec_find(ci->codec);
    if (!c) return tzr_codec_unknown(ci->codec);
    if (z->codec != c) {
        if (z->dec) z->codec->decoder_free(z->dec);
        z->codec = c;
        if (!(z->dec = c->decoder_new())) return tzr_fail(TZR_ENOMEM, "out of memory for a %s decoder", c->name);
    }
    uint64_t at = 0;
    for (uint64_t f = f0; f < f1; f++) {
        uint32_t n = tzr_comp_frame(ci, f);
        if (n > src_len - at)
            return tzr_fail(TZR_EFORMAT, "frame %llu at offset %llu: %u stored bytes run past the %llu read",
                            (unsigned long long)f, (unsigned long long)(file_off + at), n,
                            (unsigned long long)src_len);
        size_t want = (size_t)tzr_zframes_len(ci, f, f + 1);
        uint8_t *out = dst + (f - f0) * ci->frame_size;
        uint8_t *into = ci->planes > 1 ? scratch : out;
        char why[200];
        if (c->decode(z->dec, into, want, src + at, n, why, sizeof why))
            return tzr_fail(TZR_EFORMAT, "frame %llu at offset %llu: %s", (unsigned long long)f,
                            (unsigned long long)(file_off + at), why);
        if (ci->planes > 1) tzr_planes_join(out, scratch, want, ci->planes);
        at += n;
    }
    return 0;
}
