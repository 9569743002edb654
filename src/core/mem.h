#ifndef TZR_MEM_H
#define TZR_MEM_H
#include "internal.h"
/* malloc for large buffers: from 256 KiB on, 2 MiB aligned and huge-page
 * advised throughout; free() frees. */
TZR_HIDDEN void *tzr_alloc_big(size_t len);
/* madvise the align-aligned pages that lie wholly inside [p, p+len)
 * (align: a power of two); errors are ignored, as advice is optional. */
TZR_HIDDEN void tzr_advise_inside(void *p, size_t len, size_t align, int advice);
/* Zeroed and overflow-checked; from 256 KiB on, laid out as
 * tzr_alloc_big. */
TZR_HIDDEN void *tzr_calloc_big(size_t n, size_t size);
/* Zeroed n * size bytes laid out as tzr_alloc_big, from a fresh mapping
 * (no memset: its pages are zero); freed only by tzr_unmap_zeroed with the
 * same n and size. */
TZR_HIDDEN void *tzr_map_zeroed(size_t n, size_t size);
TZR_HIDDEN void tzr_unmap_zeroed(void *p, size_t n, size_t size);
/* A larger copy of p (old_len bytes kept); p is freed. NULL on failure
 * (p is then untouched). */
TZR_HIDDEN void *tzr_grow_big(void *p, size_t old_len, size_t new_len);

/* Bump allocator for many small objects freed together. Not thread-safe.
 * Blocks grow from 64 KiB to 2 MiB: a small file never touches (and pays
 * first-touch faults for) more than it uses. */
#define TZR_ARENA_FIRST ((size_t)64 << 10)
#define TZR_ARENA_BLOCK ((size_t)2 << 20)
typedef struct tzr_arena {
    void *blocks;
    uint8_t *next;
    size_t left;
    size_t block_size; /* of the next block; 0: TZR_ARENA_FIRST; a caller
                          that knows what it will need may set it */
} tzr_arena;
TZR_HIDDEN void *tzr_arena_alloc(tzr_arena *a, size_t len);
TZR_HIDDEN void tzr_arena_free(tzr_arena *a);
/* Hand from's blocks to a (freed with a); from is left empty. What was
 * allocated in from stays where it is. */
TZR_HIDDEN void tzr_arena_adopt(tzr_arena *a, tzr_arena *from);
#endif
