/* Parsing and emitting the .tensors byte layout (formats/tensorizer.md). */
#include "format.h"

#include <string.h>

int tzr_parse_prologue(const uint8_t *buf, size_t len, tzr_file_header *h) {
    memset(h, 0, sizeof *h);
    if (len < TZR_MAGIC_LEN || memcmp(buf, TZR_MAGIC, TZR_MAGIC_LEN) != 0)
        return tzr_fail(TZR_EFORMAT, "offset 0: bad magic (not a tensorizer .tensors file)");
    if (len < TZR_PROLOGUE_LEN)
        return tzr_fail(TZR_EFORMAT, "offset %zu: file too small for the %d-byte file header", len,
                        TZR_PROLOGUE_LEN);
    tzr_cursor c = tzr_cursor_make(buf + TZR_MAGIC_LEN, len - TZR_MAGIC_LEN);
    h->version = tzr_get32(&c);
    memcpy(h->flags, tzr_cursor_take(&c, 32), 32);
    h->tensor_size = tzr_get64(&c);
    tzr_cursor_take(&c, 8);
    h->tensor_count = tzr_get64(&c);
    h->metadata_len = tzr_get64(&c);
    if (h->version < TZR_MIN_VERSION || h->version > TZR_MAX_VERSION)
        return tzr_fail(TZR_EVERSION,
                        "offset 5: data version %u is not supported (this library reads versions 1-4)",
                        h->version);
    /* Bit 0 (encrypted) is tensorizer's; bit 1 (compressed) is libtzr's
     * extension. Any other bit is a feature we do not know, so refuse
     * rather than misread (tensorizer does the same). */
    int unknown = (h->flags[0] & ~(TZR_FLAG_ENCRYPTED | TZR_FLAG_COMPRESSED)) != 0;
    for (int i = 1; i < 32; i++) unknown |= h->flags[i] != 0;
    if (unknown)
        return tzr_fail(TZR_EVERSION,
                        "offset 9: unsupported feature flags (only 'encrypted' and 'compressed' are known)");
    /* The flags field only exists from v4 on: a compressed bit in an older
     * file cannot come from a writer that knew what it meant. */
    if ((h->flags[0] & TZR_FLAG_COMPRESSED) && h->version < 4)
        return tzr_fail(TZR_EVERSION, "offset 9: unsupported feature flags: 'compressed' (bit 1) in a data version %u file (needs 4)",
                        h->version);
    return 0;
}

int tzr_has_crypt_info(const tzr_file_header *h) {
    return h->version == 3 || (h->version >= 4 && (h->flags[0] & TZR_FLAG_ENCRYPTED));
}

int tzr_has_comp_info(const tzr_file_header *h) {
    return h->version >= 4 && (h->flags[0] & TZR_FLAG_COMPRESSED);
}

void tzr_emit_prologue(uint8_t out[TZR_PROLOGUE_LEN], const tzr_file_header *h) {
    memset(out, 0, TZR_PROLOGUE_LEN);
    memcpy(out, TZR_MAGIC, TZR_MAGIC_LEN);
    tzr_st32(out + 5, h->version);
    if (h->version >= 4) memcpy(out + 9, h->flags, 32); /* flags exist from v4 on */
    tzr_st64(out + 41, h->tensor_size);
    tzr_st64(out + 57, h->tensor_count);
    tzr_st64(out + 65, h->metadata_len);
}

int tzr_parse_index_entry(tzr_cursor *c, tzr_index_entry *e) {
    memset(e, 0, sizeof *e);
    e->name_len = tzr_get16(c);
    e->name = tzr_cursor_take(c, e->name_len);
    e->type = tzr_get8(c);
    e->dtype_len = tzr_get8(c);
    e->dtype = tzr_cursor_take(c, e->dtype_len);
    e->ndim = tzr_get8(c);
    e->dims = tzr_cursor_take(c, 4u * e->ndim);
    e->header_offset = tzr_get64(c);
    e->data_offset = tzr_get64(c);
    e->data_length = tzr_get64(c);
    return c->bad ? TZR_ETRUNC : 0;
}

