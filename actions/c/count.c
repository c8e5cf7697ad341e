/* State from C: adds 1 to the counter "hits" in this function's private
 * namespace (atomic on the host, shared by its sandboxes) and answers
 * {"hits":N}. */
#include <stdio.h>
#include <string.h>

#include "include/luge.h"

int main(void) {
    const char *key = "hits";
    int64_t hits = luge_state_add(key, (int32_t)strlen(key), 1, 0);
    printf("{\"hits\":%lld}\n", (long long)hits);
    return 0;
}
