#!/usr/bin/env python3
"""jobs/quality-study's prompts: long real English texts found on a Debian
machine, tokenized with Hugging Face transformers from the GGUF file's own
vocabulary and merges (the CLI's text tokenizer is not used, so that the ids
come from an independent tokenizer).

  quality-prompts.py GGUF N OUTDIR

writes OUTDIR/NAME.ids (the first N token ids of each text, space-separated)
for the texts it finds, and prints NAME PATH for each; a text that is absent
is skipped with a note on stderr. Exits 77 where transformers or gguf cannot
be imported."""
import gzip
import html.parser
import os
import sys

try:
    import idlelib
    from transformers import AutoTokenizer
    import gguf  # noqa: F401  (transformers' GGUF reader needs it)
except ImportError as e:
    print(f"quality-prompts: {e}", file=sys.stderr)
    sys.exit(77)


class _Text(html.parser.HTMLParser):
    """The text of an HTML page, scripts and styles left out."""

    def __init__(self):
        super().__init__()
        self.parts, self.skip = [], 0

    def handle_starttag(self, tag, attrs):
        self.skip += tag in ("script", "style")

    def handle_endtag(self, tag):
        self.skip -= tag in ("script", "style") and self.skip > 0

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)


def read_gpl3(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def read_gz(path):
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        return f.read()


def read_html(path):
    p = _Text()
    with open(path, encoding="utf-8") as f:
        p.feed(f.read())
    return " ".join(" ".join(p.parts).split())


# (name, path, reader): a licence, a shell manual's prose, Python's IDLE documentation
TEXTS = [
    ("gpl3", "/usr/share/common-licenses/GPL-3", read_gpl3),
    ("bash-posix", "/usr/share/doc/bash/POSIX.gz", read_gz),
    ("idle-help", os.path.join(os.path.dirname(idlelib.__file__), "help.html"), read_html),
]


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    gguf_path, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(gguf_path)),
                                        gguf_file=os.path.basename(gguf_path))
    os.makedirs(out, exist_ok=True)
    for name, path, reader in TEXTS:
        if not os.path.exists(path):
            print(f"quality-prompts: {path} not found: {name} skipped", file=sys.stderr)
            continue
        ids = tok(reader(path), add_special_tokens=False)["input_ids"]
        if len(ids) < n:
            print(f"quality-prompts: {path}: {len(ids)} tokens, fewer than {n}: {name} skipped", file=sys.stderr)
            continue
        with open(os.path.join(out, name + ".ids"), "w") as f:
            f.write(" ".join(map(str, ids[:n])) + "\n")
        print(name, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
