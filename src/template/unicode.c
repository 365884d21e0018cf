/* template/unicode: UTF-8 coding and the Unicode properties that Python's str methods, repr()
 * and Jinja's lexer depend on.
 *
 * Python consults the full Unicode database; chat templates apply these to role names, JSON
 * schema words and the like, so this file carries exact tables where they are small (white
 * space, line breaks, what repr() escapes among controls, formats and separators) and the case
 * pairs of the Latin, Greek, Cyrillic, Armenian and full-width blocks. Outside those, letters
 * are recognised by block (CJK, kana, Hangul...) and have no case. Unassigned code points are
 * treated as printable (Python escapes them in repr()). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "template/tmpl_int.h"

size_t gm_u8_dec(const char *s, size_t n, uint32_t *cp)
{
    const unsigned char *p = (const unsigned char *)s;
    if (p[0] < 0x80 || n < 2) {
        *cp = p[0];
        return 1;
    }
    if (p[0] < 0xE0) {
        *cp = ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
        return 2;
    }
    if (p[0] < 0xF0 || n < 4) {
        if (n < 3) {
            *cp = p[0];
            return 1;
        }
        *cp = ((uint32_t)(p[0] & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t)(p[0] & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) |
          ((uint32_t)(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    return 4;
}

size_t gm_u8_enc(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Strict: no overlong forms, no surrogates, nothing above U+10FFFF (what Python's decoder
 * accepts). */
bool gm_u8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        uint32_t cp, min;
        if (c >= 0xC2 && c <= 0xDF) {
            k = 1, cp = c & 0x1F, min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            k = 2, cp = c & 0x0F, min = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (n - i <= k)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += k + 1;
    }
    return true;
}

size_t gm_u8_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

size_t gm_u8_offset(const char *s, size_t n, size_t idx)
{
    size_t i = 0;
    while (i < n && idx > 0) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80)
            i++;
        idx--;
    }
    return i;
}

bool gm_u_isspace(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool gm_u_islinebreak(uint32_t cp)
{
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
           cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

/* Code points of general category Cf (format) in Unicode 14 (Python 3.11). */
static const uint32_t cf_ranges[][2] = {
    {0x00AD, 0x00AD},   {0x0600, 0x0605},   {0x061C, 0x061C},   {0x06DD, 0x06DD},
    {0x070F, 0x070F},   {0x0890, 0x0891},   {0x08E2, 0x08E2},   {0x180E, 0x180E},
    {0x200B, 0x200F},   {0x202A, 0x202E},   {0x2060, 0x2064},   {0x2066, 0x206F},
    {0xFEFF, 0xFEFF},   {0xFFF9, 0xFFFB},   {0x110BD, 0x110BD}, {0x110CD, 0x110CD},
    {0x13430, 0x13438}, {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A}, {0xE0001, 0xE0001},
    {0xE0020, 0xE007F},
};

bool gm_u_isprintable(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= 0x20 && cp < 0x7F;
    if (cp <= 0xA0)
        return false; /* C1 controls, U+00A0 (Zs) */
    if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
        cp == 0x202F || cp == 0x205F || cp == 0x3000)
        return false; /* Zs, Zl, Zp */
    if ((cp >= 0xD800 && cp <= 0xF8FF) || cp >= 0xF0000)
        return false; /* Cs, Co */
    if ((cp >= 0xFDD0 && cp <= 0xFDEF) || (cp & 0xFFFE) == 0xFFFE)
        return false; /* noncharacters (Cn) */
    for (size_t i = 0; i < sizeof cf_ranges / sizeof cf_ranges[0]; i++)
        if (cp >= cf_ranges[i][0] && cp <= cf_ranges[i][1])
            return false;
    return true;
}

/* Case pairs: blocks where upper and lower alternate (even = upper unless noted) or are
 * offset by a constant. */
typedef struct cpair {
    uint32_t lo, hi; /* range of the upper-case side */
    int32_t delta;   /* lower = upper + delta; 1 with alt: alternating pairs */
    uint8_t alt;     /* 1: pairs (upper, upper+1) from lo, every second code point */
} cpair;

static const cpair pairs[] = {
    {0x0041, 0x005A, 32, 0},    {0x00C0, 0x00D6, 32, 0},    {0x00D8, 0x00DE, 32, 0},
    {0x0100, 0x012E, 1, 1},     {0x0132, 0x0136, 1, 1},     {0x0139, 0x0147, 1, 1},
    {0x014A, 0x0176, 1, 1},     {0x0179, 0x017D, 1, 1},     {0x0182, 0x0184, 1, 1},
    {0x01A0, 0x01A4, 1, 1},     {0x01DE, 0x01EE, 1, 1},     {0x01F8, 0x021E, 1, 1},
    {0x0222, 0x0232, 1, 1},     {0x0386, 0x0386, 38, 0},    {0x0388, 0x038A, 37, 0},
    {0x038C, 0x038C, 64, 0},    {0x038E, 0x038F, 63, 0},    {0x0391, 0x03A1, 32, 0},
    {0x03A3, 0x03AB, 32, 0},    {0x03D8, 0x03EE, 1, 1},     {0x0400, 0x040F, 80, 0},
    {0x0410, 0x042F, 32, 0},    {0x0460, 0x0480, 1, 1},     {0x048A, 0x04BE, 1, 1},
    {0x04C0, 0x04C0, 15, 0},    {0x04C1, 0x04CD, 1, 1},     {0x04D0, 0x052E, 1, 1},
    {0x0531, 0x0556, 48, 0},    {0x10A0, 0x10C5, 7264, 0},  {0x1E00, 0x1E94, 1, 1},
    {0x1EA0, 0x1EFE, 1, 1},     {0x1F08, 0x1F0F, -8, 0},    {0x1F18, 0x1F1D, -8, 0},
    {0x1F28, 0x1F2F, -8, 0},    {0x1F38, 0x1F3F, -8, 0},    {0x1F48, 0x1F4D, -8, 0},
    {0x1F68, 0x1F6F, -8, 0},    {0x2160, 0x216F, 16, 0},    {0x24B6, 0x24CF, 26, 0},
    {0x2C00, 0x2C2F, 48, 0},    {0xA640, 0xA66C, 1, 1},     {0xA680, 0xA69A, 1, 1},
    {0xA722, 0xA72E, 1, 1},     {0xA732, 0xA76E, 1, 1},     {0xA779, 0xA77B, 1, 1},
    {0xA77E, 0xA786, 1, 1},     {0xA790, 0xA792, 1, 1},     {0xA796, 0xA7A8, 1, 1},
    {0xFF21, 0xFF3A, 32, 0},    {0x10400, 0x10427, 40, 0},  {0x1E900, 0x1E921, 34, 0},
};

static bool pair_of_upper(uint32_t cp, uint32_t *lower)
{
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const cpair *r = &pairs[i];
        if (cp < r->lo || cp > r->hi)
            continue;
        if (r->alt && ((cp - r->lo) & 1))
            continue;
        *lower = (uint32_t)((int32_t)cp + r->delta);
        return true;
    }
    return false;
}

