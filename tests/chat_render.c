/* Test helper for tests/chat_cli: renders a chat with a template as
 * src/chat.h does, for comparison with jinja2's rendering.
 *
 *   tests/chat_render TEMPLATE_FILE MESSAGES.json BOS EOS
 *
 * Writes the rendered prompt (generation prompt included) to stdout, exactly,
 * with no newline added. Exit 0, or 1 with one error line on stderr. */
#include "chat.h"
#include "prompt.h"
#include "status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    struct ra_chat chat = { 0 };
    char *tmpl = NULL, *out = NULL;
    int rc;
    if (argc != 5) {
        fprintf(stderr, "usage: chat_render TEMPLATE_FILE MESSAGES.json BOS EOS\n");
        return 1;
    }
    if ((rc = ra_read_file(argv[1], &tmpl, NULL)) == RA_OK && (rc = ra_chat_load_json(&chat, argv[2])) == RA_OK &&
        (rc = ra_chat_render(tmpl, argv[1], &chat, argv[3], argv[4], &out)) == RA_OK)
        fwrite(out, 1, strlen(out), stdout);
    if (rc != RA_OK)
        fprintf(stderr, "chat_render: %s\n", ra_error_message());
    free(out);
    free(tmpl);
    ra_chat_free(&chat);
    return rc == RA_OK ? 0 : 1;
}
