/* Luge host API v1 for C (import module "luge"): calls between functions
 * and shared state.
 * See ../../../shared/DESIGN.md ("Host API v1") and README.md ("Calling
 * other functions"). Negative results are errors:
 *   -1 no such function, -2 not granted (not in the caller's `calls`),
 *   -3 bad argument, -4 over a bound, -6 host overloaded,
 *   -7 calls nest too deep, -8 invalid handle.
 * call_wait's non-negative results: 0 success, 1 failed (non-zero exit),
 * 2 trapped, 3 time limit, 4 memory limit.
 *
 * State (keys "ns/rest" are in a granted namespace, keys without '/' in the
 * function's private one; flags bit 0 = global tier): -1 absent, -2
 * namespace not granted, -3 bad argument, -4 over a quota, -5 store
 * unavailable, -6 busy (lock held until this invocation's time ran out).
 *
 * Built natively (no host), every call and state operation is refused with
 * -2. */
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
/* The value's length; copies min(len, buf_len) bytes into `buf`. */
LUGE_IMPORT("state_get")
int64_t luge_state_get(const char *key, int32_t key_len, void *buf, int32_t buf_len, int32_t flags);
LUGE_IMPORT("state_set")
int32_t luge_state_set(const char *key, int32_t key_len, const void *val, int32_t val_len,
                       int32_t flags);
LUGE_IMPORT("state_delete") int32_t luge_state_delete(const char *key, int32_t key_len, int32_t flags);
/* The new length. */
LUGE_IMPORT("state_append")
int64_t luge_state_append(const char *key, int32_t key_len, const void *val, int32_t val_len,
                          int32_t flags);
/* 1 swapped, 0 not; old_len -1: only if absent. */
LUGE_IMPORT("state_cas")
int32_t luge_state_cas(const char *key, int32_t key_len, const void *old, int32_t old_len,
                       const void *new_val, int32_t new_len, int32_t flags);
/* The counter's new value (8 bytes, little-endian; absent = 0). */
LUGE_IMPORT("state_add")
int64_t luge_state_add(const char *key, int32_t key_len, int64_t delta, int32_t flags);
LUGE_IMPORT("state_pull") int32_t luge_state_pull(const char *key, int32_t key_len);
LUGE_IMPORT("state_push") int32_t luge_state_push(const char *key, int32_t key_len);
/* Waits for the lock up to this invocation's time; released by the host
 * when the invocation ends. */
LUGE_IMPORT("state_lock") int32_t luge_state_lock(const char *key, int32_t key_len, int32_t lease_ms);
LUGE_IMPORT("state_unlock") int32_t luge_state_unlock(const char *key, int32_t key_len);
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
#define LUGE_REFUSED(name, ret, ...)                                                               \
    static inline ret name(__VA_ARGS__) { return -2; }
LUGE_REFUSED(luge_state_get, int64_t, const char *k, int32_t kl, void *b, int32_t bl, int32_t f)
LUGE_REFUSED(luge_state_set, int32_t, const char *k, int32_t kl, const void *v, int32_t vl, int32_t f)
LUGE_REFUSED(luge_state_delete, int32_t, const char *k, int32_t kl, int32_t f)
LUGE_REFUSED(luge_state_append, int64_t, const char *k, int32_t kl, const void *v, int32_t vl,
             int32_t f)
LUGE_REFUSED(luge_state_cas, int32_t, const char *k, int32_t kl, const void *o, int32_t ol,
             const void *n, int32_t nl, int32_t f)
LUGE_REFUSED(luge_state_add, int64_t, const char *k, int32_t kl, int64_t d, int32_t f)
LUGE_REFUSED(luge_state_pull, int32_t, const char *k, int32_t kl)
LUGE_REFUSED(luge_state_push, int32_t, const char *k, int32_t kl)
LUGE_REFUSED(luge_state_lock, int32_t, const char *k, int32_t kl, int32_t lease)
LUGE_REFUSED(luge_state_unlock, int32_t, const char *k, int32_t kl)
#undef LUGE_REFUSED
#endif

#endif
