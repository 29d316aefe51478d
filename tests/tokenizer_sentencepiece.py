"""Compares runahead's tokenizer with the sentencepiece library on a seeded corpus.

Run by tests/tokenizer_sentencepiece.sh:
    python3 tokenizer_sentencepiece.py HELPER TOKENIZER.bin TOKENIZER.model TMPDIR

Builds a deterministic corpus (fixed seed) of ASCII, UTF-8 in several scripts,
emoji, whitespace runs, byte-fallback cases, edge cases and long strings;
encodes it with HELPER (tests/tokenize_lines: runahead's encoder, BOS first, as
--tokenize-only does) and with sentencepiece (encode with add_bos=True), and
compares the ids. Exit 0 when every string matches, 1 on any mismatch or error,
77 when the sentencepiece package cannot be imported.
"""
import os
import random
import subprocess
import sys
import time

SEED = 20240808
MIN_CORPUS = 20000


def chars(*ranges):
    """The characters of the inclusive code point ranges."""
    return [chr(c) for lo, hi in ranges for c in range(lo, hi + 1)]


# ------------------------------------------------------------- alphabets
ASCII_WORDS = """the of and to in is you that it he was for on are as with his they I at be this
have from or one had by word but not what all were we when your can said there use an each which
she do how their if will up other about out many then them these so some her would make like him
into time has look two more write go see number no way could people my than first water been call
who oil its now find long down day did get come made may part Hello World meaning life theory
relativity states simply put believe token tokenizer SentencePiece Llama prefill runahead MPI
function return struct int float printf malloc free http https www com org JSON XML HTML CSS API
""".split()
PUNCT = list(".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`")
DIGITS = list("0123456789")
ASCII_PRINTABLE = chars((0x20, 0x7E))

SCRIPTS = {
    "latin_diacritics": chars((0x00C0, 0x00D6), (0x00D8, 0x00F6), (0x00F8, 0x017F), (0x0180, 0x024F)),
    "cyrillic": chars((0x0400, 0x04FF)),
    "greek": chars((0x0386, 0x0386), (0x0388, 0x038A), (0x038C, 0x038C), (0x038E, 0x03A1),
                   (0x03A3, 0x03CE), (0x1F00, 0x1F15)),
    "cjk": chars((0x4E00, 0x9FFF), (0x3040, 0x309F), (0x30A0, 0x30FF), (0x3000, 0x303F)),
    "arabic": chars((0x0600, 0x06FF)),
    "hebrew": chars((0x0591, 0x05C7), (0x05D0, 0x05EA), (0x05F0, 0x05F4)),
    "devanagari": chars((0x0900, 0x097F)),
    "thai": chars((0x0E01, 0x0E3A), (0x0E3F, 0x0E5B)),
    "korean": chars((0xAC00, 0xD7A3), (0x1100, 0x11FF), (0x3130, 0x318F)),
}
# Real words, so that the common multi-character pieces of each script merge.
SCRIPT_WORDS = {
    "latin_diacritics": "café naïve façade déjà vu Ångström Zürich São Paulo señor mañana œuvre "
                        "Łódź Dvořák Kraków Ελλάδα résumé über straße crème brûlée jalapeño".split(),
    "cyrillic": "привет мир Москва язык программирования Россия спасибо здравствуйте "
                "Україна Київ български".split(),
    "greek": "γειά σου κόσμε Αθήνα φιλοσοφία λόγος αλφάβητο".split(),
    "cjk": "中文 你好 世界 日本語 東京 こんにちは カタカナ ひらがな 漢字 北京 上海 人工智能 "
           "機械学習".split(),
    "arabic": "مرحبا العالم اللغة العربية القاهرة شكرا".split(),
    "hebrew": "שלום עולם עברית ירושלים תודה".split(),
    "devanagari": "नमस्ते दुनिया हिन्दी भाषा भारत धन्यवाद".split(),
    "thai": "สวัสดี ภาษาไทย กรุงเทพ ขอบคุณ".split(),
    "korean": "안녕하세요 세계 한국어 서울 감사합니다".split(),
}

EMOJI = chars((0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F680, 0x1F6FF), (0x1F900, 0x1F9FF),
              (0x2600, 0x26FF), (0x2700, 0x27BF))
