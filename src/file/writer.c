/* Writer: records go out in order right after the index reservation; the
 * prologue and index are written last, once every offset is known, so the
 * output is byte-identical to tensorizer's for the same tensors. */
#include "names.h"
#include "scheme.h"
#include "writer_internal.h"
#include "write_runs.h"
#include "codec.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Adds the name; TZR_EDUP if present. */
static int name_set_add(tzr_writer *w, const char *name, size_t len) {
    if (2 * (w->count + 1) > w->nslots) {
        size_t ns = w->nslots ? w->nslots * 2 : 64;
        char **names = calloc(ns, sizeof *names);
        size_t *lens = calloc(ns, sizeof *lens);
        if (!names || !lens) {
            free(names);
            free(lens);
            return tzr_fail(TZR_ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < w->nslots; i++) {
            if (!w->names[i]) continue;
            size_t b = tzr_name_hash(w->names[i], w->name_lens[i]) & (ns - 1);
            while (names[b]) b = (b + 1) & (ns - 1);
            names[b] = w->names[i];
            lens[b] = w->name_lens[i];
        }
        free(w->names);
        free(w->name_lens);
        w->names = names;
        w->name_lens = lens;
        w->nslots = ns;
    }
    size_t b = tzr_name_hash(name, len) & (w->nslots - 1);
    while (w->names[b]) {
        if (w->name_lens[b] == len && memcmp(w->names[b], name, len) == 0) return TZR_EDUP;
        b = (b + 1) & (w->nslots - 1);
    }
    char *copy = malloc(len ? len : 1);
    if (!copy) return tzr_fail(TZR_ENOMEM, "out of memory");
    memcpy(copy, name, len);
    w->names[b] = copy;
    w->name_lens[b] = len;
    return 0;
}

int tzr_writer_open_output(tzr_writer **outp, tzr_output *output, const tzr_writer_options *opt) {
    *outp = NULL;
    /* The first version ended before the compression fields. */
    tzr_writer_options o = TZR_WRITER_OPTIONS_INIT;
    int orc = TZR_OPTS(tzr_writer_options, o, opt, offsetof(tzr_writer_options, compression));
    if (o.crypt_params) o.crypt = *o.crypt_params; /* by pointer wins */
    opt = &o;
    if (orc) {
        TZR_KEEP_ERROR; /* the output's destroy must not replace the message */
        output->destroy(output);
        return orc;
    }
    tzr_writer *w = calloc(1, sizeof *w);
    if (!w) {
        output->destroy(output);
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    w->out = output;
    w->meta_size = opt->metadata_size ? opt->metadata_size : TZR_DEFAULT_METADATA;
    w->meta_given = opt->metadata_size != 0;
    int rc = 0;
    if (w->meta_size > ((uint64_t)1 << 30)) rc = tzr_fail(TZR_EINVAL, "metadata_size above 1 GiB");
    if (!rc && !(w->index = calloc(1, (size_t)w->meta_size))) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    w->pos = TZR_PROLOGUE_LEN + w->meta_size;
    w->version = 1;
    w->workers_wanted = opt->threads;
    w->runs = tzr_write_runs_on();
    if (opt->compression != TZR_COMPRESSION_NONE) {
        uint64_t fs = opt->frame_size ? opt->frame_size : (uint64_t)4 << 20;
        if (!tzr_codec_find(opt->compression))
            rc = tzr_fail(TZR_EINVAL, "unknown compression %d", opt->compression);
        else if (fs < TZR_MIN_FRAME || fs > TZR_MAX_FRAME || fs % 64 != 0)
            rc = tzr_fail(TZR_EINVAL, "frame size %llu is not a multiple of 64 in [%u, %u]", (unsigned long long)fs,
                          TZR_MIN_FRAME, TZR_MAX_FRAME);
        w->compress = 1;
        w->codec = opt->compression;
        w->frame_size = (uint32_t)fs;
        w->level = opt->compression_level ? opt->compression_level : 1;
        w->planes_mode = opt->byte_planes;
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        w->threads = opt->threads > 0 ? opt->threads : cpus < 1 ? 1 : cpus > 16 ? 16 : (int)cpus;
        w->version = 4; /* the flags field, which carries 'compressed', exists from v4 on */
    }
    const tzr_crypt_params *cp = &opt->crypt;
    if (!rc && (cp->key || cp->password)) {
        rc = tzr_crypt_init();
        w->encrypted = 1;
        if (w->version < 3) w->version = 3;
        if (!rc && cp->key) {
            memcpy(w->key, cp->key, 32);
        } else if (!rc) {
            /* tensorizer's EncryptionParams.from_string defaults: MODERATE. */
            w->with_kdf = 1;
            w->opslimit = cp->opslimit ? cp->opslimit : 3;
            w->memlimit = cp->memlimit ? cp->memlimit : 268435456;
            if (cp->salt) memcpy(w->salt, cp->salt, TZR_SALT_BYTES);
            else tzr_random_bytes(w->salt, TZR_SALT_BYTES);
            rc = tzr_crypt_derive(w->key, cp->password, cp->password_len, w->salt, TZR_SALT_BYTES, w->opslimit,
                                  w->memlimit, TZR_ALG_ARGON2ID13);
        }
    }
    if (rc) {
        tzr_writer_abort(w);
        return rc;
    }
    *outp = w;
    return 0;
}

int tzr_writer_open(tzr_writer **out, const char *path, const tzr_writer_options *opt) {
    *out = NULL;
    tzr_output *o;
    tzr_writer_options d = TZR_WRITER_OPTIONS_INIT;
    int direct = opt && opt->struct_size > offsetof(tzr_writer_options, direct) ? opt->direct : d.direct;
    int keep = opt && opt->struct_size > offsetof(tzr_writer_options, no_replace) ? opt->no_replace : d.no_replace;
    unsigned flags = (direct ? TZR_OUTPUT_DIRECT : 0) | (keep ? TZR_OUTPUT_NOREPLACE : 0);
    const struct tzr_http_options *http =
        opt && opt->struct_size > offsetof(tzr_writer_options, http) ? opt->http : NULL;
    int rc = tzr_output_open_path(&o, path, flags, http);
    if (rc) return rc;
    return tzr_writer_open_output(out, o, opt);
}

int tzr_writer_reserve(tzr_writer *w, uint64_t tensors, uint64_t name_bytes, uint64_t dtype_bytes, uint64_t dims,
                       uint64_t data_bytes) {
    if (!w) return tzr_fail(TZR_EINVAL, "NULL writer");
    /* Records start right after the reservation: once one is placed it is fixed. */
    if (w->count) return tzr_fail(TZR_EINVAL, "%s: tzr_writer_reserve after the first tensor", w->out->name);
    if (w->meta_given) return 0; /* the caller's metadata_size is an override */
    /* Entries as formats/tensorizer.md 3 lays them out, packed; a compressed
     * file also keeps its frame directory there (11.5): a 26-byte block per
     * tensor and a u32 per frame, at most data / frame size + 1 each. */
    const uint64_t cap = (uint64_t)1 << 30; /* as metadata_size; every term below then fits */
    int ok = tensors <= cap && name_bytes <= cap && dtype_bytes <= cap && dims <= cap;
    uint64_t need = ok ? 29 * tensors + name_bytes + dtype_bytes + 4 * dims : 0;
    if (ok && w->compress) need += TZR_DIR_PREFIX + (26 + 4) * tensors + 4 * (data_bytes / w->frame_size);
    if (!ok || need > cap)
        return tzr_fail(TZR_ELIMIT, "%s: %llu tensors need an index above 1 GiB", w->out->name,
                        (unsigned long long)tensors);
    if (need <= w->meta_size) return 0; /* tensorizer's 256 KiB suffices: its bytes exactly */
    uint8_t *index = calloc(1, (size_t)need);
    if (!index) return tzr_fail(TZR_ENOMEM, "out of memory");
    free(w->index);
    w->index = index;
    w->meta_size = need;
    w->pos = TZR_PROLOGUE_LEN + need;
    return 0;
}

int writer_put(tzr_writer *w, const void *buf, uint64_t len, uint64_t off) {
    const uint8_t *p = buf;
    while (len > 0) {
        size_t n = len > MAX_WRITE ? MAX_WRITE : (size_t)len;
        int rc = w->out->pwrite_at(w->out, p, n, off);
        if (rc) return rc;
        p += n;
        off += n;
        len -= n;
    }
    return 0;
}

/* Stored bytes [off, off + n) of an encrypted record (off a whole number
 * of crypt chunks): each chunk hashed first when hs is given (plaintext),
 * sealed in the bounce buffer (the caller's data is left untouched) and
 * written at its place, or with dst sealed at dst + off and not written;
 * its MAC into the header. */
static int seal_put(tzr_writer *w, writer_record *rec, const uint8_t *bytes, uint64_t n, uint64_t off,
                    tzr_hasher *hs, uint8_t *bounce, uint8_t *dst) {
    int rc = 0;
    uint64_t chunk = off / TZR_CRYPT_CHUNK;
    for (uint64_t at = 0; at < n && !rc; at += TZR_CRYPT_CHUNK, chunk++) {
        size_t k = n - at < TZR_CRYPT_CHUNK ? (size_t)(n - at) : TZR_CRYPT_CHUNK;
        uint8_t *to = dst ? dst + off + at : bounce;
        if (hs) tzr_hasher_update(hs, bytes + at, k);
        if (to != bytes + at) memmove(to, bytes + at, k);
        rc = tzr_crypt_seal_chunk(rec->nonce, chunk, w->key, to, k,
                                  rec->hdr + rec->slots.macs_at + chunk * TZR_MAC_BYTES);
        if (!rc && !dst) rc = writer_put(w, bounce, k, rec->data_at + off + at);
    }
    return rc;
}

/* Keep a copy of a compression block for the frame directory, as long as
 * the directory can still fit in the index reservation. */
static void dir_add(tzr_writer *w, const uint8_t *block, size_t len) {
    if (w->dir_full) return;
    if (w->dir_len + len > w->meta_size) {
        w->dir_full = 1; /* could never fit: stop copying */
        free(w->dir);
        w->dir = NULL;
        return;
    }
    if (w->dir_len + len > w->dir_cap) {
        size_t cap = w->dir_cap ? 2 * w->dir_cap : 4096;
        while (cap < w->dir_len + len) cap *= 2;
        uint8_t *grown = realloc(w->dir, cap);
        if (!grown) { /* the directory is optional: go without */
            w->dir_full = 1;
            free(w->dir);
            w->dir = NULL;
            return;
        }
        w->dir = grown;
        w->dir_cap = cap;
    }
    memcpy(w->dir + w->dir_len, block, len);
    w->dir_len += len;
}

/* Fix a tensor's record: check the description, build its header (hash
 * and MAC slots still zero) and hash its hashable part, place the record
 * at the end of the file and write its index entry. stored_len: the bytes
 * the record will hold (data_length unless compressed, then z's). The data
 * follows through record_data, then record_end writes the header. */
int writer_record_begin(tzr_writer *w, const tzr_tensor_desc *d, int have_data, const tzr_zdata *z,
                        writer_record *rec) {
    memset(rec, 0, sizeof *rec);
    char nb[TZR_NAMEBUF];
    const char *shown = d->name ? tzr_printable(d->name, d->name_len, nb, sizeof nb) : "";
#define BAD(code, ...)                                                          \
    do {                                                                        \
        char m_[512];                                                           \
        snprintf(m_, sizeof m_, __VA_ARGS__);                                   \
        return tzr_fail(code, "%s: tensor '%s': %s", w->out->name, shown, m_); \
    } while (0)
    if (!d->name || d->name_len == 0) BAD(TZR_EINVAL, "empty name");
    if (d->name_len > 65535) BAD(TZR_ELIMIT, "name is %zu bytes; the format allows 65535", d->name_len);
    int structured;
    if (tzr_name_check(d->name, d->name_len, &structured)) BAD(TZR_EINVAL, "%s", tzr_last_error());
    if (structured && d->type != TZR_STATE_DICT) BAD(TZR_EINVAL, "structured names need type state_dict");
    if ((unsigned)d->type > TZR_STATE_DICT) BAD(TZR_EINVAL, "unknown tensor type %d", (int)d->type);
    size_t dlen = d->dtype_len;
    const char *dstr = d->dtype_str;
    if (!dstr && !(dstr = tzr_dtype_string(d->dtype, &dlen))) BAD(TZR_EINVAL, "unknown dtype");
    if (dlen > 255) BAD(TZR_ELIMIT, "dtype string longer than 255 bytes");
    tzr_dtype dt;
    uint32_t itemsize;
    int opaque;
    if (tzr_dtype_parse(dstr, dlen, &dt, &itemsize, &opaque)) BAD(TZR_EINVAL, "%s", tzr_last_error());
    if (d->ndim > TZR_MAX_DIMS) BAD(TZR_ELIMIT, "%u dimensions; the format allows 255", d->ndim);
    uint64_t numel = 1, nbytes;
    for (uint32_t i = 0; i < d->ndim; i++) {
        if (d->shape[i] > UINT32_MAX) BAD(TZR_ELIMIT, "dimension %u is %llu; the format stores 32-bit dims", i,
                                          (unsigned long long)d->shape[i]);
        if (!tzr_mul_ok(numel, d->shape[i], &numel)) BAD(TZR_ELIMIT, "shape overflows");
    }
    if (!tzr_mul_ok(numel, itemsize, &nbytes)) BAD(TZR_ELIMIT, "byte size overflows");
    if (!d->meta && nbytes && !have_data) BAD(TZR_EINVAL, "NULL data");
    rec->data_length = d->meta ? 0 : nbytes; /* uncompressed */
    rec->itemsize = itemsize;
    if (z == NULL) return 0; /* checks only: the caller compresses, then calls again */
    size_t entry = tzr_index_entry_size(d->name_len, dlen, d->ndim);
    if (entry > w->meta_size - w->index_used)
        BAD(TZR_ELIMIT,
            "index full: entry %llu needs %zu bytes, %llu of the %llu-byte index are left (raise "
            "tzr_writer_options.metadata_size, or declare the tensors first with tzr_writer_reserve)",
            (unsigned long long)w->count, entry, (unsigned long long)(w->meta_size - w->index_used),
            (unsigned long long)w->meta_size);
    int rc = name_set_add(w, d->name, d->name_len);
    if (rc == TZR_EDUP) BAD(TZR_EDUP, "duplicate name");
    if (rc) return rc;

    rec->compressed = z->codec != 0;
    rec->stored_len = z->codec ? z->stored_len : rec->data_length;
    /* Zero-byte tensors in an encrypted file get an empty crypt block, like
     * meta tensors (tensorizer 2.11.1 itself fails on them). */
    rec->enc = w->encrypted && rec->stored_len > 0;
    uint64_t num_macs = rec->enc ? tzr_crypt_num_chunks(rec->stored_len, TZR_CRYPT_CHUNK) : 0;
    if (rec->enc) tzr_random_bytes(rec->nonce, sizeof rec->nonce);
    tzr_header_spec spec = {d->module_idx, (uint8_t)d->type, (const uint8_t *)d->name, (uint16_t)d->name_len,
                            (const uint8_t *)dstr, (uint8_t)dlen, (uint8_t)d->ndim, d->shape,
                            w->encrypted, rec->enc, rec->enc && w->with_kdf, w->opslimit, w->memlimit, w->salt,
                            rec->nonce, num_macs, rec->stored_len, 0, 0, 0, 0, 0, 0, NULL};
    spec.comp_block = w->compress;
    spec.codec = (uint8_t)z->codec;
    spec.planes = (uint8_t)z->planes;
    spec.frame_size = z->frame_size;
    spec.uncompressed_length = rec->data_length;
    spec.nframes = z->nframes;
    spec.frame_sizes = z->frame_sizes;
    rec->hsize = tzr_header_size(&spec);
    rec->hdr = malloc(rec->hsize);
    uint8_t *hashable = malloc(rec->hsize);
    if (!rec->hdr || !hashable) {
        free(hashable);
        free(rec->hdr);
        rec->hdr = NULL;
        return tzr_fail(TZR_ENOMEM, "out of memory");
    }
    tzr_emit_tensor_header(rec->hdr, &spec, &rec->slots);
    /* Hashes cover the hashable header (format.c: hash values zero, blocks
     * cut out), then the plaintext, uncompressed. */
    tzr_tensor_header parsed;
    rc = tzr_parse_tensor_header(rec->hdr, rec->hsize, w->encrypted, w->compress, &parsed);
    size_t hn = rc ? 0 : tzr_hashable_header(rec->hdr, rec->hsize, &parsed, hashable);
    if (!rc) rc = tzr_hasher_init(&rec->hs, !rec->enc, 1);
    if (!rc) {
        rec->hs_live = 1;
        tzr_hasher_update(&rec->hs, hashable, hn);
    }
    free(hashable);
    if (rc) {
        free(rec->hdr);
        rec->hdr = NULL;
        return rc;
    }
    if (w->compress) dir_add(w, rec->hdr + rec->slots.comp_start, rec->slots.comp_end - rec->slots.comp_start);
    rec->hdr_at = w->pos;
    rec->data_at = w->pos + rec->hsize;
    tzr_index_entry e = {(const uint8_t *)d->name, (uint16_t)d->name_len, (uint8_t)d->type, (const uint8_t *)dstr,
                         (uint8_t)dlen, (uint8_t)d->ndim, NULL, rec->hdr_at, rec->data_at, rec->stored_len};
    uint8_t dims[4 * TZR_MAX_DIMS];
    for (uint32_t i = 0; i < d->ndim; i++) tzr_st32(dims + 4 * i, (uint32_t)d->shape[i]);
    e.dims = dims;
    tzr_emit_index_entry(w->index + w->index_used, &e);
    w->index_used += entry;
    w->pos += rec->hsize + rec->stored_len;
    w->tensor_size += rec->stored_len;
    w->count++;
    /* The lowest data version that covers the content. */
    if (opaque && w->version < 2) w->version = 2;
    if (d->meta && w->version < 4) w->version = 4; /* as tensorizer: any meta tensor */
#undef BAD
    return 0;
}

/* Plaintext bytes [off, off + n) of the record's data (uncompressed
 * records), in order: hashed, sealed chunk by chunk when encrypted (off
 * and n whole crypt chunks but for the last), written at their place.
 * bounce: TZR_CRYPT_CHUNK bytes of scratch for encrypted records. */
int writer_record_data(tzr_writer *w, writer_record *rec, const uint8_t *bytes, uint64_t n, uint64_t off,
                       uint8_t *bounce) {
    if (rec->enc) return seal_put(w, rec, bytes, n, off, &rec->hs, bounce, NULL);
    tzr_hasher_update(&rec->hs, bytes, (size_t)n);
    return writer_put(w, bytes, n, rec->data_at + off);
}

int writer_record_fill(tzr_writer *w, writer_record *rec, const uint8_t *bytes, uint64_t n, uint64_t off,
                       uint8_t *dst) {
    if (rec->enc) return seal_put(w, rec, bytes, n, off, &rec->hs, NULL, dst);
    tzr_hasher_update(&rec->hs, bytes, (size_t)n);
    if (dst + off != bytes) memcpy(dst + off, bytes, (size_t)n);
    return 0;
}

static void record_hashes(writer_record *rec) {
    if (rec->hs_live) {
        uint32_t crc = 0;
        uint8_t sha[32];
        tzr_hasher_final(&rec->hs, &crc, sha);
        rec->hs_live = 0;
        if (rec->slots.crc32_at) tzr_st32(rec->hdr + rec->slots.crc32_at, crc);
        memcpy(rec->hdr + rec->slots.sha256_at, sha, 32);
        memcpy(rec->sha256, sha, 32);
    }
}

/* Hashes into the header, the header written; frees the record. */
int writer_record_end(tzr_writer *w, writer_record *rec, int ok) {
    int rc = 0;
    record_hashes(rec);
    if (ok && rec->hdr) rc = writer_put(w, rec->hdr, rec->hsize, rec->hdr_at);
    free(rec->hdr);
    rec->hdr = NULL;
    return rc;
}

void writer_record_end_into(writer_record *rec, uint8_t *dst) {
    record_hashes(rec);
    if (rec->hdr) memcpy(dst, rec->hdr, rec->hsize);
    free(rec->hdr);
    rec->hdr = NULL;
}

static int add_tensor(tzr_writer *w, const tzr_tensor_desc *d, const void *data) {
    writer_record rec;
    int rc = writer_record_begin(w, d, data != NULL, NULL, &rec); /* checks before compressing */
    if (rc) return rc;
    uint64_t data_length = rec.data_length;
    /* Compress first: the stored length decides the crypt block's size. */
    tzr_zdata z;
    memset(&z, 0, sizeof z);
    if (w->compress && data_length) {
        unsigned planes = w->planes_mode == TZR_PLANES_AUTO && (rec.itemsize == 2 || rec.itemsize == 4) ? rec.itemsize : 1;
        rc = tzr_zcompress(w->codec, data, data_length, planes, w->frame_size, w->level, w->threads, &z);
        if (rc) {
            char nb[TZR_NAMEBUF];
            return tzr_fail(rc, "%s: tensor '%s': %s", w->out->name, tzr_printable(d->name, d->name_len, nb, sizeof nb),
                            tzr_last_error());
        }
    }
    rc = writer_record_begin(w, d, data != NULL, &z, &rec);
    if (rc) {
        tzr_zdata_free(&z);
        return rc;
    }
    if (writer_run_takes(w, &rec)) { /* built in the run, written with its neighbours */
        char nb[TZR_NAMEBUF];
        uint8_t *p = writer_run_place(w, &w->run, &rec, tzr_printable(d->name, d->name_len, nb, sizeof nb), &rc);
        if (p && rec.compressed) {
            tzr_hasher_update(&rec.hs, data, (size_t)data_length);
            if (rec.enc) rc = seal_put(w, &rec, z.stored, z.stored_len, 0, NULL, NULL, p + rec.hsize);
            else memcpy(p + rec.hsize, z.stored, z.stored_len);
        } else if (p && data_length) {
            rc = writer_record_fill(w, &rec, data, data_length, 0, p + rec.hsize);
        }
        tzr_zdata_free(&z);
        if (p && !rc) writer_record_end_into(&rec, p);
        else writer_record_end(w, &rec, 0);
        if (!rc) memcpy(w->last_sha256, rec.sha256, 32);
        return rc;
    }
    uint8_t *bounce = rec.enc ? malloc(TZR_CRYPT_CHUNK) : NULL;
    if (rec.enc && !bounce) rc = tzr_fail(TZR_ENOMEM, "out of memory");
    else if (rec.compressed) { /* hashes cover the uncompressed bytes; the stored ones are sealed unhashed */
        tzr_hasher_update(&rec.hs, data, (size_t)data_length);
        rc = rec.enc ? seal_put(w, &rec, z.stored, z.stored_len, 0, NULL, bounce, NULL)
                     : writer_put(w, z.stored, z.stored_len, rec.data_at);
    } else if (data_length) {
        rc = writer_record_data(w, &rec, data, data_length, 0, bounce);
    }
    if (bounce) memset(bounce, 0, TZR_CRYPT_CHUNK);
    free(bounce);
    tzr_zdata_free(&z);
    int erc = writer_record_end(w, &rec, rc == 0);
    if (!rc) rc = erc;
    if (!rc) memcpy(w->last_sha256, rec.sha256, 32);
    return rc;
}

int tzr_writer_add(tzr_writer *w, const tzr_tensor_desc *desc, const void *data) {
    if (!w || !desc) return tzr_fail(TZR_EINVAL, "NULL writer or tensor");
    if (w->failed) return tzr_fail(TZR_ECANCELED, "%s: an earlier write failed", w->out->name);
    int rc = add_tensor(w, desc, data);
    /* Argument errors leave the file consistent; I/O errors do not. */
    if (rc && rc != TZR_EINVAL && rc != TZR_EDUP && rc != TZR_ELIMIT) w->failed = 1;
    return rc;
}

static void writer_release(tzr_writer *w) {
    for (size_t i = 0; i < w->nslots; i++) free(w->names[i]);
    free(w->names);
    free(w->name_lens);
    free(w->index);
    free(w->dir);
    free(w->run.buf);
    memset(w->key, 0, sizeof w->key);
    free(w);
}

int tzr_writer_close(tzr_writer *w) {
    if (!w) return tzr_fail(TZR_EINVAL, "NULL writer");
    int src = writer_stream_finish(w, 0); /* every record's data and header written */
    if (!src && !w->failed) src = writer_run_flush(w, &w->run);
    if (src) {
        tzr_writer_abort(w);
        return src;
    }
    if (w->failed) {
        tzr_writer_abort(w);
        return tzr_fail(TZR_ECANCELED, "write failed earlier; nothing was written");
    }
    uint8_t end[8] = {0};
    tzr_file_header fh = {0};
    fh.version = w->version;
    if (w->encrypted) fh.flags[0] = TZR_FLAG_ENCRYPTED; /* emitted only from v4 on */
    if (w->compress) fh.flags[0] |= TZR_FLAG_COMPRESSED;
    fh.tensor_size = w->tensor_size;
    fh.tensor_count = w->count;
    fh.metadata_len = w->meta_size;
    uint8_t pro[TZR_PROLOGUE_LEN];
    tzr_emit_prologue(pro, &fh);
    /* The frame directory goes in the reservation after the entries, when
     * it fits; readers without it read every header before planning. */
    if (w->compress && !w->dir_full && w->count && w->meta_size - w->index_used >= TZR_DIR_PREFIX &&
        w->dir_len <= w->meta_size - w->index_used - TZR_DIR_PREFIX) {
        memcpy(w->index + w->index_used, TZR_DIR_MAGIC, 8);
        tzr_st64(w->index + w->index_used + 8, w->dir_len);
        if (w->dir_len) memcpy(w->index + w->index_used + TZR_DIR_PREFIX, w->dir, w->dir_len);
    }
    int rc = writer_put(w, end, 8, w->pos);
    if (!rc) rc = writer_put(w, w->index, w->meta_size, TZR_PROLOGUE_LEN);
    if (!rc) rc = writer_put(w, pro, TZR_PROLOGUE_LEN, 0);
    if (!rc) rc = w->out->finish(w->out);
    {
        TZR_KEEP_ERROR; /* neither abort nor destroy may replace the failure */
        if (rc) w->out->abort(w->out);
        w->out->destroy(w->out);
        writer_release(w);
    }
    return rc;
}

void tzr_writer_abort(tzr_writer *w) {
    TZR_KEEP_ERROR;
    if (!w) return;
    writer_stream_finish(w, 1);
    if (w->out) {
        w->out->abort(w->out);
        w->out->destroy(w->out);
    }
    writer_release(w);
}

void tzr_writer_last_sha256(const tzr_writer *w, uint8_t out[32]) { memcpy(out, w->last_sha256, 32); }
