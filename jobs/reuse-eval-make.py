#!/usr/bin/env python3
"""reuse-eval-make: the evaluation set of jobs/reuse-quality, made deterministically.

    jobs/reuse-eval-make.py OUTDIR [--requests N] [--seed S]

Writes OUTDIR/req-NNN.json, one request per file in the format of src/reuse/request.h
({"system", "chunks": [...], "question"}), and OUTDIR/manifest.jsonl: per request its file, the
question's kind, the gold answer, the documents holding the facts and each chunk's source.

Every request has 4-8 documents (chunks) of real English text found on this machine (the
licences in /usr/share/common-licenses, the documentation strings of Python's standard library)
with made-up facts about made-up names put into them, so that the answer needs one or two
earlier documents, in the spirit of CacheBlend's example (one document gives one player's goals,
another the other's: who scored more?). Four kinds of question, in turn:
  compare   document i gives A's count, document j > i gives B's: which is larger?
  lookup    an early document gives A's count among later distractors with other names: A's count?
  twohop    document i: X was designed by P; document j: P was born in C. Where was X's designer born?
  attribute document i: P plays instrument I in a band; which instrument does P play?
The fact documents are never the last one, so the answer always needs a chunk that sits before
the others. A chunk is 70-150 words of text (about 90-200 tokens with SmolLM2's tokenizer).
The same machine (Python version, licence files) and seed give the same files: the sources are
read in a fixed order, and the only randomness is random.Random(seed). Python stdlib only.
"""
import argparse
import gzip
import importlib
import inspect
import json
import os
import random
import re
import sys

MANPAGES = ["bash", "find", "less", "ssh", "grep", "tar", "git", "gzip"]
LICENCES = ["GPL-3", "Apache-2.0", "MPL-2.0", "LGPL-2.1", "GFDL-1.3", "Artistic", "GPL-2"]
MODULES = ["argparse", "asyncio", "bisect", "calendar", "collections", "contextlib", "csv", "dataclasses",
           "datetime", "decimal", "difflib", "doctest", "email", "enum", "fractions", "functools", "heapq",
           "http.client", "inspect", "itertools", "json", "logging", "pathlib", "pickle", "random", "re",
           "shutil", "sqlite3", "statistics", "string", "subprocess", "tarfile", "tempfile", "textwrap",
           "threading", "typing", "unittest", "urllib.parse", "xml.etree.ElementTree", "zipfile"]

SYSTEM = ("You are a helpful assistant. Answer the question using the documents the user gives. "
          "Answer in a few words.")

ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "kl", "st", "tr"]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "io"]
CODAS = ["", "", "n", "r", "l", "s", "th", "m", "nd", "rk"]


def prose(par):
    """A paragraph of running English: long enough, few code-like words."""
    words = par.split()
    if len(words) < 20 or ">>>" in par or "::" in par:
        return False
    plain = sum(1 for w in words if re.fullmatch(r"[A-Za-z][a-z'-]*[,.;:!?)]?", w))
    return plain >= 0.8 * len(words)


def paragraphs(text):
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]


def licence_sources():
    for name in LICENCES:
        path = os.path.join("/usr/share/common-licenses", name)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                pars = [p for p in paragraphs(f.read()) if prose(p)]
        except OSError:
            continue
        if pars:
            yield path, pars


def troff_text(src):
    """Running text of a man page's troff source: macro lines give their words or a paragraph break."""
    out = []
    for line in src.splitlines():
        if line.startswith((".", "'")):
            m = re.match(r"[.'](B|I|BR|RB|IR|RI|BI|IB|SM|SB)\s+(.*)", line)
            if m:
                out.append(m.group(2).replace('"', ""))
            elif re.match(r"[.'](PP|LP|P|SH|SS|TP|IP|HP|sp|br)\b", line):
                out.append("")
            continue
        out.append(line)
    text = "\n".join(out)
    text = re.sub(r"\\f[BIRP]|\\f\(..|\\&|\\\||\\\^|\\s[-+]?\d", "", text)
    text = re.sub(r"\\\(em|\\\(en", "-", text)
    return text.replace("\\-", "-").replace("\\e", "\\")