size_t tzr_index_entry_skip(const uint8_t *p, size_t len, uint32_t *ndim) {
    if (len < 2) return 0;
    size_t at = 2 + (size_t)tzr_ld16(p) + 1; /* name, type */
    if (at >= len) return 0;
    at += 1 + (size_t)p[at]; /* dtype */
    if (at >= len) return 0;
    *ndim = p[at];
    at += 1 + 4 * (size_t)p[at] + 24; /* dims, three offsets */
    return at <= len ? at : 0;
}

size_t tzr_index_entry_size(size_t name_len, size_t dtype_len, uint32_t ndim) {
    return 29 + name_len + dtype_len + 4 * (size_t)ndim;
}

void tzr_emit_index_entry(uint8_t *out, const tzr_index_entry *e) {
    uint8_t *p = out;
    tzr_st16(p, e->name_len);
    p += 2;
    memcpy(p, e->name, e->name_len);
    p += e->name_len;
    *p++ = e->type;
    *p++ = e->dtype_len;
    memcpy(p, e->dtype, e->dtype_len);
    p += e->dtype_len;
    *p++ = e->ndim;
    memcpy(p, e->dims, 4u * e->ndim);
    p += 4u * e->ndim;
    tzr_st64(p, e->header_offset);
    tzr_st64(p + 8, e->data_offset);
    tzr_st64(p + 16, e->data_length);
}

static int parse_crypt_block(const uint8_t *buf, size_t start, size_t end, tzr_crypt_info *ci) {
    tzr_cursor c = tzr_cursor_make(buf + start, end - start);
    uint16_t chunks = tzr_get16(&c);
    ci->present = 1;
    for (uint16_t i = 0; i < chunks; i++) {
        uint64_t chunk_len = tzr_get64(&c);
        if (c.bad || chunk_len < 2 || chunk_len > tzr_cursor_left(&c))
            return tzr_fail(TZR_EFORMAT, "crypt chunk %u: length %llu exceeds the crypt block", i,
                            (unsigned long long)chunk_len);
        tzr_cursor body = tzr_cursor_make(tzr_cursor_take(&c, chunk_len), chunk_len);
        uint16_t type = tzr_get16(&body);
        if (type == TZR_CHUNK_KDF) {
            if (ci->has_kdf) return tzr_fail(TZR_ECRYPT, "more than one key derivation chunk");
            uint16_t method = tzr_get16(&body);
            if (method != TZR_KDF_PWHASH)
                return tzr_fail(TZR_ECRYPT, "unknown key derivation method %u", method);
            ci->has_kdf = 1;
            ci->opslimit = tzr_get64(&body);
            ci->memlimit = tzr_get64(&body);
            ci->alg = (int32_t)tzr_get32(&body);
            ci->salt_len = tzr_get16(&body);
            ci->salt = tzr_cursor_take(&body, ci->salt_len);
        } else if (type == TZR_CHUNK_XSALSA_PARALLEL || type == TZR_CHUNK_XSALSA_SEQUENTIAL) {
            if (ci->encrypted) return tzr_fail(TZR_ECRYPT, "more than one encryption chunk");
            ci->encrypted = 1;
            ci->chunk_type = type;
            if (type == TZR_CHUNK_XSALSA_PARALLEL) {
                ci->chunk_size = tzr_get64(&body);
                ci->nonce = tzr_cursor_take(&body, TZR_NONCE_BYTES);
                ci->num_macs = tzr_get64(&body);
                if (!body.bad && ci->num_macs > tzr_cursor_left(&body) / TZR_MAC_BYTES)
                    return tzr_fail(TZR_EFORMAT, "crypt chunk: %llu MACs do not fit in the chunk",
                                    (unsigned long long)ci->num_macs);
                ci->macs = tzr_cursor_take(&body, ci->num_macs * TZR_MAC_BYTES);
                if (!body.bad && (ci->chunk_size % 64 != 0 || ci->chunk_size < 1024))
                    return tzr_fail(TZR_EFORMAT, "crypt chunk size %llu is invalid",
                                    (unsigned long long)ci->chunk_size);
            } else {
                ci->nonce = tzr_cursor_take(&body, TZR_NONCE_BYTES);
                ci->num_macs = 1;
                ci->macs = tzr_cursor_take(&body, TZR_MAC_BYTES);
            }
        } else {
            return tzr_fail(TZR_ECRYPT, "unknown crypt chunk type %u", type);
        }
        if (body.bad) return tzr_fail(TZR_EFORMAT, "crypt chunk %u (type %u) is truncated", i, type);
    }
    if (c.bad) return tzr_fail(TZR_EFORMAT, "crypt block is truncated");
    return 0;
}

