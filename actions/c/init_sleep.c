/* A module whose pre-initialization sleeps (a host call the epoch timer
 * cannot interrupt): its upload is refused at once, not after the sleep. */
#include <stdio.h>
#include <unistd.h>

#ifdef __wasm__
#define EXPORT(name) __attribute__((export_name(name)))
#else
#define EXPORT(name)
#endif

EXPORT("wizer.initialize") void initialize(void) {
    sleep(3600);
}

int main(void) {
    printf("{}\n");
    return 0;
}