PEOPLE = chars((0x1F466, 0x1F469), (0x1F44B, 0x1F450), (0x1F64B, 0x1F64F), (0x1F9D1, 0x1F9D3))
SKIN_TONES = chars((0x1F3FB, 0x1F3FF))
ZWJ, VS16 = "\u200d", "\ufe0f"
ZWJ_SEQUENCES = ["👨\u200d👩\u200d👧\u200d👦", "👩\u200d❤️\u200d👨", "🏳️\u200d🌈", "❤️\u200d🔥",
                 "🧑\u200d💻", "👩🏽\u200d🚀", "🐻\u200d❄️", "👁️\u200d🗨️", "🏴\u200d☠️"]
REGIONAL = chars((0x1F1E6, 0x1F1FF))

WHITESPACE = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \t ", "\v", "\f",
              "\u00a0", "\u3000", "\u2009", "\u200b", "\u2581", "\u2581\u2581", " \u2581"]

# Byte fallback: characters the vocabulary lacks, so SentencePiece writes their UTF-8 bytes.
RARE = {
    "cjk_ext_b": chars((0x20000, 0x2A6DF)),
    "private_use": chars((0xE000, 0xF8FF), (0xF0000, 0xF00FF), (0x100000, 0x1000FF)),
    "control": chars((0x01, 0x1F), (0x7F, 0x9F)),
    "symbols": chars((0x2200, 0x22FF), (0x1D400, 0x1D4FF), (0x13000, 0x1307F), (0x10900, 0x1091F),
                     (0x16A0, 0x16F0), (0xA000, 0xA48C)),
    "specials": ["\ufffd", "\ufeff", "\u2028", "\u2029", "\u202e", "\u0301", "\u0308", "\ufffe",
                 "\uffff", "\U0010ffff", "\U000e0001"],
}
EDGE = ["", " ", "  ", "\n", "\t", "a", "A", "1", ".", "<s>", "</s>", "<unk>", "<0x41>", "<0x0A>",
        "<0xZZ>", "<s", "\u2581", "\u2581\u2581", "\u2581a", "a\u2581", "\u2047", " \u2047 ",
        "\u00a0", "\ufffd", "'s", " 's", "Hello world", "Hello  world", " Hello", "Hello ",
        "\nHello", "Hello\n", "0", "00", "000", "12345678901234567890", "...", "—", "\u2019"]


def valid_codepoint(rng):
    """A random scalar value other than NUL and the surrogates, anywhere in Unicode."""
    while True:
        c = rng.randrange(1, 0x110000) if rng.random() < 0.5 else rng.randrange(1, 0x10000)
        if not 0xD800 <= c <= 0xDFFF:
            return chr(c)


def ascii_word(rng):
    r = rng.random()
    if r < 0.6:
        w = rng.choice(ASCII_WORDS)
    elif r < 0.8:
        w = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 12)))
    else:
        w = "".join(rng.choice(DIGITS) for _ in range(rng.randint(1, 10)))
    r = rng.random()
    if r < 0.15:
        w = w.upper()
    elif r < 0.35:
        w = w.capitalize()
    return w


def join_words(rng, words):
    out = []
    for i, w in enumerate(words):
        if i:
            out.append(rng.choice([" ", " ", " ", " ", "", "  ", "\n", "\t", ", ", ". ", "-"]))
        out.append(w)
        if rng.random() < 0.15:
            out.append(rng.choice(PUNCT))
    return "".join(out)


def script_word(rng, script):
    if rng.random() < 0.5:
        return rng.choice(SCRIPT_WORDS[script])
    return "".join(rng.choice(SCRIPTS[script]) for _ in range(rng.randint(1, 8)))


def emoji_item(rng):
    r = rng.random()
    if r < 0.35:
        return rng.choice(EMOJI) + (VS16 if rng.random() < 0.2 else "")
    if r < 0.55:
        return rng.choice(PEOPLE) + rng.choice(SKIN_TONES)
    if r < 0.75:
        return rng.choice(ZWJ_SEQUENCES)
    if r < 0.9:  # a random ZWJ chain, with skin tones sometimes
        parts = [rng.choice(PEOPLE) + (rng.choice(SKIN_TONES) if rng.random() < 0.4 else "")
                 for _ in range(rng.randint(2, 4))]
        return ZWJ.join(parts)
    if r < 0.95:
        return rng.choice(REGIONAL) + rng.choice(REGIONAL)  # a flag
    return rng.choice("0123456789#*") + VS16 + "\u20e3"  # a keycap


