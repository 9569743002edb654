/* The loader's planning part (see pipeline.h): the selected tensors'
 * bytes cut into units (one read each) and pieces (a tensor's bytes in a
 * unit), as the plan_policy says: per tensor by kind (compressed frames,
 * byte selections, plain or encrypted data), and the data stream by the
 * source's cost (local reads or costly requests). */
#include "codec.h"
#include "mem.h"
#include "pipeline.h"

#include <string.h>

static int add_piece(pipeline *p, size_t *cap, size_t tensor, uint64_t toff, uint64_t len, uint64_t uoff) {
    if (p->npieces == *cap) {
        if (p->plan_fixed) return tzr_fail(TZR_EIO, "internal error: plan above its bound (%zu pieces)", *cap);
        size_t nc = *cap ? *cap * 2 : 256;
        piece *np = tzr_grow_big(p->pieces, *cap * sizeof *np, nc * sizeof *np);
        if (!np) return tzr_fail(TZR_ENOMEM, "out of memory");
        p->pieces = np;
        *cap = nc;
    }
    piece *pc = &p->pieces[p->npieces++];
    memset(pc, 0, sizeof *pc);
    pc->tensor = tensor;
    pc->toff = toff;
    pc->len = len;
    pc->uoff = uoff;
    pc->unit = p->nunits;
    return 0;
}

static int add_unit(pipeline *p, size_t *cap, uint64_t off, uint64_t len, size_t first) {
    if (p->nunits == *cap) {
        if (p->plan_fixed) return tzr_fail(TZR_EIO, "internal error: plan above its bound (%zu units)", *cap);
        size_t nc = *cap ? *cap * 2 : 256;
        unit *nu = tzr_grow_big(p->units, *cap * sizeof *nu, nc * sizeof *nu);
        if (!nu) return tzr_fail(TZR_ENOMEM, "out of memory");
        p->units = nu;
        *cap = nc;
    }
    unit *un = &p->units[p->nunits++];
    if (len > p->slot_size) p->slot_size = (size_t)len;
    un->off = off;
    un->len = len;
    un->first = first;
    un->count = p->npieces - first;
    atomic_init(&un->left, un->count);
    un->kind = UNIT_STAGED;
    un->expand_in_place = 0;
    un->f0 = un->f1 = un->skip = un->first_chunk = un->hdr_len = 0;
    return 0;
}

/* How many bytes of tensor i decrypt as one: 0 when it is not encrypted,
 * else its crypt chunk, or the whole box when it carries one MAC. */
static int crypt_granule(pipeline *p, size_t i, uint64_t *cs) {
    const tzr_tensor_info *t = tzr_reader_tensor(p->r, i);
    *cs = 0;
    if (!t->encrypted) return 0;
    const tzr_tensor_header *h;
    int rc = tzr_reader_header(p->r, i, &h);
    if (!rc) *cs = h->crypt.num_macs > 1 ? h->crypt.chunk_size : t->data_length;
    return rc;
}

/* Units for the selected bytes of tensor i (plaintext or encrypted, not
 * verified): each run widened to whole crypt chunks, runs less than
 * MAX_GAP apart read together, at most `step` bytes a unit. A piece covers
 * its unit; delivery keeps only the selection. */
static int emit_span(pipeline *p, size_t i, uint64_t lo, uint64_t hi, uint64_t step, size_t *pcap, size_t *ucap) {
    const tzr_tensor_info *t = tzr_reader_tensor(p->r, i);
    int rc = 0;
    for (uint64_t off = lo; off < hi && !rc; off += step) {
        uint64_t len = hi - off < step ? hi - off : step;
        size_t first = p->npieces;
        rc = add_piece(p, pcap, i, off, len, 0);
        if (!rc) rc = add_unit(p, ucap, t->data_offset + off, len, first);
        p->ts[i].pieces_total++;
    }
    return rc;
}

