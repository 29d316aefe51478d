/* Partition tables: the identities of models and hardware that name their groups. */
#include "config.h"
#include "table.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ identities */

static uint32_t fnv1a(uint32_t h, uint32_t v)
{
    for (int k = 0; k < 4; k++) /* little-endian bytes: the same id on every machine */
        h = (h ^ ((v >> (8 * k)) & 0xff)) * 16777619u;
    return h;
}

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

void ra_table_model_id(const struct ra_config *c, char *buf, size_t len)
{
    const uint32_t fields[] = {
        (uint32_t)c->dim, (uint32_t)c->hidden_dim, (uint32_t)c->n_layers, (uint32_t)c->n_heads,
        (uint32_t)c->n_kv_heads, (uint32_t)c->vocab_size, (uint32_t)c->seq_len, (uint32_t)c->head_dim,
        float_bits(c->rope_theta), float_bits(c->norm_eps),
    };
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        h = fnv1a(h, fields[i]);
    /* scaled RoPE: its factors too (an unscaled model keeps the id it had) */
    for (int j = 0; c->rope_scaled && j < c->head_dim / 2 && j < RA_ROPE_MAX_PAIRS; j++)
        h = fnv1a(h, float_bits(c->rope_factors[j]));
    snprintf(buf, len, "llama-d%d-l%d-h%d-kv%d-f%d-v%d-%08x", c->dim, c->n_layers, c->n_heads, c->n_kv_heads,
             c->hidden_dim, c->vocab_size, (unsigned)h);
}

/* Copies s into buf with every run of characters outside [A-Za-z0-9.+-] turned into one '_'. */
static size_t sanitize(const char *s, char *buf, size_t len)
{
    size_t o = 0;
    for (; *s && o + 1 < len; s++) {
        int ok = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
                 *s == '.' || *s == '+' || *s == '-';
        if (ok)
            buf[o++] = *s;
        else if (o && buf[o - 1] != '_')
            buf[o++] = '_';
    }
    while (o && buf[o - 1] == '_')
        o--;
    buf[o] = '\0';
    return o;
}

void ra_table_default_hw_tag(char *buf, size_t len)
{
    char line[512], model[256] = "unknown-cpu";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && colon) {
            if (sanitize(colon + 1, model, sizeof model) == 0)
                snprintf(model, sizeof model, "unknown-cpu");
            break;
        }
    }
    if (f)
        fclose(f);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(buf, len, "%s-%ldc", model, cores > 0 ? cores : 1);
}
