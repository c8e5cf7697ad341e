/* Sledge-style function: copies stdin to stdout, binary-safe. */
#include <stdio.h>

int main(void) {
    char buffer[65536];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, stdin)) > 0) {
        if (fwrite(buffer, 1, n, stdout) != n) {
            return 1;
        }
    }
    return 0;
}
