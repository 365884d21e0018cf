/* base/checked: overflow-checked size arithmetic for lengths that come from files.
 *
 * Owns nothing; header-only. Each helper returns 1 and stores the result when it fits in
 * uint64_t, else returns 0 and leaves *out untouched.
 */
#ifndef GM_BASE_CHECKED_H
#define GM_BASE_CHECKED_H

#include <stdint.h>

static inline int gm_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

static inline int gm_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

/* Rounds v up to a multiple of align (align > 0). */
static inline int gm_align_up_u64(uint64_t v, uint64_t align, uint64_t *out)
{
    uint64_t r = v % align;
    if (r == 0) {
        *out = v;
        return 1;
    }
    return gm_add_u64(v, align - r, out);
}

#define GM_GIB (1024.0 * 1024.0 * 1024.0)
#define GM_GB 1e9

#endif
