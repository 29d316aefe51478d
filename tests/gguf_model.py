#!/usr/bin/env python3
"""tests/gguf_model.sh's vocabulary lookup, on llama.cpp's gguf-py:

  gguf_model.py GGUF PIECE...   the ids of vocabulary pieces (byte-level strings,
                                "Ġ" for a space) in the file's tokenizer.ggml.tokens
Exits 77 where gguf cannot be imported."""
import sys

try:
    import gguf
except ImportError:
    sys.exit(77)

f = gguf.GGUFReader(sys.argv[1]).fields["tokenizer.ggml.tokens"]
vocab = {bytes(f.parts[i]).decode("utf-8"): n for n, i in enumerate(f.data)}
print(" ".join(str(vocab[p]) for p in sys.argv[2:]))
