/* A module whose pre-initialization never ends: its upload is refused at
 * the initialisation's time limit. */
#include <stdio.h>

#ifdef __wasm__
#define EXPORT(name) __attribute__((export_name(name)))
#else
#define EXPORT(name)
#endif

EXPORT("wizer.initialize") void initialize(void) {
    for (volatile unsigned long i = 0;; i++) {
    }
}

int main(void) {
    printf("{}\n");
    return 0;
}
