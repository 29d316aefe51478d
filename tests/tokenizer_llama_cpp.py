#!/usr/bin/env python3
"""Compares runahead's tokenizer on SmolLM2's GGUF with llama.cpp's llama-tokenize.

Run by tests/tokenizer_llama_cpp.sh:
    python3 tokenizer_llama_cpp.py RUNAHEAD LLAMA_TOKENIZE SMOLLM2.gguf TMPDIR

The corpus is tests/tokenizer_bpe.py's (seeded: the SentencePiece test's scripts,
emoji, whitespace runs, byte-level corner cases, and BPE's special tokens inside
text, code, digits and contractions; over 30,000 strings). Both programs read the
same files: runahead --model GGUF --tokenize-only --prompt-file F (specials parsed,
BOS as the file says) and llama-tokenize -m GGUF -f F --ids --no-escape (read
verbatim; specials parsed and BOS as the file says, its defaults). To keep the
process count small, the strings go into files of BATCH strings each, separated by
a special token (SEPARATOR): both tokenizers split a text at special tokens and
encode the pieces between them on their own, so each string is encoded as if
alone. Strings that contain the separator's text are left out (they would break
the split), and so are those with a NUL byte (a C string's end). The whole files'
ids must be equal; a difference is reported string by string.

One known disagreement between the two references is set apart: a byte whose
one-byte token the vocabulary lacks (SmolLM2 has none for 21 bytes: 0x04, 0x06,
0x13, 0x14, 0x16, 0x1d, 0xc0, 0xc1, 0xf1, 0xf2, 0xf5..0xff; 0xf1 and 0xf2 begin
the UTF-8 of U+40000..U+BFFFF). HF tokenizers drops such a byte before merging,
so its neighbours may merge (" \x04\x8b" gives "ĠÂ" + ...), and runahead does the
same (tests/tokenizer_bpe.py checks it against HF); llama.cpp keeps it as a symbol
that no merge takes, and drops it only at the end ("Ġ", "Â", ...). Strings with
such bytes are compared in files of their own and their differences are counted
and shown, not failed; the same strings without the characters holding those
bytes join the strict comparison (the long strings among them, for one). Exit 0 when every other file matches, 1 on any difference
or error, 77 when gguf cannot be imported.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_bpe as bpe  # noqa: E402  (the corpus and the GGUF reader)
import tokenizer_sentencepiece as spgen  # noqa: E402

SEPARATOR = "<|endoftext|>"
BATCH = 2000


def run(cmd, parse):
    """The ids a command prints, or an error text."""
    res = subprocess.run(cmd, capture_output=True, timeout=300)
    if res.returncode != 0:
        return None, "%s exited %d: %s" % (os.path.basename(cmd[0]), res.returncode,
                                           res.stderr.decode("utf-8", "replace").strip()[-500:])
    try:
        return parse(res.stdout.decode("ascii")), None
    except ValueError as e:
        return None, "%s printed something else than ids (%s): %r" % (os.path.basename(cmd[0]), e,
                                                                       res.stdout[:200])


def parse_runahead(out):
    lines = out.split("\n")
    if len(lines) != 2 or lines[1]:
        raise ValueError("not one line")
    return [int(x) for x in lines[0].split()]


def parse_llama(out):
    """llama-tokenize --ids: one line "[1, 2, 3]"."""
    line = out.strip()
    if not (line.startswith("[") and line.endswith("]")) or "\n" in line:
        raise ValueError("not one [ids] line")
    inner = line[1:-1].strip()
    return [int(x) for x in inner.split(",")] if inner else []


def split_at(ids, sep):
    parts, cur = [], []
    for i in ids:
        if i == sep:
            parts.append(cur)
            cur = []
        else:
            cur.append(i)
    parts.append(cur)
    return parts


def compare_batch(path, batch, got, want, sep_id, bos):
    """Prints the strings whose ids differ; returns their count (at least 1 when the files differ)."""
    if got == want:
        return 0
    g, w = list(got), list(want)
    head = []
    if bos is not None and g[:1] == w[:1] == [bos]:
        head, g, w = [bos], g[1:], w[1:]
    gp, wp = split_at(g, sep_id), split_at(w, sep_id)
    if len(gp) != len(batch) or len(wp) != len(batch):
        at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        print("MISMATCH in %s: the separator split it into %d (runahead) and %d (llama.cpp) pieces for "
              "%d strings; first difference at id %d" % (path, len(gp), len(wp), len(batch), at))
        print("  runahead:   %s" % spgen.show_ids(got, at))
        print("  llama.cpp:  %s" % spgen.show_ids(want, at))
        return 1
    bad = 0
    for (name, s), a, b in zip(batch, gp, wp):
        if a == b:
            continue
        bad += 1
        if bad <= 5:
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            print("MISMATCH [%s] %r" % (name, s if len(s) <= 200 else s[:200] + "..."))
            print("  first difference at id %d" % at)
            print("  runahead:   %s" % spgen.show_ids(a, at))
            print("  llama.cpp:  %s" % spgen.show_ids(b, at))
    if head and bad == 0:
        bad = 1
        print("MISMATCH in %s outside the strings (BOS or separators)" % path)
    return bad


def main():
    if len(sys.argv) != 5:
        print("usage: tokenizer_llama_cpp.py RUNAHEAD LLAMA_TOKENIZE SMOLLM2.gguf TMPDIR", file=sys.stderr)
        return 1
    runahead, llama, gguf_path, tmp = sys.argv[1:]
    try:
        import gguf  # noqa: F401
    except ImportError as e:
        print("skip: %s cannot import gguf (%s)" % (sys.executable, e))
        return 77
    t0 = time.time()
    g = bpe.read_gguf(gguf_path)
    tokens = [t.decode("utf-8") for t in g["tokens"]]
    if SEPARATOR not in tokens:
        print("FAIL: %s has no %s token to separate the strings" % (gguf_path, SEPARATOR))
        return 1
    sep_id = tokens.index(SEPARATOR)
    corpus = bpe.build_corpus(g)
    kept = [(name, s) for name, s in corpus if SEPARATOR not in s and "\0" not in s]
    lacked = set(bpe.missing_bytes(g))
    lacking = [(name, s) for name, s in kept if lacked.intersection(s.encode("utf-8"))]
    kept = [(name, s) for name, s in kept if not lacked.intersection(s.encode("utf-8"))]
    kept += [(name + " (characters without a token removed)",
              "".join(c for c in s if not lacked.intersection(c.encode("utf-8")))) for name, s in lacking]
    print("corpus: %d strings, %d left out (they hold %s or a NUL byte), %d set apart (bytes without a token; "
          "compared without them)" % (len(corpus), len(corpus) - len(kept), SEPARATOR, len(lacking)))
    bad, ids, err = compare_files(runahead, llama, gguf_path, tmp, "batch", kept, sep_id, g)
    if err:
        return 1
    print("%d of %d strings (%d ids in %d files) give llama.cpp's ids (%.1f s)"
          % (len(kept) - bad, len(kept), ids, (len(kept) + BATCH - 1) // BATCH, time.time() - t0))
    print("strings with bytes that have no token, where llama.cpp and HF tokenizers disagree (not failed):")
    apart, _, err = compare_files(runahead, llama, gguf_path, tmp, "apart", lacking, sep_id, g)
    if err:
        return 1
    print("  %d of %d give llama.cpp's ids" % (len(lacking) - apart, len(lacking)))
    return 1 if bad else 0


def compare_files(runahead, llama, gguf_path, tmp, prefix, strings, sep_id, g):
    """Both programs on files of BATCH strings: (strings that differ, llama.cpp's ids, error?)."""
    bad = ids = 0
    for n in range(0, len(strings), BATCH):
        batch = strings[n:n + BATCH]
        path = os.path.join(tmp, "%s-%05d.txt" % (prefix, n))
        with open(path, "wb") as f:
            f.write(SEPARATOR.join(s for _, s in batch).encode("utf-8"))
        got, err = run([runahead, "--model", gguf_path, "--tokenize-only", "--prompt-file", path], parse_runahead)
        if err is None:
            want, err = run([llama, "-m", gguf_path, "-f", path, "--ids", "--no-escape", "--log-disable"],
                            parse_llama)
        if err is not None:
            print("FAIL: %s: %s" % (path, err))
            return bad, ids, True
        ids += len(want)
        bad += compare_batch(path, batch, got, want, sep_id, g["bos"] if g.get("add_bos") else None)
    return bad, ids, False


if __name__ == "__main__":
    sys.exit(main())
