/* Scattered writes: checks that each of N zero-initialized pages (the
 * argument, 128 by default, at most 1024) still reads as zeros (a pool
 * slot must be reset whole between sandboxes), then writes into every
 * other one. The pages between stay unwritten (the kernel's shared zero
 * page), so the written memory is N/2 separate runs: 64 by default, more
 * than Wasmtime 48's page-map scan reports in one call (32); 1024 pages
 * write 2 MiB, past what a slot keeps resident (1 MiB).
 * Answers {"stale":N,"written":M}. The engine tests run it again and again
 * in one slot (see luge-wasmtime's tests/engine.rs). */
#include <stdio.h>
#include <stdlib.h>

#define MAX_PAGES 1024
#define PAGE 4096

/* Zeros: no data segment, the pages are mapped as they are first touched. */
static unsigned char pages[MAX_PAGES][PAGE] __attribute__((aligned(PAGE)));

int main(int argc, char **argv) {
    int count = argc > 1 ? atoi(argv[1]) : 128;
    if (count < 0 || count > MAX_PAGES) {
        count = MAX_PAGES;
    }
    int stale = 0, written = 0;
    for (int i = 0; i < count; i++) {
        volatile unsigned char *page = pages[i];
        if (page[0] != 0 || page[PAGE - 1] != 0) {
            stale++;
        }
    }
    for (int i = 0; i < count; i += 2) {
        volatile unsigned char *page = pages[i];
        page[0] = 0xAA;
        page[PAGE - 1] = 1;
        written++;
    }
    printf("{\"stale\":%d,\"written\":%d}\n", stale, written);
    return 0;
}