int tzr_check_comp_info(const tzr_comp_info *ci, uint64_t stored) {
    unsigned long long ulen = (unsigned long long)ci->uncompressed_length;
    if (ci->codec == TZR_CODEC_NONE) {
        if (ci->planes != 0 || ci->frame_size != 0 || ci->nframes != 0)
            return tzr_fail(TZR_EFORMAT, "compression block: uncompressed tensor with planes, frame size or frames");
        if (ci->uncompressed_length != stored)
            return tzr_fail(TZR_EFORMAT, "compression block: uncompressed tensor of %llu bytes stores %llu", ulen,
                            (unsigned long long)stored);
        return 0;
    }
    /* Any other codec id frames the same way; whether a codec table row
     * can expand it is the reader's question (codec/ is above format/). */
    if (ci->planes != 1 && ci->planes != 2 && ci->planes != 4)
        return tzr_fail(TZR_EFORMAT, "compression block: %u byte planes (1, 2 or 4 are defined)", ci->planes);
    if (ci->frame_size < TZR_MIN_FRAME || ci->frame_size > TZR_MAX_FRAME || ci->frame_size % 64 != 0)
        return tzr_fail(TZR_EFORMAT, "compression block: frame size %u is not a multiple of 64 in [%u, %u]",
                        ci->frame_size, TZR_MIN_FRAME, TZR_MAX_FRAME);
    /* A compressed tensor must shrink: raw readers of data_length == nbytes
     * tensors can then rely on the bytes being the tensor itself. */
    if (ci->uncompressed_length == 0 || stored >= ci->uncompressed_length)
        return tzr_fail(TZR_EFORMAT, "compression block: %llu bytes compressed to %llu do not shrink", ulen,
                        (unsigned long long)stored);
    uint64_t want = ci->uncompressed_length / ci->frame_size + (ci->uncompressed_length % ci->frame_size != 0);
    if (want != ci->nframes)
        return tzr_fail(TZR_EFORMAT, "compression block: %u frames for %llu bytes in %u-byte frames (want %llu)",
                        ci->nframes, ulen, ci->frame_size, (unsigned long long)want);
    uint64_t sum = 0;
    for (uint64_t k = 0; k < ci->nframes; k++) {
        uint32_t n = tzr_comp_frame(ci, k);
        if (n == 0 || n > stored - sum)
            return tzr_fail(TZR_EFORMAT,
                            "compression block: frame %llu (%u bytes at stored offset %llu) lies outside the %llu stored bytes",
                            (unsigned long long)k, n, (unsigned long long)sum, (unsigned long long)stored);
        sum += n;
    }
    if (sum != stored)
        return tzr_fail(TZR_EFORMAT, "compression block: frames hold %llu bytes, data_length is %llu",
                        (unsigned long long)sum, (unsigned long long)stored);
    return 0;
}