# ------------------------------------------------------------- the corpus
def gen_ascii_words(rng):
    return join_words(rng, [ascii_word(rng) for _ in range(rng.randint(1, 20))])


def gen_ascii_random(rng):
    return "".join(rng.choice(ASCII_PRINTABLE) for _ in range(rng.randint(1, 60)))


def make_gen_script(script):
    def gen(rng):
        words = [script_word(rng, script) for _ in range(rng.randint(1, 10))]
        if rng.random() < 0.3:  # with some ASCII in between
            words.insert(rng.randint(0, len(words)), ascii_word(rng))
        return join_words(rng, words)
    return gen


def gen_mixed_scripts(rng):
    words = []
    for _ in range(rng.randint(2, 12)):
        r = rng.random()
        if r < 0.25:
            words.append(ascii_word(rng))
        elif r < 0.85:
            words.append(script_word(rng, rng.choice(sorted(SCRIPTS))))
        else:
            words.append(emoji_item(rng))
    return join_words(rng, words)


def gen_emoji(rng):
    items = []
    for _ in range(rng.randint(1, 8)):
        items.append(emoji_item(rng) if rng.random() < 0.7 else ascii_word(rng))
    return rng.choice(["", " "]).join(items) if rng.random() < 0.5 else join_words(rng, items)


def gen_whitespace(rng):
    r = rng.random()
    if r < 0.2:  # whitespace only
        return "".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 6)))
    if r < 0.4:  # a run of one kind
        return rng.choice([" ", "\t", "\n"]) * rng.randint(1, 40)
    lead = "".join(rng.choice(WHITESPACE) for _ in range(rng.randint(0, 3)))
    trail = "".join(rng.choice(WHITESPACE) for _ in range(rng.randint(0, 3)))
    middle = []
    for _ in range(rng.randint(1, 8)):
        middle.append(ascii_word(rng) if rng.random() < 0.7 else script_word(rng, rng.choice(sorted(SCRIPTS))))
        middle.append(rng.choice(WHITESPACE) * rng.randint(1, 4))
    return lead + "".join(middle[:-1]) + trail


def gen_byte_fallback(rng):
    parts = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.6:
            kind = rng.choice(sorted(RARE))
            parts.append("".join(rng.choice(RARE[kind]) for _ in range(rng.randint(1, 4))))
        elif r < 0.8:
            parts.append(ascii_word(rng))
        else:
            parts.append(rng.choice(WHITESPACE))
    return "".join(parts) if rng.random() < 0.5 else " ".join(parts)


def gen_codepoints(rng):
    return "".join(valid_codepoint(rng) for _ in range(rng.randint(1, 3)))


def make_gen_pieces(pieces):
    def gen(rng):  # vocabulary pieces run together: many competing merges
        s = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 10)))
        return s.replace("\u2581", " ") if rng.random() < 0.8 else s
    return gen


def gen_long(rng):
    gens = [gen_ascii_words, gen_mixed_scripts, gen_emoji, gen_whitespace, gen_byte_fallback,
            gen_codepoints, gen_ascii_random]
    target = rng.randint(1000, 20000)
    out, n = [], 0
    while n < target:
        s = rng.choice(gens)(rng)
        out.append(s)
        n += len(s)
    return rng.choice(["", " ", "\n"]).join(out)


def build_corpus(rng, pieces):
    """(category, text) pairs: the plan gives each category's generator and count."""
    plan = [("edge", None, len(EDGE)),
            ("ascii_single_char", None, 127),
            ("ascii_words", gen_ascii_words, 3000),
            ("ascii_random", gen_ascii_random, 2000)]
    plan += [("script_" + s, make_gen_script(s), 700) for s in sorted(SCRIPTS)]
    plan += [("mixed_scripts", gen_mixed_scripts, 1500),
             ("emoji", gen_emoji, 2000),
             ("whitespace", gen_whitespace, 2500),
             ("byte_fallback", gen_byte_fallback, 2500),
             ("codepoints", gen_codepoints, 2000),
             ("vocab_pieces", make_gen_pieces(pieces), 2000),
             ("long", gen_long, 60)]
    corpus = []
    for name, gen, count in plan:
        if name == "edge":
            corpus += [(name, s) for s in EDGE]
        elif name == "ascii_single_char":
            corpus += [(name, chr(c)) for c in range(1, 128)]
        else:
            corpus += [(name, gen(rng)) for _ in range(count)]
    return corpus


