/* gmlx-memhog: holds memory away from everything else, for benchmarks of a machine with less
 * free memory. Usage: gmlx-memhog GIB [SECONDS]. Allocates GIB GiB, writes every page, locks it
 * (mlock; without permission the pages stay touched anonymous memory), prints "held" and waits
 * SECONDS (default: until killed). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: gmlx-memhog GIB [SECONDS]\n");
        return 2;
    }
    char *end;
    double gib = strtod(argv[1], &end);
    if (end == argv[1] || *end || !(gib > 0 && gib < 4096)) {
        fprintf(stderr, "gmlx-memhog: '%s' is not a size in GiB\n", argv[1]);
        return 2;
    }
    long secs = argc == 3 ? strtol(argv[2], NULL, 10) : -1;
    size_t bytes = (size_t)(gib * 1073741824.0);
    unsigned char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "gmlx-memhog: cannot map %.1f GiB: %s\n", gib, strerror(errno));
        return 1;
    }
    long page = sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < bytes; i += (size_t)page)
        p[i] = 1;
    int locked = mlock(p, bytes) == 0;
    printf("held %.1f GiB (%s)\n", gib, locked ? "locked" : "touched, not locked");
    fflush(stdout);
    if (secs < 0)
        for (;;)
            pause();
    sleep((unsigned)secs);
    return 0;
}