static int parse_comp_block(const uint8_t *buf, size_t start, size_t end, tzr_comp_info *ci) {
    tzr_cursor c = tzr_cursor_make(buf + start, end - start);
    ci->present = 1;
    ci->codec = tzr_get8(&c);
    ci->planes = tzr_get8(&c);
    ci->frame_size = tzr_get32(&c);
    ci->uncompressed_length = tzr_get64(&c);
    ci->nframes = tzr_get32(&c);
    if (c.bad) return tzr_fail(TZR_EFORMAT, "compression block of %zu bytes is truncated", end - start);
    if ((uint64_t)ci->nframes * 4 != tzr_cursor_left(&c))
        return tzr_fail(TZR_EFORMAT, "compression block: %u frames need %llu bytes of frame table, the block has %zu",
                        ci->nframes, (unsigned long long)ci->nframes * 4, tzr_cursor_left(&c));
    ci->frame_sizes = tzr_cursor_take(&c, (size_t)ci->nframes * 4);
    return 0;
}

/* A block prefixed by its u64 length: [*start, *end) spans both, the body
 * begins at *body. */
static int take_block_in(tzr_cursor *c, const char *what, const char *in, size_t *start, size_t *body, size_t *end) {
    *start = c->pos;
    uint64_t len = tzr_get64(c);
    if (c->bad || len > tzr_cursor_left(c))
        return tzr_fail(TZR_EFORMAT, "%s block of %llu bytes runs past the %s", what, (unsigned long long)len, in);
    *body = c->pos;
    tzr_cursor_take(c, (size_t)len);
    *end = c->pos;
    return 0;
}

static int take_block(tzr_cursor *c, const char *what, size_t *start, size_t *body, size_t *end) {
    return take_block_in(c, what, "header", start, body, end);
}

int tzr_parse_comp_block_at(const uint8_t *buf, size_t len, size_t *pos, tzr_comp_info *ci) {
    memset(ci, 0, sizeof *ci);
    tzr_cursor c = tzr_cursor_make(buf, len);
    c.pos = *pos;
    size_t start, body, end;
    int rc = take_block_in(&c, "compression", "frame directory", &start, &body, &end);
    if (!rc) rc = parse_comp_block(buf, body, end, ci);
    if (!rc) *pos = end;
    return rc;
}

int tzr_parse_tensor_header(const uint8_t *buf, size_t len, int has_crypt_info, int has_comp_info,
                            tzr_tensor_header *h) {
    memset(h, 0, sizeof *h);
    tzr_cursor c = tzr_cursor_make(buf, len);
    h->header_size = tzr_get64(&c);
    if (h->header_size != len)
        return tzr_fail(TZR_EFORMAT, "header size field says %llu bytes, index implies %zu",
                        (unsigned long long)h->header_size, len);
    h->module_idx = tzr_get16(&c);
    h->type = tzr_get8(&c);
    h->name_len = tzr_get16(&c);
    h->name = tzr_cursor_take(&c, h->name_len);
    h->dtype_len = tzr_get8(&c);
    h->dtype = tzr_cursor_take(&c, h->dtype_len);
    h->ndim = tzr_get8(&c);
    h->dims = tzr_cursor_take(&c, 4u * h->ndim);
    uint16_t hash_len = tzr_get16(&c);
    size_t hash_end = c.pos + hash_len;
    if (c.bad) return tzr_fail(TZR_EFORMAT, "tensor header is truncated (%zu bytes)", len);
    if (hash_len > tzr_cursor_left(&c))
        return tzr_fail(TZR_EFORMAT, "hash section of %u bytes runs past the header", hash_len);
    tzr_cursor hc = tzr_cursor_make(buf + c.pos, hash_len);
    uint8_t count = tzr_get8(&hc);
    for (uint8_t i = 0; i < count; i++) {
        uint8_t type = tzr_get8(&hc);
        uint8_t hlen = tzr_get8(&hc);
        size_t at = c.pos + hc.pos;
        const uint8_t *val = tzr_cursor_take(&hc, hlen);
        if (hc.bad) return tzr_fail(TZR_EFORMAT, "hash entry %u runs past the hash section", i);
        if (type == TZR_HASH_CRC32 && hlen == 4) {
            h->has_crc32 = 1;
            h->crc32 = tzr_ld32(val);
            h->crc32_at = at;
        } else if (type == TZR_HASH_SHA256 && hlen == 32) {
            h->has_sha256 = 1;
            h->sha256 = val;
            h->sha256_at = at;
        } else {
            return tzr_fail(TZR_EFORMAT, "unknown hash type %u with length %u", type, hlen);
        }
    }
    c.pos = hash_end;
    size_t body;
    if (has_crypt_info) {
        int rc = take_block(&c, "crypt", &h->crypt_start, &body, &h->crypt_end);
        if (!rc) rc = parse_crypt_block(buf, body, h->crypt_end, &h->crypt);
        if (rc) return rc;
    }
    if (has_comp_info) {
        int rc = take_block(&c, "compression", &h->comp_start, &body, &h->comp_end);
        if (!rc) rc = parse_comp_block(buf, body, h->comp_end, &h->comp);
        if (rc) return rc;
    }
    /* data_length is the last 8 bytes; anything between is ignored (but
     * hashed), as tensorizer does. */
    if (tzr_cursor_left(&c) < 8)
        return tzr_fail(TZR_EFORMAT, "tensor header has no room for the data length");
    h->data_length = (int64_t)tzr_ld64(buf + len - 8);
    if (h->data_length < 0)
        return tzr_fail(TZR_EFORMAT, "negative data length %lld", (long long)h->data_length);
    if (h->comp.present) return tzr_check_comp_info(&h->comp, (uint64_t)h->data_length);
    return 0;
}

