/* kernels/bytes: private to src/kernels; loads of little-endian fields from byte pointers at any
 * alignment (memcpy, which compilers turn into one plain load), for the SIMD kernel files that
 * read block fields in place. Owns nothing. */
#ifndef GM_KERNELS_BYTES_H
#define GM_KERNELS_BYTES_H

#include <stdint.h>
#include <string.h>

static inline uint16_t ld_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint32_t ld_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint64_t ld_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float ld_f32(const uint8_t *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

#endif
