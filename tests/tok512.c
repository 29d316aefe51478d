/* The test tokenizer of tok512.h. */
#include "tok512.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

size_t tok512_bytes(char *buf, int variant)
{
    const int32_t maxlen = 6;
    size_t at = 0;
    memcpy(buf, &maxlen, 4), at = 4;
    for (int i = 0; i < 512; i++) {
        char piece[8];
        float score = i < 259 ? 0 : i < 259 + 95 ? -2 : -1;
        if (i < 3)
            strcpy(piece, i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
        else if (i < 259)
            snprintf(piece, sizeof piece, "<0x%02X>", i - 3);
        else if (i < 259 + 95)
            piece[0] = (char)(32 + i - 259), piece[1] = '\0';
        else
            piece[0] = (char)('a' + (i - 354) / 26 % 26), piece[1] = (char)('a' + (i - 354) % 26), piece[2] = '\0';
        if (i == 400 && variant == 1)
            score = -1.5f;
        if (i == 400 && variant == 2)
            piece[1] = 'Z';
        const int32_t len = (int32_t)strlen(piece);
        memcpy(buf + at, &score, 4), memcpy(buf + at + 4, &len, 4), memcpy(buf + at + 8, piece, (size_t)len);
        at += 8 + (size_t)len;
    }
    return at;
}