static int plan_selected(pipeline *p, size_t i, const plan_policy *pol, size_t *pcap, size_t *ucap) {
    size_t chunk = pol->chunk;
    const tzr_tensor_info *t = tzr_reader_tensor(p->r, i);
    const tzr_byte_selection *sel = selection(p, i);
    uint64_t cs, step = chunk;
    int rc = crypt_granule(p, i, &cs);
    if (cs) step = cs >= chunk ? cs : chunk - chunk % cs;
    uint64_t lo = 0, hi = 0;
    int open = 0;
    for (uint64_t r = 0; r < sel_runs(sel) && !rc; r++) {
        uint64_t a = sel_run_at(sel, r), b = a + sel->run;
        if (cs) {
            a = a / cs * cs;
            b = b % cs ? b - b % cs + cs : b;
            if (b > t->data_length) b = t->data_length;
        }
        if (open && a < hi) a = hi; /* a crypt chunk already read */
        if (a >= b) continue;
        if (open && a - hi <= MAX_GAP && b - lo <= step) {
            hi = b;
            continue;
        }
        if (open) rc = emit_span(p, i, lo, hi, step, pcap, ucap);
        lo = a;
        hi = b;
        open = 1;
    }
    if (!rc && open) rc = emit_span(p, i, lo, hi, step, pcap, ucap);
    return rc;
}

/* Read only the selection: plaintext or encrypted tensors not verified. */
int load_plans_selected(const pipeline *p, const tzr_tensor_info *t, size_t i) {
    return selection(p, i) && !p->verify && !tzr_codec_find(t->compression);
}

/* Units of whole frames for a compressed tensor (see the top comment). */
static int plan_compressed(pipeline *p, size_t i, const plan_policy *pol, size_t *pcap, size_t *ucap) {
    size_t chunk = pol->chunk, ring = pol->ring;
    const tzr_tensor_info *t = tzr_reader_tensor(p->r, i);
    const tzr_comp_info *ci;
    int rc = tzr_reader_comp(p->r, i, &ci);
    if (rc) return rc;
    uint64_t cs;
    if ((rc = crypt_granule(p, i, &cs))) return rc;
    /* Without phase 1 (a frame directory gave the tables), the first unit
     * also reads the header, which is checked and kept before its frames
     * are expanded (headers too large to ride along were read in phase 1). */
    uint64_t hdr_len = tzr_reader_has_header(p->r, i) ? 0 : t->data_offset - t->header_offset;
    /* Stored bytes per unit: the chunk; with encryption at least 4 crypt
     * chunks, since the read is widened to whole chunks and a boundary
     * chunk is read by both neighbours (overhead <= cs / smax). Expanded
     * bytes per unit: twice that, or one frame. */
    uint64_t smax = chunk;
    if (cs) {
        uint64_t want = 4 * cs < ring / 8 ? 4 * cs : ring / 8; /* within budget where it can */
        if (want < cs) want = cs;
        if (want > smax) smax = want;
    }
    uint64_t umax = 2 * smax > ci->frame_size ? 2 * smax : ci->frame_size;
    uint64_t f = 0, soff = 0;
    /* The load ends with the last units' decompression, one thread per
     * unit: the last compressed tensor ends in single-frame units, so that
     * tail is one frame's work spread over the threads, not several. */
    /* (Not when encrypted: each unit is widened to whole crypt chunks, and
     * single frames would read and decrypt a shared chunk many times.) */
    int taper = i == pol->last_comp && !cs;
    uint64_t single_from = !taper                               ? ci->nframes
                           : ci->nframes > (uint64_t)pol->taper ? ci->nframes - (uint64_t)pol->taper
                                                                : 0;
    while (f < ci->nframes && !rc) {
        uint64_t f1 = f + 1, s1 = soff + tzr_comp_frame(ci, f);
        while (f1 < ci->nframes && f1 < single_from && s1 + tzr_comp_frame(ci, f1) - soff <= smax &&
               tzr_zframes_len(ci, f, f1 + 1) <= umax)
            s1 += tzr_comp_frame(ci, f1++);
        uint64_t lo = soff, hi = s1;
        if (cs) {
            lo = soff / cs * cs;
            hi = (s1 + cs - 1) / cs * cs;
            if (hi > t->data_length) hi = t->data_length;
        }
        uint64_t ulen = tzr_zframes_len(ci, f, f1);
        uint64_t with_hdr = f == 0 ? hdr_len : 0;
        size_t first = p->npieces;
        rc = add_piece(p, pcap, i, f * ci->frame_size, ulen, 0);
        if (!rc) rc = add_unit(p, ucap, t->data_offset + lo - with_hdr, hi - lo + with_hdr, first);
        if (rc) break;
        unit *un = &p->units[p->nunits - 1];
        un->kind = UNIT_FRAMES;
        un->f0 = f;
        un->f1 = f1;
        un->skip = with_hdr + soff - lo;
        un->hdr_len = with_hdr;
        un->first_chunk = cs ? lo / cs : 0;
        p->ts[i].pieces_total++;
        if (ulen > p->zout_max) p->zout_max = (size_t)ulen;
        if (ci->planes > 1 && ci->frame_size > p->zscratch_max) p->zscratch_max = ci->frame_size;
        f = f1;
        soff = s1;
    }
    return rc;
}