# ------------------------------------------------------------- comparing
def show_ids(ids, at, width=12):
    """The ids around index at, so that a long mismatch stays readable."""
    lo = max(0, at - width // 2)
    hi = min(len(ids), lo + width)
    return "%s%s%s (%d ids)" % ("... " if lo else "", ids[lo:hi], " ..." if hi < len(ids) else "",
                                len(ids))


def main():
    if len(sys.argv) != 5:
        print("usage: tokenizer_sentencepiece.py HELPER TOKENIZER.bin TOKENIZER.model TMPDIR",
              file=sys.stderr)
        return 1
    helper, tok_bin, tok_model, tmp = sys.argv[1:]
    try:
        import sentencepiece
    except ImportError as e:
        print("skip: the sentencepiece package cannot be imported by %s (%s); "
              "jobs/setup installs it with pip" % (sys.executable, e))
        return 77

    t0 = time.time()
    sp = sentencepiece.SentencePieceProcessor(model_file=tok_model)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())
              if sp.is_unknown(i) + sp.is_control(i) + sp.is_byte(i) == 0]
    corpus = build_corpus(random.Random(SEED), pieces)
    counts = {}
    for name, _ in corpus:
        counts[name] = counts.get(name, 0) + 1
    n_chars = sum(len(s) for _, s in corpus)
    print("corpus: %d strings, %d characters, seed %d (sentencepiece %s)"
          % (len(corpus), n_chars, SEED, sentencepiece.__version__))
    print("  " + ", ".join("%s %d" % kv for kv in counts.items()))
    if len(corpus) < MIN_CORPUS:
        print("FAIL: the corpus has %d strings, fewer than %d" % (len(corpus), MIN_CORPUS))
        return 1

    # The helper reads one string per line as the hex of its UTF-8 bytes.
    # Both files stay in TMPDIR for a look after a failure.
    corpus_file = os.path.join(tmp, "corpus.hex")
    with open(corpus_file, "w", encoding="ascii") as f:
        f.writelines(s.encode("utf-8").hex() + "\n" for _, s in corpus)
    with open(corpus_file, "rb") as f:
        res = subprocess.run([helper, tok_bin], stdin=f, capture_output=True)
    with open(os.path.join(tmp, "runahead.ids"), "wb") as f:
        f.write(res.stdout)
    if res.returncode != 0:
        print("FAIL: %s exited %d: %s" % (helper, res.returncode,
                                          res.stderr.decode("utf-8", "replace").strip()))
        return 1
    lines = res.stdout.decode("ascii").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != len(corpus):
        print("FAIL: %s printed %d lines for %d strings" % (helper, len(lines), len(corpus)))
        return 1
    got = [[int(x) for x in line.split()] for line in lines]
    want = sp.encode([s for _, s in corpus], add_bos=True)

    bad = {}
    shown = 0
    for (name, s), g, w in zip(corpus, got, want):
        if g == w:
            continue
        bad[name] = bad.get(name, 0) + 1
        if shown < 5:
            shown += 1
            at = next((i for i, (a, b) in enumerate(zip(g, w)) if a != b), min(len(g), len(w)))
            text = repr(s) if len(s) <= 200 else "%r... (%d characters)" % (s[:200], len(s))
            print("MISMATCH [%s] %s" % (name, text))
            print("  first difference at id %d" % at)
            print("  runahead:      %s" % show_ids(g, at))
            print("  sentencepiece: %s" % show_ids(w, at))
    n_bad = sum(bad.values())
    n_ids = sum(len(w) for w in want)
    print("%d of %d strings (%d ids) match sentencepiece in %.1f s"
          % (len(corpus) - n_bad, len(corpus), n_ids, time.time() - t0))
    if n_bad:
        print("FAIL: %d mismatch(es): %s" % (n_bad, ", ".join("%s %d" % kv for kv in bad.items())))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