def manpage_sources():
    for name in MANPAGES:
        path = "/usr/share/man/man1/%s.1.gz" % name
        try:
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
                pars = [p for p in paragraphs(troff_text(f.read())) if prose(p)]
        except OSError:
            continue
        if pars:
            yield "man page %s (%s)" % (name, path), pars


def docstring_sources():
    for name in MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        docs = [inspect.getdoc(mod) or ""]
        for attr in sorted(dir(mod)):
            if attr.startswith("_"):
                continue
            obj = getattr(mod, attr, None)
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and getattr(obj, "__module__", "") == name:
                docs.append(inspect.getdoc(obj) or "")
        pars = [p for d in docs for p in paragraphs(d) if prose(p)]
        if pars:
            yield "Python %d.%d docstrings of %s" % (sys.version_info[0], sys.version_info[1], name), pars


class Filler:
    """Documents of consecutive paragraphs of one source (the next one when it runs out); every
    paragraph is used once, and a source is drawn in proportion to the text it has left."""

    def __init__(self, rng):
        seen, self.sources = set(), []
        for name, pars in list(licence_sources()) + list(manpage_sources()) + list(docstring_sources()):
            pars = [p for p in pars if not (p in seen or seen.add(p))]
            if pars:
                self.sources.append((name, pars))
        if len(self.sources) < 4:
            sys.exit("reuse-eval-make: too little text found (/usr/share/common-licenses, man pages, "
                     "Python's docstrings)")
        self.cursor = [0] * len(self.sources)
        self.rng = rng

    def left(self, i):
        return len(self.sources[i][1]) - self.cursor[i]

    def pick(self):
        weights = [self.left(i) for i in range(len(self.sources))]
        if not any(weights):  # every paragraph used: start again
            self.cursor = [0] * len(self.sources)
            weights = [len(p) for _, p in self.sources]
        return self.rng.choices(range(len(self.sources)), weights)[0]

    def document(self, words):
        i, names, out, n = self.pick(), [], [], 0
        while n < words:
            if not self.left(i):
                i = self.pick()
            name, pars = self.sources[i]
            if name not in names:
                names.append(name)
            take = pars[self.cursor[i]].split()[: words - n]
            self.cursor[i] += 1
            out.append(" ".join(take))
            n += len(take)
        return "; ".join(names), out


class Names:
    """Made-up names, each used once, so the model's own knowledge cannot answer."""

    def __init__(self, rng):
        self.rng, self.used = rng, set()

    def word(self, syllables=2):
        while True:
            w = "".join(self.rng.choice(ONSETS) + self.rng.choice(VOWELS) + self.rng.choice(CODAS)
                        for _ in range(syllables)).capitalize()
            if w not in self.used and 5 <= len(w) <= 11:
                self.used.add(w)
                return w

    def person(self):
        return self.word(2) + " " + self.word(2)


def compare(rng, names, n_docs):
    a, b = names.word(), names.word()
    what = rng.choice([("harbour", "fishing boats", "counted"), ("library", "old maps", "kept"),
                       ("farm", "goats", "raised"), ("club", "goals", "scored")])
    x, y = rng.sample(range(120, 990), 2)
    i = rng.randrange(0, n_docs - 2)
    j = rng.randrange(i + 1, n_docs - 1)
    facts = {i: "Last year the %s of %s %s %d %s." % (what[0], a, what[2], x, what[1]),
             j: "Last year the %s of %s %s %d %s." % (what[0], b, what[2], y, what[1])}
    first, second = (a, b) if rng.random() < 0.5 else (b, a)
    q = "Which %s %s more %s last year, the one of %s or the one of %s?" % (what[0], what[2], what[1], first, second)
    return facts, q, a if x > y else b