/* Sources with costly reads (pack_reads): the data stream is cut into
 * reads of `chunk` bytes wherever the layout allows, so a read usually
 * holds the tail of one tensor, small tensors whole and the head of the
 * next. A unit that would hold one tensor's chunk alone starts at its
 * data (read in place, no copy) unless headers are wanted (verify). */
/* Close the open pack of small compressed tensors (see plan_packed). */
static int close_pack(pipeline *p, size_t *ucap, int *zopen, uint64_t zoff, uint64_t zend, size_t zfirst,
                      uint64_t zulen) {
    if (!*zopen) return 0;
    *zopen = 0;
    int rc = add_unit(p, ucap, zoff, zend - zoff, zfirst);
    if (rc) return rc;
    unit *un = &p->units[p->nunits - 1];
    un->kind = UNIT_PACK;
    if (zulen > p->zout_max) p->zout_max = (size_t)zulen;
    return 0;
}

static int plan_packed(pipeline *p, const plan_policy *pol, size_t *pcap, size_t *ucap) {
    size_t chunk = pol->chunk;
    int open = 0, rc = 0;
    uint64_t uoff = 0, uend = 0;
    size_t ufirst = 0;
    /* Small compressed tensors whose records lie back to back share a read
     * (a pack), as small plaintext tensors do: a request each would cost a
     * round trip each (norm weights are a few KiB). Not when encrypted:
     * their crypt chunks are per tensor. */
    int zopen = 0;
    uint64_t zoff = 0, zend = 0, zulen = 0;
    size_t zfirst = 0;
    for (size_t i = 0; i < p->n && !rc; i++) {
        if (!p->want[i]) continue;
        const tzr_tensor_info *t = tzr_reader_tensor(p->r, i);
        if (t->data_length == 0) continue;
        if (tzr_codec_find(t->compression)) {
            if (open && (rc = add_unit(p, ucap, uoff, uend - uoff, ufirst))) break;
            open = 0;
            uint64_t hlen = t->data_offset - t->header_offset;
            int small = !tzr_reader_encrypted(p->r) && t->data_length <= chunk / 8 && t->nbytes <= chunk / 4 &&
                        hlen <= MAX_INLINE_HEADER;
            if (small && zopen && (t->header_offset != zend || t->data_offset + t->data_length - zoff > chunk ||
                                   zulen + t->nbytes > 2 * (uint64_t)chunk))
                rc = close_pack(p, ucap, &zopen, zoff, zend, zfirst, zulen);
            if (rc) break;
            if (!small) {
                if ((rc = close_pack(p, ucap, &zopen, zoff, zend, zfirst, zulen))) break;
                rc = plan_compressed(p, i, pol, pcap, ucap);
                continue;
            }
            if (!zopen) {
                zopen = 1;
                zoff = t->header_offset;
                zfirst = p->npieces;
                zulen = 0;
            }
            const tzr_comp_info *ci;
            if ((rc = tzr_reader_comp(p->r, i, &ci))) break;
            if (ci->planes > 1 && ci->frame_size > p->zscratch_max) p->zscratch_max = ci->frame_size;
            rc = add_piece(p, pcap, i, 0, t->nbytes, zulen);
            p->ts[i].pieces_total = 1;
            zulen += t->nbytes;
            zend = t->data_offset + t->data_length;
            continue;
        }
        if ((rc = close_pack(p, ucap, &zopen, zoff, zend, zfirst, zulen))) break;
        if (load_plans_selected(p, t, i)) {
            if (open && (rc = add_unit(p, ucap, uoff, uend - uoff, ufirst))) break;
            open = 0;
            rc = plan_selected(p, i, pol, pcap, ucap);
            continue;
        }
        uint64_t cs; /* pieces hold whole crypt chunks (or the whole box) */
        if ((rc = crypt_granule(p, i, &cs))) break;
        uint64_t toff = 0;
        while (toff < t->data_length && !rc) {
            uint64_t dstart = t->data_offset + toff, left = t->data_length - toff;
            /* A tensor's first piece joins the open unit across its header. */
            if (open && toff == 0 &&
                (t->header_offset < uend || t->header_offset - uend > MAX_GAP || dstart >= uoff + chunk)) {
                if ((rc = add_unit(p, ucap, uoff, uend - uoff, ufirst))) break;
                open = 0;
            }
            if (!open) {
                uoff = toff == 0 && (left < chunk || p->verify) ? t->header_offset : dstart;
                if (dstart - uoff >= chunk) uoff = dstart; /* a header larger than a read */
                ufirst = p->npieces;
                open = 1;
            }
            uint64_t len = uoff + chunk - dstart;
            if (len > left) len = left;
            if (cs && len < left) len -= len % cs;
            if (len == 0 && p->npieces > ufirst) { /* no whole crypt chunk fits: next unit */
                if ((rc = add_unit(p, ucap, uoff, uend - uoff, ufirst))) break;
                open = 0;
                continue;
            }
            if (len == 0) len = left < cs ? left : cs; /* one crypt chunk above `chunk` */
            rc = add_piece(p, pcap, i, toff, len, dstart - uoff);
            p->ts[i].pieces_total++;
            uend = dstart + len;
            toff += len;
            if (!rc && uend - uoff >= chunk) {
                rc = add_unit(p, ucap, uoff, uend - uoff, ufirst);
                open = 0;
            }
        }
    }
    if (!rc && open) rc = add_unit(p, ucap, uoff, uend - uoff, ufirst);
    if (!rc) rc = close_pack(p, ucap, &zopen, zoff, zend, zfirst, zulen);
    return rc;
}

