/* Calls with the C header: sends its stdin to `c-echo` twice, both calls
 * started before either is waited for, and answers with what came back:
 * {"calls":2,"statuses":[s1,s2],"bytes":[n1,n2],"same":true|false}. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/luge.h"

int main(void) {
    static char input[65536];
    size_t len = fread(input, 1, sizeof input, stdin);
    const char *callee = "c-echo";
    int64_t handles[2];
    for (int i = 0; i < 2; i++) {
        handles[i] = luge_call_start(callee, (int32_t)strlen(callee), input, (int32_t)len);
        if (handles[i] < 0) {
            printf("{\"error\":\"call_start: %lld\"}\n", (long long)handles[i]);
            return 0;
        }
    }
    int32_t statuses[2];
    int64_t bytes[2];
    int same = 1;
    for (int i = 0; i < 2; i++) {
        statuses[i] = luge_call_wait(handles[i]);
        bytes[i] = luge_call_output(handles[i], NULL, 0);
        if (bytes[i] >= 0) {
            char *output = malloc((size_t)bytes[i] + 1);
            luge_call_output(handles[i], output, (int32_t)bytes[i]);
            same = same && (size_t)bytes[i] == len && memcmp(output, input, len) == 0;
            free(output);
        }
    }
    printf("{\"calls\":2,\"statuses\":[%d,%d],\"bytes\":[%lld,%lld],\"same\":%s}\n", statuses[0],
           statuses[1], (long long)bytes[0], (long long)bytes[1], same ? "true" : "false");
    return 0;
}
