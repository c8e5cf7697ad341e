/* Sledge-style function for chains: copies stdin to stdout, binary-safe,
 * then appends each of its arguments. Stages of a chain that append
 * different arguments show the order the stages ran in. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    char buffer[65536];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, stdin)) > 0) {
        if (fwrite(buffer, 1, n, stdout) != n) {
            return 1;
        }
    }
    for (int i = 1; i < argc; i++) {
        if (fputs(argv[i], stdout) == EOF) {
            return 1;
        }
    }
    return 0;
}