/* Local files (cheap reads): small tensors (under COALESCE_MAX) next to
 * each other coalesce into one read from the first one's header; larger
 * ones are read on their own, in `chunk` pieces (whole crypt chunks),
 * straight into host destinations where the sink allows. Resumable: runs
 * until `target` units exist (st keeps the open unit), so overlapped
 * planning publishes units while it goes on; the open unit is closed
 * once every tensor is planned. */
int load_plan_local_step(pipeline *p, const plan_policy *pol, plan_state *st, size_t target) {
    size_t chunk = pol->chunk;
    int rc = 0;
    for (; st->i < p->n && !rc && p->nunits < target; st->i++) {
        size_t i = st->i;
        if (!p->want[i]) continue;
        const tzr_tensor_info *t = tzr_reader_tensor(p->r, i);
        if (t->data_length == 0) continue;
        int coded = tzr_codec_find(t->compression) != NULL;
        if (coded || load_plans_selected(p, t, i)) {
            if (st->open_unit && (rc = add_unit(p, &st->ucap, st->uoff, st->uend - st->uoff, st->ufirst))) break;
            st->open_unit = 0;
            rc = coded ? plan_compressed(p, i, pol, &st->pcap, &st->ucap) : plan_selected(p, i, pol, &st->pcap, &st->ucap);
            continue;
        }
        uint64_t step = chunk, cs;
        /* Pieces must hold whole crypt chunks (or the whole box). */
        if ((rc = crypt_granule(p, i, &cs))) break;
        if (cs) step = cs >= chunk ? cs : chunk - chunk % cs;
        uint64_t dend = t->data_offset + t->data_length;
        if (t->data_length <= step && t->data_length <= chunk) {
            int small = t->data_length < COALESCE_MAX;
            if (small && st->open_unit && t->header_offset >= st->uend && t->header_offset - st->uend <= MAX_GAP &&
                dend - st->uoff <= chunk) {
                rc = add_piece(p, &st->pcap, i, 0, t->data_length, t->data_offset - st->uoff);
                st->uend = dend;
                p->ts[i].pieces_total = 1;
                continue;
            }
            if (st->open_unit && (rc = add_unit(p, &st->ucap, st->uoff, st->uend - st->uoff, st->ufirst))) break;
            /* Slots sized before planning (overlapped): a header too large
             * to ride along in one is left out of the read, as for tensors
             * read on their own. */
            if (small && st->slot_cap && dend - t->header_offset > st->slot_cap) small = 0;
            st->open_unit = small;
            if (!small) {
                size_t first = p->npieces;
                rc = add_piece(p, &st->pcap, i, 0, t->data_length, 0);
                if (!rc) rc = add_unit(p, &st->ucap, t->data_offset, t->data_length, first);
                p->ts[i].pieces_total = 1;
                continue;
            }
            /* A coalesced unit starts at its first header: every tensor in
             * it then has its header in the same read. */
            st->uoff = t->header_offset;
            st->uend = dend;
            st->ufirst = p->npieces;
            rc = add_piece(p, &st->pcap, i, 0, t->data_length, t->data_offset - st->uoff);
            p->ts[i].pieces_total = 1;
            continue;
        }
        if (st->open_unit && (rc = add_unit(p, &st->ucap, st->uoff, st->uend - st->uoff, st->ufirst))) break;
        st->open_unit = 0;
        for (uint64_t off = 0; off < t->data_length && !rc; off += step) {
            uint64_t len = t->data_length - off < step ? t->data_length - off : step;
            size_t first = p->npieces;
            rc = add_piece(p, &st->pcap, i, off, len, 0);
            if (!rc) rc = add_unit(p, &st->ucap, t->data_offset + off, len, first);
            p->ts[i].pieces_total++;
        }
    }
    if (!rc && st->i >= p->n && st->open_unit) {
        rc = add_unit(p, &st->ucap, st->uoff, st->uend - st->uoff, st->ufirst);
        st->open_unit = 0;
    }
    return rc;
}