static bool pair_of_lower(uint32_t cp, uint32_t *upper)
{
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const cpair *r = &pairs[i];
        int64_t u = (int64_t)cp - r->delta;
        if (u < r->lo || u > r->hi)
            continue;
        if (r->alt && ((u - r->lo) & 1))
            continue;
        *upper = (uint32_t)u;
        return true;
    }
    return false;
}

/* Titlecase digraphs: Ǆ ǅ ǆ, Ǉ ǈ ǉ, Ǌ ǋ ǌ, Ǳ ǲ ǳ (upper, title, lower). */
static int digraph(uint32_t cp, uint32_t *base)
{
    if (cp >= 0x01C4 && cp <= 0x01CC) {
        *base = 0x01C4 + (cp - 0x01C4) / 3 * 3;
        return (int)((cp - 0x01C4) % 3);
    }
    if (cp >= 0x01F1 && cp <= 0x01F3) {
        *base = 0x01F1;
        return (int)(cp - 0x01F1);
    }
    return -1;
}

/* The Latin ligatures U+FB00..FB06 upper-case to two or three letters. */
static const char *const ligatures[7] = {"FF", "FI", "FL", "FFI", "FFL", "ST", "ST"};

static size_t ligature(uint32_t cp, bool title, uint32_t out[3])
{
    const char *l = ligatures[cp - 0xFB00];
    size_t n = strlen(l);
    for (size_t i = 0; i < n; i++)
        out[i] = (uint32_t)(title && i ? l[i] + 32 : l[i]);
    return n;
}

