/* The harnesses' main when libFuzzer is not linked (every build but
 * jobs/fuzz's): runs LLVMFuzzerTestOneInput once on every file named, and on
 * every file in the directories named (sorted, dot files skipped), so the
 * committed corpus is a regression test wherever the suite runs.
 *   tests/fuzz_partition tests/corpus/partition [FILE|DIR]...
 * Each input's name is printed before it runs, so a crash names its input.
 * Replaying nothing fails: an empty or misnamed corpus would prove nothing. */
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Runs one input from a buffer of exactly its size, so ASan sees any read past the end. */
static int replay_file(const char *path, off_t size)
{
    unsigned char *buf = malloc(size > 0 ? (size_t)size : 1);
    FILE *f = fopen(path, "rb");
    if (!buf || !f || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        exit(2);
    }
    fclose(f);
    printf("replay: %s (%lld bytes)\n", path, (long long)size);
    fflush(stdout);
    LLVMFuzzerTestOneInput(buf, (size_t)size);
    free(buf);
    return 1;
}

static int not_hidden(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

static int replay_path(const char *path);

static int replay_dir(const char *dir)
{
    struct dirent **names;
    int n = scandir(dir, &names, not_hidden, alphasort), count = 0;
    if (n < 0) {
        fprintf(stderr, "replay: cannot list %s\n", dir);
        exit(2);
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name) < sizeof path)
            count += replay_path(path);
        free(names[i]);
    }
    free(names);
    return count;
}

static int replay_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: no such file or directory: %s\n", path);
        exit(2);
    }
    if (S_ISDIR(st.st_mode))
        return replay_dir(path);
    return S_ISREG(st.st_mode) ? replay_file(path, st.st_size) : 0;
}

int main(int argc, char **argv)
{
    int count = 0;
    for (int i = 1; i < argc; i++)
        count += replay_path(argv[i]);
    if (count == 0) {
        fprintf(stderr, "%s: no inputs replayed (usage: %s FILE|DIR...)\n", argv[0], argv[0]);
        return 1;
    }
    printf("%s: %d inputs replayed\n", argv[0], count);
    return 0;
}
