/* What the pipelined loader needs from the reader beyond the public API. */
#ifndef TZR_READER_INTERNAL_H
#define TZR_READER_INTERNAL_H

#include "format.h"
#include "hash.h"

/* The parsed header of tensor i, reading it from the source on first use.
 * Thread-safe. */
TZR_HIDDEN int tzr_reader_header(tzr_reader *r, size_t i, const tzr_tensor_header **h);
/* Hand over header bytes the caller already read (a coalesced read);
 * parsed and checked against the index exactly like a fresh read. */
TZR_HIDDEN int tzr_reader_install_header(tzr_reader *r, size_t i, const uint8_t *bytes, size_t len);
/* Check header bytes against the index and record the module index, without
 * keeping a copy: for loads that will not need the header again (no
 * verification; plaintext, uncompressed). A later tzr_reader_header reads
 * it from the source. */
TZR_HIDDEN int tzr_reader_check_header(tzr_reader *r, size_t i, const uint8_t *bytes, size_t len);
/* Read the headers of tensors [from, to) not yet read (only those with
 * want[i] set when want is given), coalescing nearby ones into one read. */
/* Tensor i's compression block: from the frame directory when the file
 * has one (no read), else from its header (read if needed). */
TZR_HIDDEN int tzr_reader_comp(tzr_reader *r, size_t i, const tzr_comp_info **ci);
/* Tensor i's header has been read, checked and kept. */
TZR_HIDDEN int tzr_reader_has_header(tzr_reader *r, size_t i);
/* The file carries a frame directory: compression blocks known at open. */
TZR_HIDDEN int tzr_reader_has_dir(const tzr_reader *r);
TZR_HIDDEN int tzr_reader_load_headers(tzr_reader *r, size_t from, size_t to, const unsigned char *want);
/* The 32-byte key for an encrypted tensor (derived and cached). */
TZR_HIDDEN int tzr_reader_tensor_key(tzr_reader *r, size_t i, uint8_t key[32]);
/* After tensor `failed` did not decrypt: whether the key opens others.
 * *opens = 1 when one of the (up to 3) smallest other encrypted tensors
 * decrypts, 0 when none does, -1 when there is no other to try. Reads
 * the first crypt chunk of each. */
/* Reads and checks the end-of-tensors marker unless done (open does it
 * except where reads are requests). Thread-safe. */
TZR_HIDDEN int tzr_reader_check_end_marker(tzr_reader *r);
TZR_HIDDEN int tzr_reader_key_opens_others(tzr_reader *r, size_t failed, int *opens);
/* Start a hash of tensor i: feeds the hashable header. sha == 0: CRC32
 * only (TZR_VERIFY_CRC32), SHA-256 where a tensor has nothing else. */
TZR_HIDDEN int tzr_reader_hash_begin(tzr_reader *r, size_t i, int sha, tzr_hasher *hs);
/* tzr_reader_hash_begin over the header bytes (len) the caller holds, with
 * nothing kept: they are checked against the index and parsed into *h,
 * which must outlive hs (a verify of many small tensors spent its time
 * copying each header into the reader's cache under its lock). */
TZR_HIDDEN int tzr_reader_hash_begin_bytes(tzr_reader *r, size_t i, const uint8_t *bytes, size_t len, int sha,
                                           tzr_hasher *hs, tzr_tensor_header *h);
/* Finish and compare with the stored hashes (frees hs). */
TZR_HIDDEN int tzr_reader_hash_check(tzr_reader *r, size_t i, tzr_hasher *hs);
/* The same against h, the header hs was begun with by hash_begin_bytes. */
TZR_HIDDEN int tzr_reader_hash_check_with(tzr_reader *r, size_t i, const tzr_tensor_header *h, tzr_hasher *hs);
TZR_HIDDEN int tzr_reader_verifying(const tzr_reader *r);
/* From now on, every header r checks leaves its tensor's SHA-256 (as the
 * header states it) in a table of 33 bytes a tensor, for a caller that
 * asks afterwards (a shard set's check against its manifest): keeping the
 * whole headers cost 30 MB and two lock sections a tensor for 100k. 0 or
 * TZR_ENOMEM. */
TZR_HIDDEN int tzr_reader_want_header_sha(tzr_reader *r);
/* The SHA-256 tensor i's header states: 0 with *has (1: in out), from the
 * table, a kept header, or (neither) its header read now; else the error. */
TZR_HIDDEN int tzr_reader_header_sha(tzr_reader *r, size_t i, uint8_t out[32], int *has);
/* Sums over every tensor, made at open: of nbytes, of data_length, and the
 * count of tensors without data. 0 when known, else nonzero (a sum
 * overflowed): then a caller adds them up itself. */
TZR_HIDDEN int tzr_reader_totals(const tzr_reader *r, uint64_t *nbytes, uint64_t *stored, size_t *empty);
/* "file: tensor 'name'" prefix for messages. */
TZR_HIDDEN const char *tzr_reader_what(const tzr_reader *r, size_t i, char *buf, size_t cap);

#endif