size_t gm_u_upper(uint32_t cp, uint32_t out[3])
{
    uint32_t u, base;
    if (cp >= 0xFB00 && cp <= 0xFB06)
        return ligature(cp, false, out);
    if (digraph(cp, &base) >= 0) {
        out[0] = base;
        return 1;
    }
    if (cp < 0x80) {
        out[0] = (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
        return 1;
    }
    switch (cp) {
    case 0x00DF: out[0] = 'S', out[1] = 'S'; return 2;
    case 0x00B5: out[0] = 0x039C; return 1;
    case 0x00FF: out[0] = 0x0178; return 1;
    case 0x0131: out[0] = 'I'; return 1;
    case 0x017F: out[0] = 'S'; return 1;
    case 0x03C2: out[0] = 0x03A3; return 1;
    case 0x0149: out[0] = 0x02BC, out[1] = 'N'; return 2;
    default: break;
    }
    out[0] = pair_of_lower(cp, &u) ? u : cp;
    return 1;
}

size_t gm_u_lower(uint32_t cp, uint32_t out[3])
{
    uint32_t l, base;
    if (digraph(cp, &base) >= 0) {
        out[0] = base + 2;
        return 1;
    }
    if (cp < 0x80) {
        out[0] = (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
        return 1;
    }
    switch (cp) {
    case 0x0130: out[0] = 'i', out[1] = 0x0307; return 2;
    case 0x0178: out[0] = 0x00FF; return 1;
    case 0x1E9E: out[0] = 0x00DF; return 1;
    default: break;
    }
    out[0] = pair_of_upper(cp, &l) ? l : cp;
    return 1;
}

size_t gm_u_title(uint32_t cp, uint32_t out[3])
{
    uint32_t base;
    if (cp >= 0xFB00 && cp <= 0xFB06)
        return ligature(cp, true, out);
    if (digraph(cp, &base) >= 0) {
        out[0] = base + 1;
        return 1;
    }
    if (cp == 0x00DF) {
        out[0] = 'S', out[1] = 's';
        return 2;
    }
    return gm_u_upper(cp, out);
}

bool gm_u_isupper(uint32_t cp)
{
    uint32_t l, base;
    if (cp < 0x80)
        return cp >= 'A' && cp <= 'Z';
    int dg = digraph(cp, &base);
    if (dg >= 0)
        return dg == 0;
    return cp == 0x0130 || cp == 0x0178 || cp == 0x1E9E || pair_of_upper(cp, &l);
}

bool gm_u_islower(uint32_t cp)
{
    uint32_t u[3], base;
    if (cp < 0x80)
        return cp >= 'a' && cp <= 'z';
    int dg = digraph(cp, &base);
    if (dg >= 0)
        return dg == 2;
    if (cp >= 0xFB00 && cp <= 0xFB06)
        return true;
    if (cp == 0x00DF || cp == 0x00AA || cp == 0x00BA || cp == 0x0138)
        return true;
    return gm_u_upper(cp, u) == 1 ? u[0] != cp : true;
}

/* Letters without case (Lo) by block, enough for CJK and the common scripts. */
static const uint32_t lo_ranges[][2] = {
    {0x05D0, 0x05EA}, {0x0620, 0x064A}, {0x0671, 0x06D3}, {0x0904, 0x0939}, {0x0E01, 0x0E30},
    {0x1100, 0x11FF}, {0x3041, 0x3096}, {0x30A1, 0x30FA}, {0x3105, 0x312F}, {0x3131, 0x318E},
    {0x3400, 0x4DBF}, {0x4E00, 0x9FFF}, {0xA000, 0xA48C}, {0xAC00, 0xD7A3}, {0xF900, 0xFAFF},
    {0xFF66, 0xFF9D}, {0x20000, 0x2FA1F}, {0x30000, 0x3134A},
};

bool gm_u_istitle_char(uint32_t cp)
{
    uint32_t base;
    return digraph(cp, &base) == 1;
}

bool gm_u_isalpha(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    /* cased but not letters: Roman numerals (Nl), circled letters (So) */
    if ((cp >= 0x2160 && cp <= 0x217F) || (cp >= 0x24B6 && cp <= 0x24E9))
        return false;
    if ((cp >= 0xFB00 && cp <= 0xFB06) || (cp >= 0x01C4 && cp <= 0x01CC) || (cp >= 0x01F1 && cp <= 0x01F3))
        return true;
    if (cp == 0xAA || cp == 0xB5 || cp == 0xBA || (cp >= 0xC0 && cp <= 0x24F && cp != 0xD7 && cp != 0xF7))
        return true;
    if (gm_u_isupper(cp) || (gm_u_islower(cp) && cp >= 0x250 && cp < 0x2B0))
        return true;
    uint32_t u[3];
    if (gm_u_upper(cp, u) != 1 || u[0] != cp)
        return true;
    for (size_t i = 0; i < sizeof lo_ranges / sizeof lo_ranges[0]; i++)
        if (cp >= lo_ranges[i][0] && cp <= lo_ranges[i][1])
            return true;
    return false;
}

bool gm_u_isdigit(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= '0' && cp <= '9';
    return cp == 0xB2 || cp == 0xB3 || cp == 0xB9 || (cp >= 0x0660 && cp <= 0x0669) ||
           (cp >= 0x06F0 && cp <= 0x06F9) || (cp >= 0x0966 && cp <= 0x096F) ||
           (cp >= 0xFF10 && cp <= 0xFF19) || (cp >= 0x2070 && cp <= 0x2079 && cp != 0x2071 &&
                                              cp != 0x2072 && cp != 0x2073);
}

bool gm_u_isword(uint32_t cp)
{
    /* \w: alphanumerics (letters, digits, other numbers such as Roman numerals) and "_" */
    return cp == '_' || gm_u_isalpha(cp) || gm_u_isdigit(cp) || (cp >= 0x2160 && cp <= 0x2188);
}
