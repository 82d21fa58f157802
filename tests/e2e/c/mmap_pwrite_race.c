// Two threads race on every page of a fresh sparse file: one stores a marker
// through a shared mapping, the other pwrite()s a marker at another offset of
// the same page. Both must be in the file afterwards (as on any local file
// system). Usage: mmap_pwrite_race FILE MIB ROUNDS; exit 1 and a message on
// the first page that lost a marker.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static long page;
static long npages;
static char *map;
static int fd;
static uint64_t round_id;

static void *store_thread(void *arg) {
    (void)arg;
    for (long i = 0; i < npages; i++) {
        uint64_t v = (round_id << 32) | (uint64_t)i | 1;
        memcpy(map + i * page, &v, sizeof v);
    }
    return NULL;
}

static void *pwrite_thread(void *arg) {
    (void)arg;
    for (long i = 0; i < npages; i++) {
        uint64_t v = (round_id << 32) | (uint64_t)i | 2;
        if (pwrite(fd, &v, sizeof v, i * page + page / 2) != sizeof v) {
            perror("pwrite");
            exit(2);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s FILE MIB ROUNDS\n", argv[0]);
        return 2;
    }
    page = sysconf(_SC_PAGESIZE);
    npages = (atol(argv[2]) << 20) / page;
    long rounds = atol(argv[3]);
    for (round_id = 1; round_id <= (uint64_t)rounds; round_id++) {
        unlink(argv[1]);
        fd = open(argv[1], O_RDWR | O_CREAT | O_EXCL, 0644);
        if (fd < 0 || ftruncate(fd, npages * page) != 0) {
            perror("create");
            return 2;
        }
        map = mmap(NULL, npages * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            perror("mmap");
            return 2;
        }
        pthread_t a, b;
        pthread_create(&a, NULL, store_thread, NULL);
        pthread_create(&b, NULL, pwrite_thread, NULL);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        if (msync(map, npages * page, MS_SYNC) != 0 || munmap(map, npages * page) != 0) {
            perror("msync");
            return 2;
        }
        close(fd);
        // Read back through a new descriptor, bypassing nothing: what any
        // reader of the file sees.
        int r = open(argv[1], O_RDONLY);
        for (long i = 0; i < npages; i++) {
            uint64_t s, w;
            if (pread(r, &s, sizeof s, i * page) != sizeof s ||
                pread(r, &w, sizeof w, i * page + page / 2) != sizeof w) {
                perror("pread");
                return 2;
            }
            uint64_t want_s = (round_id << 32) | (uint64_t)i | 1;
            uint64_t want_w = (round_id << 32) | (uint64_t)i | 2;
            if (s != want_s || w != want_w) {
                printf("round %lu page %ld: %s marker lost (mmap %#lx, pwrite %#lx)\n",
                       (unsigned long)round_id, i, s != want_s ? "mmap" : "pwrite",
                       (unsigned long)s, (unsigned long)w);
                return 1;
            }
        }
        close(r);
    }
    unlink(argv[1]);
    return 0;
}
