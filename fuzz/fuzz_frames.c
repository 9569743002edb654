/* libFuzzer target for the compression block and frame table (libtzr's
 * zstd extension): input = u8 mode, u16 header length, a tensor header,
 * then stored data. The header is parsed with a compression block (and a
 * crypt block when mode bit 0 is set); when it parses and the data length
 * matches, every frame is expanded into a buffer of exactly the
 * uncompressed length. Bad input must give an error, never an overrun. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compress.h"

#define MAX_OUT ((uint64_t)16 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    int crypt = data[0] & 1;
    size_t hlen = (size_t)data[1] | (size_t)data[2] << 8;
    if (hlen > size - 3) hlen = size - 3;
    const uint8_t *hdr = data + 3, *stored = hdr + hlen;
    size_t slen = size - 3 - hlen;
    /* Copies so a read past either end is caught by the sanitizers. */
    uint8_t *h = malloc(hlen ? hlen : 1), *s = malloc(slen ? slen : 1);
    memcpy(h, hdr, hlen);
    memcpy(s, stored, slen);
    tzr_tensor_header th;
    if (tzr_parse_tensor_header(h, hlen, crypt, 1, &th) == 0) {
        uint8_t *hashable = malloc(hlen ? hlen : 1);
        tzr_hashable_header(h, hlen, &th, hashable);
        free(hashable);
        const tzr_comp_info *ci = &th.comp;
        if (ci->codec == TZR_CODEC_ZSTD && (uint64_t)th.data_length == slen && ci->uncompressed_length <= MAX_OUT) {
            uint8_t *out = malloc((size_t)ci->uncompressed_length);
            uint8_t *scratch = malloc(ci->frame_size);
            tzr_zctx *z = tzr_zctx_new();
            if (out && scratch && z) tzr_zdecompress(z, ci, 0, ci->nframes, s, slen, out, scratch, 0);
            /* Units of frames the way the pipeline cuts them. */
            uint64_t soff = 0;
            for (uint64_t f = 0; out && scratch && z && f < ci->nframes; f++) {
                uint32_t n = tzr_comp_frame(ci, f);
                tzr_zdecompress(z, ci, f, f + 1, s + soff, n, out + f * ci->frame_size, scratch, soff);
                soff += n;
            }
            tzr_zctx_free(z);
            free(out);
            free(scratch);
        }
    }
    free(h);
    free(s);
    return 0;
}
