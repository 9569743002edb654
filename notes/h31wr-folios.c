/* Page-cache folio sizes of a (cached) file: mmap, touch, pagemap -> PFN, kpageflags compound bits. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int c, char **v) {
    for (int a = 1; a < c; a++) {
        int fd = open(v[a], O_RDONLY);
        off_t n = lseek(fd, 0, SEEK_END);
        size_t np = (n + 4095) / 4096;
        volatile uint8_t *p = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
        for (size_t i = 0; i < np; i++) (void)p[i * 4096];
        int pm = open("/proc/self/pagemap", O_RDONLY), kf = open("/proc/kpageflags", O_RDONLY);
        uint64_t *ent = malloc(np * 8);
        pread(pm, ent, np * 8, ((uintptr_t)p / 4096) * 8);
        size_t folios = 0, small = 0, big_pages = 0, hist[12] = {0};
        for (size_t i = 0; i < np;) {
            uint64_t pfn = ent[i] & ((1ull << 55) - 1), fl = 0;
            pread(kf, &fl, 8, pfn * 8);
            size_t len = 1;
            if (fl >> 15 & 1) { /* head: count tails */
                while (i + len < np) {
                    uint64_t pf2 = ent[i + len] & ((1ull << 55) - 1), f2 = 0;
                    if (pf2 != pfn + len) break;
                    pread(kf, &f2, 8, pf2 * 8);
                    if (!(f2 >> 16 & 1)) break;
                    len++;
                }
            }
            folios++;
            if (len == 1) small++; else big_pages += len;
            int o = 0; while ((1ul << (o + 1)) <= len && o < 11) o++;
            hist[o]++;
            i += len;
        }
        printf("%-40s %7zu pages  %7zu folios  avg %6.1f KiB  %5.1f%% of bytes in folios >4KiB  orders:", v[a], np,
               folios, 4.0 * np / folios, 100.0 * big_pages / np);
        for (int o = 0; o < 12; o++) if (hist[o]) printf(" %d:%zu", o, hist[o]);
        printf("\n");
        munmap((void *)p, n);
        close(fd), close(pm), close(kf);
        free(ent);
    }
    return 0;
}
