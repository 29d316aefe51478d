"""Compares runahead's byte-level BPE tokenizer with Hugging Face tokenizers.

Run by tests/tokenizer_bpe.sh:
    python3 tokenizer_bpe.py HELPER SMOLLM2.gguf TMPDIR

Reads SmolLM2's vocabulary, merges, token types and pre-tokenizer from its GGUF
file with the gguf package, builds the equivalent tokenizer with HF tokenizers
(BPE + Digits + ByteLevel, as SmolLM2's own tokenizer.json), checks it against
llama.cpp's fingerprint of the smollm pre-tokenizer, and saves it. Then
encodes a seeded corpus (tests/tokenizer_sentencepiece.py's generator, plus
special tokens inside text, code, digits and contractions) with HELPER
(tests/tokenize_bpe_lines) and with HF, and compares the ids exactly, string by
string, for:
  - smollm from the saved tokenizer.json ([a, b] merges), from the same file
    with "a b" merges, and from the GGUF arrays through ra_bpe_init;
  - the same vocabulary under the gpt-2, llama-bpe (with ignore_merges and a
    BOS template) and qwen2 (with an EOS template) pre-tokenizers, so that
    every pre-tokenizer runahead knows meets HF's regex engine.
Every encoding must also decode back to its string: with the BOS or EOS text
a template adds, and without the bytes whose one-byte token the vocabulary
lacks (SmolLM2 has none for 21 bytes, 0x04 and 0xf5..0xff among them; HF drops
them, so does runahead). Exit 0 when everything
matches, 1 on any difference or error, 77 when the gguf or tokenizers package
cannot be imported.
"""
import hashlib
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_sentencepiece as spgen  # noqa: E402  (the corpus generator)

SEED = 20240808
MIN_CORPUS = 20000

# llama.cpp's convert_hf_to_gguf.py fingerprints a pre-tokenizer by the sha256
# of str(ids) of this text; this hash is the one it names "smollm".
CHKTXT = ('\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis '
          'concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 '
          'កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български '
          '\'\'\'\'\'\'```````""""......!!!!!!?????? I\'ve been \'told he\'s there, \'RE you sure? '
          '\'M not sure I\'ll make it, \'D you like some tea? We\'Ve a\'lL')
SMOLLM_CHKHSH = "855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249"

# The Split regexes of Llama 3's and Qwen2's tokenizer.json.
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
            r"\s*[\r\n]+|\s+(?!\S)|\s+")

GGUF_CONTROL, GGUF_USER_DEFINED = 3, 4


# ------------------------------------------------------------- the fixture
def read_gguf(path):
    """tokens, merges, token types, pre-tokenizer name, BOS, EOS and add_bos of the GGUF file."""
    import gguf
    r = gguf.GGUFReader(path)

    def field(key):
        f = r.fields.get(key)
        if f is None:
            return None
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            if f.types[1] == gguf.GGUFValueType.STRING:
                return [bytes(f.parts[i]) for i in f.data]
            return [int(f.parts[i][0]) for i in f.data]
        if f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode("utf-8")
        return f.parts[f.data[0]].tolist()[0]

    return {
        "model": field("tokenizer.ggml.model"),
        "tokens": field("tokenizer.ggml.tokens"),
        "merges": field("tokenizer.ggml.merges"),
        "types": field("tokenizer.ggml.token_type"),
        "pre": field("tokenizer.ggml.pre"),
        "bos": field("tokenizer.ggml.bos_token_id"),
        "eos": field("tokenizer.ggml.eos_token_id"),
        "add_bos": field("tokenizer.ggml.add_bos_token"),
    }