def lookup(rng, names, n_docs):
    what = rng.choice([("bridge", "metres long"), ("tower", "steps"), ("lake", "metres deep"), ("road", "kilometres long")])
    i = rng.randrange(0, max(1, n_docs // 2))
    a = names.word()
    facts = {}
    x = rng.randrange(100, 990)
    facts[i] = "The %s of %s is %d %s." % (what[0], a, x, what[1])
    for d in range(i + 1, n_docs - 1):  # distractors: the same kind of fact about other names
        if rng.random() < 0.5:
            facts[d] = "The %s of %s is %d %s." % (what[0], names.word(), rng.randrange(100, 990), what[1])
    unit = what[1].split()[0]
    return facts, "How many %s is the %s of %s?" % (unit, what[0], a) if unit != "steps" else \
        "How many steps does the %s of %s have?" % (what[0], a), str(x)


def twohop(rng, names, n_docs):
    thing = rng.choice(["museum", "theatre", "observatory", "railway station"])
    x, p, c = names.word(), names.person(), names.word()
    i = rng.randrange(0, n_docs - 2)
    j = rng.randrange(i + 1, n_docs - 1)
    facts = {i: "The %s of %s was designed by the architect %s." % (thing, x, p),
             j: "The architect %s was born in the city of %s." % (p, c)}
    if rng.random() < 0.5:  # the two facts in either order of the documents
        facts = {i: facts[j], j: facts[i]}
    return facts, "In which city was the architect of the %s of %s born?" % (thing, x), c


def attribute(rng, names, n_docs):
    inst = rng.sample(["violin", "trumpet", "cello", "flute", "drums", "piano", "harp", "guitar"], 2)
    p, q, band = names.person(), names.person(), names.word()
    i = rng.randrange(0, n_docs - 2)
    j = rng.randrange(i + 1, n_docs - 1)
    facts = {i: "%s plays the %s in the %s Band." % (p, inst[0], band),
             j: "%s plays the %s in the %s Band." % (q, inst[1], band)}
    return facts, "Which instrument does %s play?" % p, inst[0]


KINDS = [("compare", compare), ("lookup", lookup), ("twohop", twohop), ("attribute", attribute)]


def request(rng, filler, names, k):
    kind, make = KINDS[k % len(KINDS)]
    n_docs = rng.randint(4, 8)
    facts, question, gold = make(rng, names, n_docs)
    chunks, sources = [], []
    for d in range(n_docs):
        name, pars = filler.document(rng.randint(70, 150))
        if d in facts:  # the fact between two of the document's paragraphs (or its first words)
            at = rng.randint(1, len(pars)) if len(pars) > 1 else 1
            pars.insert(at, facts[d])
        chunks.append("\n\n".join(pars) + "\n\n")
        sources.append(name)
    req = {"system": SYSTEM, "chunks": chunks, "question": "Question: %s Answer with a name or a number." % question}
    meta = {"kind": kind, "gold": gold, "fact_docs": sorted(facts), "n_chunks": n_docs, "sources": sources}
    return req, meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--seed", type=int, default=22)
    a = ap.parse_args()
    if a.requests < 1:
        sys.exit("reuse-eval-make: --requests must be positive")
    rng = random.Random(a.seed)
    filler, names = Filler(rng), Names(rng)
    os.makedirs(a.outdir, exist_ok=True)
    with open(os.path.join(a.outdir, "manifest.jsonl"), "w", encoding="utf-8") as man:
        for k in range(a.requests):
            req, meta = request(rng, filler, names, k)
            name = "req-%03d.json" % k
            with open(os.path.join(a.outdir, name), "w", encoding="utf-8") as f:
                json.dump(req, f, indent=1, ensure_ascii=False)
                f.write("\n")
            man.write(json.dumps(dict(file=name, question=req["question"], **meta), ensure_ascii=False) + "\n")
    srcs = [s for s, _ in filler.sources]
    print("reuse-eval-make: %d requests in %s, text from %d sources (%s, ...)" % (a.requests, a.outdir, len(srcs),
                                                                                 ", ".join(srcs[:3])))


if __name__ == "__main__":
    main()
