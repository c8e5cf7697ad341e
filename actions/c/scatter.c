/* Scattered writes: checks that each of 128 zero-initialized pages still
 * reads as zeros (a pool slot must be reset whole between sandboxes), then
 * writes into every other page. The pages between stay unwritten (the
 * kernel's shared zero page), so the written memory is 64 separate runs,
 * more than Wasmtime 48's page-map scan reports in one call (32).
 * Answers {"stale":N,"written":M}. The engine tests run it again and again
 * in one slot (see luge-wasmtime's tests/engine.rs). */
#include <stdio.h>

#define PAGES 128
#define PAGE 4096

/* Zeros: no data segment, the pages are mapped as they are first touched. */
static unsigned char pages[PAGES][PAGE] __attribute__((aligned(PAGE)));

int main(void) {
    int stale = 0, written = 0;
    for (int i = 0; i < PAGES; i++) {
        volatile unsigned char *page = pages[i];
        if (page[0] != 0 || page[PAGE - 1] != 0) {
            stale++;
        }
    }
    for (int i = 0; i < PAGES; i += 2) {
        volatile unsigned char *page = pages[i];
        page[0] = 0xAA;
        page[PAGE - 1] = 1;
        written++;
    }
    printf("{\"stale\":%d,\"written\":%d}\n", stale, written);
    return 0;
}
