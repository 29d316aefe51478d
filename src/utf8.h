/* UTF-8, as the core reads it (error escaping, the byte-level BPE tokenizer). */
#ifndef RA_UTF8_H
#define RA_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* The UTF-8 sequence at s, of which n bytes may be read: its length (1 for
 * ASCII), with its code point in *cp; 0 where s starts no valid sequence (a
 * stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut
 * short by n). In a NUL-terminated string n may be 4: a NUL ends the sequence. */
static inline size_t ra_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    static const uint32_t least[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (n == 0)
        return 0;
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if (s[0] < 0xc2 || s[0] > 0xf4)
        return 0;
    const size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : 2;
    if (len > n)
        return 0;
    uint32_t v = s[0] & (0x7fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3fu);
    }
    if (v < least[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return len;
}

#endif
