/* For the shared-state benchmark: answers {"bytes":N} for a large value
 * received as stdin (no argument) or read from the local tier's key
 * "blobs/big" (argument "state"). Nothing is parsed: the cost is moving
 * the bytes into the sandbox. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/luge.h"

int main(int argc, char **argv) {
    size_t total = 0;
    if (argc > 1 && strcmp(argv[1], "state") == 0) {
        const char *key = "blobs/big";
        int64_t len = luge_state_get(key, (int32_t)strlen(key), NULL, 0, 0);
        if (len < 0) {
            printf("{\"error\":%lld}\n", (long long)len);
            return 0;
        }
        char *buf = malloc((size_t)len);
        total = (size_t)luge_state_get(key, (int32_t)strlen(key), buf, (int32_t)len, 0);
        free(buf);
    } else {
        /* Read straight into a buffer that doubles as it fills. */
        size_t cap = 1 << 20;
        char *buf = malloc(cap);
        size_t n;
        while ((n = fread(buf + total, 1, cap - total, stdin)) > 0) {
            total += n;
            if (total == cap) {
                cap *= 2;
                buf = realloc(buf, cap);
            }
        }
        free(buf);
    }
    printf("{\"bytes\":%zu}\n", total);
    return 0;
}