def hf_tokenizer(g, pre, post=None, ignore_merges=False):
    """HF tokenizers' BPE on the GGUF vocabulary with pre-tokenizer PRE."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    tokens = [t.decode("utf-8") for t in g["tokens"]]
    merges = [tuple(m.decode("utf-8").split(" ", 1)) for m in g["merges"]]
    tk = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges, ignore_merges=ignore_merges))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pre in ("smollm", "gpt-2"))
    if pre == "smollm":
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif pre == "gpt-2":
        tk.pre_tokenizer = byte_level
    else:
        split = pre_tokenizers.Split(Regex(LLAMA3_RE if pre == "llama-bpe" else QWEN2_RE), "isolated")
        tk.pre_tokenizer = pre_tokenizers.Sequence([split, byte_level])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                           for i, t in enumerate(g["types"]) if t in (GGUF_CONTROL, GGUF_USER_DEFINED)])
    if post:
        tk.post_processor = post
    return tk


def template(single, token, token_id):
    from tokenizers import processors
    return processors.TemplateProcessing(single=single, special_tokens=[(token, token_id)])


def write_arrays(g, out_dir):
    """The GGUF arrays as tests/tokenize_bpe_lines --arrays reads them."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokens.hex"), "w") as f:
        f.writelines(t.hex() + "\n" for t in g["tokens"])
    with open(os.path.join(out_dir, "merges.hex"), "w") as f:
        f.writelines(m.hex() + "\n" for m in g["merges"])
    specials = [i for i, t in enumerate(g["types"]) if t in (GGUF_CONTROL, GGUF_USER_DEFINED)]
    with open(os.path.join(out_dir, "options.txt"), "w") as f:
        f.write("pre %s\nbos %d\neos %d\nadd_bos %d\nadd_eos 0\nspecial %s\n" % (
            g["pre"], g["bos"], g["eos"], int(bool(g["add_bos"])), " ".join(map(str, specials))))