size_t tzr_hashable_header(const uint8_t *buf, size_t len, const tzr_tensor_header *h, uint8_t *out) {
    /* Copy around the blocks that are cut out: crypt then compression
     * (both follow the hash section, in that order). */
    size_t cut[2][2] = {{h->crypt_start, h->crypt_end}, {h->comp_start, h->comp_end}};
    size_t n = 0, from = 0;
    for (int k = 0; k < 2; k++) {
        if (cut[k][1] <= cut[k][0]) continue;
        memcpy(out + n, buf + from, cut[k][0] - from);
        n += cut[k][0] - from;
        from = cut[k][1];
    }
    memcpy(out + n, buf + from, len - from);
    n += len - from;
    /* Hash values precede both blocks, so their offsets are unchanged. */
    if (h->has_crc32) memset(out + h->crc32_at, 0, 4);
    if (h->has_sha256) memset(out + h->sha256_at, 0, 32);
    if (h->comp.present) {
        /* The header the same tensor has when stored uncompressed. */
        tzr_st64(out, h->header_size - (h->comp_end - h->comp_start));
        tzr_st64(out + n - 8, h->comp.uncompressed_length);
    }
    return n;
}

static size_t crypt_block_size(const tzr_header_spec *s) {
    if (!s->crypt_block) return 0;
    size_t n = 8 + 2;
    if (s->encrypted) {
        if (s->with_kdf) n += 8 + 2 + 2 + 8 + 8 + 4 + 2 + TZR_SALT_BYTES;
        n += 8 + 2 + 8 + TZR_NONCE_BYTES + 8 + TZR_MAC_BYTES * (size_t)s->num_macs;
    }
    return n;
}

static size_t comp_block_size(const tzr_header_spec *s) {
    return s->comp_block ? 8 + TZR_COMP_FIXED + 4 * (size_t)s->nframes : 0;
}

size_t tzr_header_size(const tzr_header_spec *s) {
    size_t hashes = s->encrypted ? 2 + 1 + 34 : 2 + 1 + 6 + 34;
    return 8 + 2 + 1 + 2 + s->name_len + 1 + s->dtype_len + 1 + 4u * s->ndim + hashes +
           crypt_block_size(s) + comp_block_size(s) + 8;
}

