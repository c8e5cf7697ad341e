/* Luge host API v1 for C (import module "luge"): calls between functions.
 * See ../../../shared/DESIGN.md ("Host API v1") and README.md ("Calling
 * other functions"). Negative results are errors:
 *   -1 no such function, -2 not granted (not in the caller's `calls`),
 *   -3 bad argument, -4 over a bound, -6 host overloaded,
 *   -7 calls nest too deep, -8 invalid handle.
 * call_wait's non-negative results: 0 success, 1 failed (non-zero exit),
 * 2 trapped, 3 time limit, 4 memory limit.
 *
 * Built natively (no host), every call is refused with -2. */
#ifndef LUGE_H
#define LUGE_H

#include <stdint.h>

#ifdef __wasm__
#define LUGE_IMPORT(name) __attribute__((import_module("luge"), import_name(name)))
/* Starts function `name` with `input` as its stdin; a handle (>= 0). */
LUGE_IMPORT("call_start")
int64_t luge_call_start(const char *name, int32_t name_len, const void *input, int32_t input_len);
/* Waits for the call; its status. */
LUGE_IMPORT("call_wait") int32_t luge_call_wait(int64_t handle);
/* Copies min(len, buf_len) bytes of the call's stdout into `buf`; returns
 * the whole length (call with buf_len 0 to size a buffer). */
LUGE_IMPORT("call_output") int64_t luge_call_output(int64_t handle, void *buf, int32_t buf_len);
#else
static inline int64_t luge_call_start(const char *name, int32_t name_len, const void *input,
                                      int32_t input_len) {
    (void)name, (void)name_len, (void)input, (void)input_len;
    return -2;
}
static inline int32_t luge_call_wait(int64_t handle) {
    (void)handle;
    return -8;
}
static inline int64_t luge_call_output(int64_t handle, void *buf, int32_t buf_len) {
    (void)handle, (void)buf, (void)buf_len;
    return -8;
}
#endif

#endif
