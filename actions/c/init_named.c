/* A snapshot whose initialisation is named by the function's metadata
 * (`init_function = "setup"`, or the annotation `snapshot.init_function`)
 * and runs with the function's own grants: `setup` reads /data/config.txt
 * (a granted directory) and the GREETING environment variable once, at
 * upload. Every invocation answers what the snapshot holds, and whether
 * `setup` ran in this invocation (it should not: it ran at upload). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __wasm__
#define EXPORT(name) __attribute__((export_name(name)))
#else
#define EXPORT(name)
#endif

static char config[128];
static char greeting[64];
static int in_main = 0;
static int setup_in_main = 0;

EXPORT("setup") void setup(void) {
    setup_in_main = in_main;
    FILE *f = fopen("/data/config.txt", "r");
    if (f) {
        size_t n = fread(config, 1, sizeof config - 1, f);
        config[n] = 0;
        fclose(f);
        /* One line, no quotes: it goes into JSON as it is. */
        config[strcspn(config, "\r\n\"\\")] = 0;
    } else {
        strcpy(config, "unreadable");
    }
    const char *g = getenv("GREETING");
    snprintf(greeting, sizeof greeting, "%s", g ? g : "unset");
    greeting[strcspn(greeting, "\"\\")] = 0;
}

int main(void) {
    in_main = 1;
    printf("{\"config\": \"%s\", \"greeting\": \"%s\", \"setup_in_main\": %s}\n", config,
           greeting, setup_in_main ? "true" : "false");
    return 0;
}
