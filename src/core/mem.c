/* Memory for large buffers and tables. First-touch page faults, not the
 * copy, bound loads into fresh memory on many machines (a 4 KiB fault costs
 * microseconds on the VMs we measured), so large allocations sit on 2 MiB
 * boundaries with transparent huge pages asked for, and many small objects
 * (names, headers) come from one bump arena instead of malloc each. */
#include "internal.h"
#include "mem.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)
/* From here on, buffers get huge pages: touching 64 KiB of fresh 4 KiB
 * pages already costs more than clearing one 2 MiB page on the VMs we
 * measured (13-15 us a fault against ~150 us a huge page). */
#define BIG_MIN ((size_t)256 << 10)

void *tzr_alloc_big(size_t len) {
    if (len < BIG_MIN) {
        /* Page-aligned, so staging slots can take O_DIRECT reads. */
        void *p = NULL;
        return posix_memalign(&p, 4096, len ? len : 1) == 0 ? p : NULL;
    }
    /* Whole huge pages from the first byte to the last: an unaligned start
     * or end would be served by 4 KiB pages, each a fault of its own.
     * Untouched bytes of the last one cost address space, not memory. */
    if (len > SIZE_MAX - HUGE_PAGE) return NULL;
    size_t span = (len + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *p = NULL;
    if (posix_memalign(&p, HUGE_PAGE, span) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, span, MADV_HUGEPAGE);
#endif
    return p;
}

void tzr_advise_inside(void *p, size_t len, size_t align, int advice) {
    uintptr_t lo = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
    uintptr_t hi = ((uintptr_t)p + len) & ~(uintptr_t)(align - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, advice);
}

void *tzr_calloc_big(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    size_t len = n * size;
    if (len < BIG_MIN) return calloc(n ? n : 1, size ? size : 1);
    /* Huge pages throughout (see tzr_alloc_big), then zeroed: calloc's
     * fresh pages need no memset, but calloc cannot align them, and its
     * unaligned head and tail cost hundreds of 4 KiB faults. The tables
     * this serves are written in full anyway. */
    uint8_t *p = tzr_alloc_big(len);
    if (p) memset(p, 0, len);
    return p;
}

void *tzr_grow_big(void *p, size_t old_len, size_t new_len) {
    void *q = tzr_alloc_big(new_len);
    if (!q) return NULL;
    if (p && old_len) memcpy(q, p, old_len < new_len ? old_len : new_len);
    free(p);
    return q;
}

typedef struct arena_block {
    struct arena_block *next;
} arena_block;

void *tzr_arena_alloc(tzr_arena *a, size_t len) {
    len = (len + 15) & ~(size_t)15;
    if (len > a->left) {
        size_t grow = a->block_size ? a->block_size : TZR_ARENA_FIRST;
        size_t size = len + sizeof(arena_block) + 16 > grow ? len + sizeof(arena_block) + 16 : grow;
        arena_block *b = size >= BIG_MIN ? tzr_alloc_big(size) : malloc(size);
        if (!b) return NULL;
        a->block_size = grow < TZR_ARENA_BLOCK ? 2 * grow : grow;
        b->next = a->blocks;
        a->blocks = b;
        a->next = (uint8_t *)b + ((sizeof *b + 15) & ~(size_t)15);
        a->left = size - (size_t)(a->next - (uint8_t *)b);
    }
    void *p = a->next;
    a->next += len;
    a->left -= len;
    return p;
}

void tzr_arena_free(tzr_arena *a) {
    arena_block *b = a->blocks;
    while (b) {
        arena_block *next = b->next;
        free(b);
        b = next;
    }
    memset(a, 0, sizeof *a);
}

void tzr_arena_adopt(tzr_arena *a, tzr_arena *from) {
    arena_block *b = from->blocks;
    if (!b) return;
    while (b->next) b = b->next;
    /* Behind a's current block: a goes on allocating from that one. */
    arena_block *head = a->blocks;
    if (head) {
        b->next = head->next;
        head->next = from->blocks;
    } else {
        b->next = NULL;
        a->blocks = from->blocks;
    }
    memset(from, 0, sizeof *from);
}

/* Fresh anonymous mappings are zero already: calloc_big's memset of a
 * 18 MB table (100k tensors) was a whole extra pass of writes. */
void *tzr_map_zeroed(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    size_t len = n * size;
    if (len < BIG_MIN) return calloc(n ? n : 1, size ? size : 1);
    if (len > SIZE_MAX - 2 * HUGE_PAGE) return NULL;
    size_t span = (len + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    uint8_t *m = mmap(NULL, span + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    /* Keep the huge-page-aligned span (see tzr_alloc_big), return the rest. */
    uint8_t *p = (uint8_t *)(((uintptr_t)m + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (p > m) munmap(m, (size_t)(p - m));
    if (p + span < m + span + HUGE_PAGE) munmap(p + span, (size_t)(m + span + HUGE_PAGE - (p + span)));
#ifdef MADV_HUGEPAGE
    madvise(p, span, MADV_HUGEPAGE);
#endif
    return p;
}

void tzr_unmap_zeroed(void *p, size_t n, size_t size) {
    if (!p) return;
    size_t len = n * size;
    if (len < BIG_MIN) {
        free(p);
        return;
    }
    munmap(p, (len + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE);
}
