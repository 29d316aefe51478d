/* Fuzz harness: a chat template (untrusted: it comes from a model file) put
 * through src/chat.c's recogniser and renderer. The input is the template.
 * Rendering a fixed chat must succeed for a template of a known family, with
 * every message's content in the output (Llama 2 strips it; the chat has no
 * spaces at its ends), or fail with one error line naming the template's
 * source for an unknown one; never anything else.
 * Seeds: tests/corpus/chat/ (the real templates of each family, and others). */
#include "chat.h"
#include "fuzz.h"
#include "status.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const roles[] = { "system", "user", "assistant", "user" };
static const char *const contents[] = { "Be brief.", "Hi there", "Hello!", "What is 2+2?" };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ra_chat chat = { 0 };
    char *tmpl = malloc(size + 1), *out = NULL;
    if (!tmpl)
        fuzz_fail("out of memory");
    memcpy(tmpl, data, size);
    tmpl[size] = '\0';
    for (int i = 0; i < 4; i++)
        if (ra_chat_add(&chat, roles[i], contents[i]) != RA_OK)
            fuzz_fail("adding a message failed");
    const enum ra_chat_format f = ra_chat_detect(tmpl);
    int rc = ra_chat_render(tmpl, "template.jinja", &chat, "<s>", "</s>", &out);
    if ((rc == RA_OK) != (f != RA_CHAT_UNKNOWN))
        fuzz_fail("family %d, but rendering returned %d", (int)f, rc);
    if (rc != RA_OK)
        fuzz_check_error("template.jinja", (const uint8_t *)tmpl, strlen(tmpl));
    for (int i = 0; rc == RA_OK && i < 4; i++)
        if (!strstr(out, contents[i]))
            fuzz_fail("the rendering lacks message %d's content", i);
    fuzz_note("  family %d: %s", (int)f, rc == RA_OK ? "rendered" : ra_error_message());
    free(out);
    free(tmpl);
    ra_chat_free(&chat);
    return 0;
}