/* Tensors below this index are planned whole (their units all closed). */
size_t load_plan_local_done_below(const pipeline *p, const plan_state *st) {
    return st->open_unit ? p->pieces[st->ufirst].tensor : st->i;
}

/* Room for the plan up front. exact: local plaintext pieces are at most
 * one per tensor plus one per chunk of its data, units no more, so the
 * arrays never move (overlapped planning: workers read them meanwhile). */
int load_plan_begin(pipeline *p, const plan_policy *pol, plan_state *st, int exact) {
    memset(st, 0, sizeof *st);
    size_t est = exact ? 16 + p->nselected + (size_t)(p->stored_bytes / pol->chunk)
                       : 16 + p->nselected + (size_t)(p->stored_bytes / (pol->chunk / 2));
    if (!exact && est > ((size_t)1 << 22)) est = (size_t)1 << 22; /* beyond that, doubling */
    if ((p->pieces = tzr_alloc_big(est * sizeof *p->pieces))) st->pcap = est;
    if ((p->units = tzr_alloc_big(est * sizeof *p->units))) st->ucap = est;
    if (exact && (!p->pieces || !p->units)) return tzr_fail(TZR_ENOMEM, "out of memory");
    p->plan_fixed = exact;
    return 0;
}

int load_plan(pipeline *p, const plan_policy *pol) {
    /* Room for the usual plan up front (one piece per tensor plus one per
     * chunk; more grows by doubling): growing from small copies the
     * arrays a dozen times on 100k-tensor files. */
    plan_state st;
    load_plan_begin(p, pol, &st, 0);
    /* Each piece already names its unit (add_piece): units close in order,
     * each taking the pieces added since the one before; a pass setting
     * them again went over every piece (4.8 MB for 100k tensors). */
    if (pol->pack_reads) return plan_packed(p, pol, &st.pcap, &st.ucap);
    return load_plan_local_step(p, pol, &st, SIZE_MAX);
}