def with_string_merges(src, dst):
    """The same tokenizer.json with merges in the older "a b" form."""
    with open(src, encoding="utf-8") as f:
        d = json.load(f)
    d["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in d["model"]["merges"]]
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(d, f, ensure_ascii=False)


# ------------------------------------------------------------- the corpus: BPE's own cases
CODE_LINES = [
    "def main(argv):", "    return 0", "\tif (x != NULL) {", "\t\tfree(x);", "}", "#include <stdio.h>",
    "for (int i = 0; i < n; i++) sum += a[i] * b[i];", "x = {'key': [1, 2.5, -3e10], \"b\": None}",
    "    # a comment with trailing spaces   ", "// TODO(someone): fix this!!!", "/* block */",
    "if __name__ == \"__main__\":", "    print(f\"{name!r:>10}\")", "const f = (a, b) => a ?? b;",
    "SELECT * FROM t WHERE id >= 42 AND name LIKE '%abc%';", "$ ls -la | grep '^d' > out.txt 2>&1",
    "<div class=\"x\">&nbsp;</div>", "    }\r\n", "a += b << 2 | c & ~d ^ e;", "    ...", "0x1F, 0b1010, 1_000_000",
    "\"\"\"docstring\"\"\"", "```python", "```", "    - item: value", "key = \"value\"  # ok",
]
NUMBERS = ["0", "7", "42", "123", "1234", "12345", "3.14159", "-0.5", "1e-10", "2.5E+3", "1,234,567", "1.234.567,89",
           "0xDEADBEEF", "2024-08-08", "12:34:56", "+1 (555) 123-4567", "100%", "$3.50", "€1.000", "v1.2.3",
           "٣٤٥", "३४५", "１２３", "²³", "½¾", "ⅫⅣ", "①②", "𝟙𝟚𝟛", "੧੨", "๑๒๓"]
CONTRACTIONS = ["I've", "I'VE", "we'll", "we'LL", "'s", "'S", "'ſ", "he's", "HE'S", "it'd", "they're", "'Re",
                "O'Neil", "rock'n'roll", "''", "'", "'m", "'t", "don't", "DON'T", "y'all", "'ll'll"]
WORDS_PUNCT = [".", ",", "!", "?", "...", "!!", ":", ";", "-", "--", "(", ")", "\"", "'", "`", "~", "@", "#"]


def special_texts(g):
    specials = [t.decode("utf-8") for t, ty in zip(g["tokens"], g["types"])
                if ty in (GGUF_CONTROL, GGUF_USER_DEFINED)]
    near = []
    for s in specials[:6]:
        near += [s[:-1], s[1:], s.upper(), s[:2] + " " + s[2:], s + s[-1]]
    return specials, near


def gen_special(rng, specials, near):
    parts = []
    for _ in range(rng.randint(1, 10)):
        r = rng.random()
        if r < 0.3:
            parts.append(rng.choice(specials))
        elif r < 0.4:
            parts.append(rng.choice(near))
        elif r < 0.7:
            parts.append(spgen.ascii_word(rng))
        elif r < 0.8:
            parts.append(spgen.script_word(rng, rng.choice(sorted(spgen.SCRIPTS))))
        elif r < 0.9:
            parts.append(rng.choice(spgen.WHITESPACE))
        else:
            parts.append(spgen.emoji_item(rng))
    if rng.random() < 0.3:  # a chat turn
        parts = ["<|im_start|>", rng.choice(["system", "user", "assistant"]), "\n"] + parts + ["<|im_end|>", "\n"]
    return "".join(parts) if rng.random() < 0.6 else " ".join(parts)


def gen_code(rng):
    lines = [rng.choice(CODE_LINES) for _ in range(rng.randint(1, 8))]
    if rng.random() < 0.3:
        lines = [" " * rng.randint(0, 12) + line.strip() for line in lines]
    return rng.choice(["\n", "\r\n", "\n\n"]).join(lines) + rng.choice(["", "\n", "  ", "\t"])


def gen_digits(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.4:
            parts.append(rng.choice(NUMBERS))
        elif r < 0.6:
            parts.append("".join(rng.choice(spgen.DIGITS) for _ in range(rng.randint(1, 25))))
        elif r < 0.8:  # letters and digits run together
            parts.append(spgen.ascii_word(rng) + rng.choice(NUMBERS) + spgen.ascii_word(rng))
        else:
            parts.append(spgen.ascii_word(rng))
    return spgen.join_words(rng, parts)


def gen_contractions(rng):
    words = []
    for _ in range(rng.randint(1, 8)):
        w = spgen.ascii_word(rng) if rng.random() < 0.5 else ""
        words.append(w + rng.choice(CONTRACTIONS) + (rng.choice(WORDS_PUNCT) if rng.random() < 0.3 else ""))
    return rng.choice([" ", "", "\n"]).join(words)


def gen_punct_newlines(rng):
    out = []
    for _ in range(rng.randint(1, 10)):
        r = rng.random()
        if r < 0.4:
            out.append("".join(rng.choice(WORDS_PUNCT) for _ in range(rng.randint(1, 5))))
        elif r < 0.7:
            out.append(rng.choice(["\n", "\r\n", "\n\n", " \n", "\t\n", "\r", "\n \n"]))
        else:
            out.append(spgen.ascii_word(rng))
        if rng.random() < 0.3:
            out.append(" " * rng.randint(1, 3))
    return "".join(out)


def byte_decoder():
    """GPT-2's bytes_to_unicode, inverted: symbol -> byte."""
    dec, n = {}, 0
    for b in range(256):
        printable = 0x21 <= b <= 0x7e or 0xa1 <= b <= 0xac or 0xae <= b <= 0xff
        dec[chr(b) if printable else chr(0x100 + n)] = b
        n += not printable
    return dec


def missing_bytes(g):
    """The bytes whose one-symbol token the vocabulary lacks."""
    vocab = set(t.decode("utf-8") for t in g["tokens"])
    return bytes(b for c, b in byte_decoder().items() if c not in vocab)


def build_corpus(g):
    """(category, text) pairs: the SentencePiece test's corpus, then BPE's own categories."""
    byte_decoder_ = byte_decoder()
    pieces = []
    for t, ty in zip(g["tokens"], g["types"]):
        text = t.decode("utf-8")
        if ty == 1 and all(c in byte_decoder_ for c in text):
            try:
                pieces.append(bytes(byte_decoder_[c] for c in text).decode("utf-8"))
            except UnicodeDecodeError:
                pass
    rng = random.Random(SEED)
    corpus = [("reference", CHKTXT)] + spgen.build_corpus(rng, pieces)
    specials, near = special_texts(g)
    plan = [("special_in_text", lambda r: gen_special(r, specials, near), 1500), ("code", gen_code, 1500),
            ("digits", gen_digits, 1000), ("contractions", gen_contractions, 800),
            ("punct_newlines", gen_punct_newlines, 800)]
    for name, gen, count in plan:
        corpus += [(name, gen(rng)) for _ in range(count)]
    return corpus


# ------------------------------------------------------------- comparing
def run_helper(helper, mode, arg, corpus_file, out_file):
    """(ids, decoded bytes) per string from tests/tokenize_bpe_lines, or an error text."""
    with open(corpus_file, "rb") as f:
        res = subprocess.run([helper, mode, arg], stdin=f, capture_output=True)
    with open(out_file, "wb") as f:
        f.write(res.stdout)
    if res.returncode != 0:
        return None, "%s exited %d: %s" % (helper, res.returncode, res.stderr.decode("utf-8", "replace").strip())
    rows = []
    for line in res.stdout.decode("ascii").split("\n")[:-1]:
        ids, _, back = line.partition("\t")
        rows.append(([int(x) for x in ids.split()], bytes.fromhex(back)))
    return rows, None


def compare(label, corpus, rows, want, expect_back):
    """Prints the first mismatches; returns (id mismatches, round-trip failures).
    expect_back(s): the bytes decode(encode(s)) must give."""
    if len(rows) != len(corpus):
        print("FAIL: %s: %d lines for %d strings" % (label, len(rows), len(corpus)))
        return len(corpus), 0
    bad, trips, shown = {}, 0, 0
    for (name, s), (got, back), w in zip(corpus, rows, want):
        if back != expect_back(s):
            trips += 1
            if shown < 5:
                shown += 1
                print("ROUND TRIP [%s] %s: %r decodes to %r" % (label, name, s[:200], back[:200]))
        if got == w:
            continue
        bad[name] = bad.get(name, 0) + 1
        if shown < 5:
            shown += 1
            at = next((i for i, (a, b) in enumerate(zip(got, w)) if a != b), min(len(got), len(w)))
            print("MISMATCH [%s] [%s] %r" % (label, name, s if len(s) <= 200 else s[:200] + "..."))
            print("  first difference at id %d" % at)
            print("  runahead:        %s" % spgen.show_ids(got, at))
            print("  HF tokenizers:   %s" % spgen.show_ids(w, at))
    n_bad = sum(bad.values())
    print("%s: %d of %d strings (%d ids) match HF tokenizers; %d decode to other bytes than expected"
          % (label, len(corpus) - n_bad, len(corpus), sum(len(x) for x in want), trips))
    if n_bad:
        print("  mismatches by category: " + ", ".join("%s %d" % kv for kv in sorted(bad.items())))
    return n_bad, trips


def check_fingerprint(label, ids):
    got = hashlib.sha256(str(ids).encode()).hexdigest()
    if got != SMOLLM_CHKHSH:
        print("FAIL: %s: llama.cpp's fingerprint text hashes to %s, not smollm's %s" % (label, got, SMOLLM_CHKHSH))
        return 1
    print("%s: llama.cpp's fingerprint of the smollm pre-tokenizer matches (%d ids)" % (label, len(ids)))
    return 0


def main():
    if len(sys.argv) != 4:
        print("usage: tokenizer_bpe.py HELPER SMOLLM2.gguf TMPDIR", file=sys.stderr)
        return 1
    helper, gguf_path, tmp = sys.argv[1:]
    try:
        import gguf  # noqa: F401
        import tokenizers
    except ImportError as e:
        print("skip: %s cannot import the gguf and tokenizers packages (%s); jobs/setup installs them with pip"
              % (sys.executable, e))
        return 77
    t0 = time.time()
    g = read_gguf(gguf_path)
    if g["model"] != "gpt2" or g["pre"] != "smollm":
        print("FAIL: %s: tokenizer %r with pre-tokenizer %r, not SmolLM2's gpt2/smollm" % (gguf_path, g["model"],
                                                                                          g["pre"]))
        return 1
    corpus = build_corpus(g)
    texts = [s for _, s in corpus]
    counts = {}
    for name, _ in corpus:
        counts[name] = counts.get(name, 0) + 1
    print("corpus: %d strings, %d characters, seed %d (tokenizers %s, %d tokens, %d merges)"
          % (len(corpus), sum(map(len, texts)), SEED, tokenizers.__version__, len(g["tokens"]), len(g["merges"])))
    print("  " + ", ".join("%s %d" % kv for kv in counts.items()))
    if len(corpus) < MIN_CORPUS:
        print("FAIL: the corpus has %d strings, fewer than %d" % (len(corpus), MIN_CORPUS))
        return 1
    corpus_file = os.path.join(tmp, "corpus.hex")
    with open(corpus_file, "w", encoding="ascii") as f:
        f.writelines(s.encode("utf-8").hex() + "\n" for s in texts)

    eot, im_end = 0, 2  # <|endoftext|> as a BOS, <|im_end|> as an EOS, to try both templates
    configs = [  # pre-tokenizer, HF tokenizer, the text its template adds before and after
        ("smollm", hf_tokenizer(g, "smollm"), b"", b""),
        ("gpt-2", hf_tokenizer(g, "gpt-2"), b"", b""),
        ("llama-bpe", hf_tokenizer(g, "llama-bpe", template("<|endoftext|> $A", "<|endoftext|>", eot), True),
         b"<|endoftext|>", b""),
        ("qwen2", hf_tokenizer(g, "qwen2", template("$A <|im_end|>", "<|im_end|>", im_end)), b"", b"<|im_end|>"),
    ]
    dropped = missing_bytes(g)
    n_dropping = sum(1 for s in texts if any(b in dropped for b in s.encode("utf-8")))
    print("%d bytes have no token (%s): %d strings lose them, in HF and here"
          % (len(dropped), " ".join("%02x" % b for b in dropped), n_dropping))
    runs = []
    for pre, tk, before, after in configs:
        def expect_back(s, before=before, after=after):
            return before + bytes(b for b in s.encode("utf-8") if b not in dropped) + after
        path = os.path.join(tmp, "tokenizer-%s.json" % pre)
        tk.save(path)
        runs.append(("%s tokenizer.json, [a, b] merges" % pre, tk, expect_back, "--json", path))
        if pre == "smollm":
            with_string_merges(path, os.path.join(tmp, "tokenizer-smollm-strings.json"))
            runs.append(("smollm tokenizer.json, \"a b\" merges", tk, expect_back, "--json",
                         os.path.join(tmp, "tokenizer-smollm-strings.json")))
            write_arrays(g, os.path.join(tmp, "arrays"))
            runs.append(("smollm GGUF arrays, ra_bpe_init", tk, expect_back, "--arrays",
                         os.path.join(tmp, "arrays")))

    failures = check_fingerprint("HF tokenizers on the GGUF vocabulary", configs[0][1].encode(CHKTXT).ids)
    total_bad = total_trips = 0
    want_cache = {}
    for i, (label, tk, expect_back, mode, arg) in enumerate(runs):
        if id(tk) not in want_cache:
            want_cache[id(tk)] = [e.ids for e in tk.encode_batch(texts, add_special_tokens=True)]
        rows, err = run_helper(helper, mode, arg, corpus_file, os.path.join(tmp, "runahead-%d.out" % i))
        if err:
            print("FAIL: %s: %s" % (label, err))
            failures += 1
            continue
        if label.startswith("smollm"):
            failures += check_fingerprint("runahead, " + label, rows[0][0])
        bad, trips = compare(label, corpus, rows, want_cache[id(tk)], expect_back)
        total_bad += bad
        total_trips += trips
    print("tokenizer_bpe: %d strings x %d tokenizers: %d id mismatches, %d round-trip failures, in %.1f s"
          % (len(corpus), len(runs), total_bad, total_trips, time.time() - t0))
    return 1 if failures or total_bad or total_trips else 0


if __name__ == "__main__":
    sys.exit(main())
