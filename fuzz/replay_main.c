/* Replays a fuzz target's corpus (every file in the directories given) so
 * plain `make test` exercises the fuzz targets with any compiler. A crash
 * or sanitizer report fails the test; otherwise one PASS line. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = buf ? fread(buf, 1, (size_t)(n > 0 ? n : 0), f) : 0;
    fclose(f);
    if (!buf) return 0;
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    return 1;
}

int main(int argc, char **argv) {
    int count = 0;
    for (int a = 1; a < argc; a++) {
        DIR *d = opendir(argv[a]);
        if (!d) {
            count += replay_file(argv[a]);
            continue;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[a], e->d_name);
            count += replay_file(path);
        }
        closedir(d);
    }
    if (count == 0) {
        printf("FAIL replay: empty corpus\n");
        return 1;
    }
    printf("PASS replay of %d corpus inputs\n", count);
    return 0;
}
