/* Sledge-style ping: answers "pong" without reading its input; the
 * smallest function, so a benchmark of it measures the host. */
#include <stdio.h>

int main(void) {
    fputs("pong\n", stdout);
    return 0;
}