void tzr_emit_tensor_header(uint8_t *out, const tzr_header_spec *s, tzr_header_slots *slots) {
    size_t size = tzr_header_size(s);
    uint8_t *p = out;
    memset(out, 0, size);
    memset(slots, 0, sizeof *slots);
    tzr_st64(p, size);
    tzr_st16(p + 8, s->module_idx);
    p[10] = s->type;
    tzr_st16(p + 11, s->name_len);
    p += 13;
    memcpy(p, s->name, s->name_len);
    p += s->name_len;
    *p++ = s->dtype_len;
    memcpy(p, s->dtype, s->dtype_len);
    p += s->dtype_len;
    *p++ = s->ndim;
    for (uint8_t i = 0; i < s->ndim; i++, p += 4) tzr_st32(p, (uint32_t)s->shape[i]);
    /* Unencrypted: CRC32 then SHA-256; encrypted data: SHA-256 only. */
    tzr_st16(p, s->encrypted ? 35 : 41);
    p[2] = s->encrypted ? 1 : 2;
    p += 3;
    if (!s->encrypted) {
        p[0] = TZR_HASH_CRC32;
        p[1] = 4;
        slots->crc32_at = (size_t)(p + 2 - out);
        p += 6;
    }
    p[0] = TZR_HASH_SHA256;
    p[1] = 32;
    slots->sha256_at = (size_t)(p + 2 - out);
    p += 34;
    if (s->crypt_block) {
        size_t cb = crypt_block_size(s);
        slots->crypt_start = (size_t)(p - out);
        slots->crypt_end = slots->crypt_start + cb;
        tzr_st64(p, cb - 8);
        p += 8;
        if (!s->encrypted) {
            tzr_st16(p, 0); /* empty CryptInfo: no chunks */
            p += 2;
        } else {
            tzr_st16(p, s->with_kdf ? 2 : 1);
            p += 2;
            if (s->with_kdf) {
                tzr_st64(p, 2 + 2 + 8 + 8 + 4 + 2 + TZR_SALT_BYTES);
                tzr_st16(p + 8, TZR_CHUNK_KDF);
                tzr_st16(p + 10, TZR_KDF_PWHASH);
                tzr_st64(p + 12, s->opslimit);
                tzr_st64(p + 20, s->memlimit);
                tzr_st32(p + 28, TZR_ALG_ARGON2ID13);
                tzr_st16(p + 32, TZR_SALT_BYTES);
                memcpy(p + 34, s->salt, TZR_SALT_BYTES);
                p += 34 + TZR_SALT_BYTES;
            }
            tzr_st64(p, 2 + 8 + TZR_NONCE_BYTES + 8 + TZR_MAC_BYTES * s->num_macs);
            tzr_st16(p + 8, TZR_CHUNK_XSALSA_PARALLEL);
            tzr_st64(p + 10, TZR_CRYPT_CHUNK);
            memcpy(p + 18, s->nonce, TZR_NONCE_BYTES);
            tzr_st64(p + 42, s->num_macs);
            slots->macs_at = (size_t)(p + 50 - out);
            p += 50 + TZR_MAC_BYTES * s->num_macs;
        }
    }
    if (s->comp_block) {
        slots->comp_start = (size_t)(p - out);
        slots->comp_end = slots->comp_start + comp_block_size(s);
        tzr_st64(p, TZR_COMP_FIXED + 4 * (uint64_t)s->nframes);
        p[8] = s->codec;
        p[9] = s->planes;
        tzr_st32(p + 10, s->frame_size);
        tzr_st64(p + 14, s->uncompressed_length);
        tzr_st32(p + 22, s->nframes);
        p += 8 + TZR_COMP_FIXED;
        for (uint32_t k = 0; k < s->nframes; k++, p += 4) tzr_st32(p, s->frame_sizes[k]);
    }
    tzr_st64(p, s->data_length);
}
