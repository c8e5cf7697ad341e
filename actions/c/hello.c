/* A Luge action in plain C with wasi-libc, no SDK: reads the JSON
 * parameters (or any body) on stdin, logs to stderr, and prints a JSON
 * object as the last line of stdout. */
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    size_t total = 0;
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, stdin)) > 0) {
        total += n;
    }
    fprintf(stderr, "hello from C on stderr\n");
    printf("hello from C on stdout\n");
    printf("{\"greeting\":\"hello from C\",\"input_bytes\":%zu}\n", total);
    return 0;
}
