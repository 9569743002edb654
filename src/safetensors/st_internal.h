/* What the reader may take from a parsed safetensors file. */
#ifndef TZR_ST_INTERNAL_H
#define TZR_ST_INTERNAL_H
#include "mem.h"
#include "tzr_safetensors.h"

/* The smallest tensor entry, "a":{"dtype":"U8","shape":[],"data_offsets":[0,0]},
 * is 50 bytes: a header of n bytes holds at most n / 50 + 1 of them. */
#define TZR_ST_MIN_ENTRY 50

/* Move the memory holding every tensor's name and shape into `into`:
 * those pointers then live as long as `into`, not f. Nothing else of f
 * changes; tzr_st_find, tzr_st_get stay valid only while both live. */
TZR_HIDDEN void tzr_st_take_strings(tzr_st_file *f, tzr_arena *into);

/* tzr_st_parse_header without a table of its own: put gets each tensor
 * entry once it is parsed and checked alone, i counting from 0 in JSON
 * order, t valid only during the call (its name and shape live in f's
 * strings). A failed fast scan is retried by the tree parse, which calls
 * put from i = 0 again: an i of 0 starts the table over (and head is as
 * it was given again). A nonzero return
 * from put ends the parse with it. The caller checks what spans entries
 * (file order, duplicate names, overlaps: tzr_st_fail_dup and
 * tzr_st_fail_overlap word those failures as the parse does). f then
 * holds no tensors (tzr_st_count says how many were put, tzr_st_get and
 * tzr_st_find find none), only the metadata and the strings. For the
 * reader, whose own table was a copy of the parse's: 18 MB for 100k
 * tensors, and a second name hash table. */
typedef int (*tzr_st_put_fn)(void *ctx, size_t i, const tzr_st_tensor *t);
/* in_place: NULL, or head itself, writable and kept by the caller as long
 * as the names put are used: a plain name (printable ASCII, no escape) is
 * then its bytes in head, its closing quote overwritten by a NUL, not a
 * copy in f's strings (other names are still decoded into them). */
TZR_HIDDEN int tzr_st_parse_header_each(tzr_st_file **out, const void *head, size_t have, uint64_t file_size,
                                        const char *name, tzr_st_put_fn put, void *ctx, void *in_place);
/* The failures of a duplicate name, and of t's bytes overlapping those of
 * an earlier tensor in file order. */
TZR_HIDDEN int tzr_st_fail_dup(const tzr_st_file *f, const char *name, size_t len);
TZR_HIDDEN int tzr_st_fail_overlap(const tzr_st_file *f, const tzr_st_tensor *t, const tzr_st_tensor *earlier);
#endif
