/* A module whose pre-initialization fails: `wizer.initialize` traps after
 * a message on stderr. Its upload is refused, naming the cause. */
#include <stdio.h>

#ifdef __wasm__
#define EXPORT(name) __attribute__((export_name(name)))
#else
#define EXPORT(name)
#endif

EXPORT("wizer.initialize") void initialize(void) {
    fprintf(stderr, "cannot load the model\n");
    __builtin_trap();
}

int main(void) {
    printf("{}\n");
    return 0;
}
