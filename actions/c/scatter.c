/* Scattered writes into a module's memory image: checks that each of the
 * image's 128 pages still holds what the image says (a pool slot must be
 * reset whole between sandboxes), then writes into every other page, 64
 * separate runs of written memory, more than Wasmtime 48's page-map scan
 * finds in one call (32). Answers {"stale":N,"written":M}. The engine
 * tests run it again and again in one slot (see luge-wasmtime's
 * tests/engine.rs). */
#include <stdio.h>

#define PAGES 128
#define PAGE 4096

/* Data, not zeros: the whole 512 KiB lies in the module's memory image. */
static unsigned char image[PAGES][PAGE] = {[0 ... PAGES - 1] = {7}};

int main(void) {
    int stale = 0, written = 0;
    for (int i = 0; i < PAGES; i++) {
        volatile unsigned char *page = image[i];
        if (page[0] != 7 || page[PAGE - 1] != 0) {
            stale++;
        }
    }
    for (int i = 0; i < PAGES; i += 2) {
        volatile unsigned char *page = image[i];
        page[0] = 0xAA;
        page[PAGE - 1] = 1;
        written++;
    }
    printf("{\"stale\":%d,\"written\":%d}\n", stale, written);
    return 0;
}
