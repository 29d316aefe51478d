#!/usr/bin/env python3
"""The references of tests/vocab_cli.sh and tests/chat_cli.sh: what Hugging Face
transformers, jinja2 (through transformers' own chat-template environment) and
SentencePiece make of the texts and chats runahead is asked to encode.

  vocab_oracle.py smollm2 GGUF OUT   SmolLM2's cases: OUT/text_N.txt (a prompt)
        with OUT/text_N.want (transformers' ids: AutoTokenizer.from_pretrained(dir,
        gguf_file=name)(text)), OUT/chat_N.json (messages) with OUT/chat_N.want
        (apply_chat_template(..., add_generation_prompt=True)); the tokenizer
        saved as OUT/hf/ (tokenizer.json, tokenizer_config.json, chat_template.jinja)
  vocab_oracle.py spm MODEL OUT      a GGUF holding only the SentencePiece
        vocabulary of MODEL (a tokenizer.model: pieces, scores, types, as
        llama.cpp's converter writes them) and Llama 2's chat template, OUT/spm.gguf;
        OUT/text_N.txt with OUT/text_N.want (SentencePiece's ids, BOS first);
        OUT/chat_N.json with OUT/chat_N.want: the template rendered by jinja2, its
        <s> and </s> as their ids and each stretch between them encoded by
        SentencePiece alone (llama.cpp's parse_special rule)
  vocab_oracle.py render GGUF OUT    templates as the models' tokenizer_config.json
        have them (OUT/T.jinja for T in qwen2, chatml, llama2, llama3, and smollm2
        read from GGUF unless it is "")
        and chats (OUT/chat_N.json); OUT/T.chat_N.want is jinja2's rendering,
        OUT/T.chat_N.err where the template raises
  vocab_oracle.py bad OUT            GGUF vocabularies runahead must refuse or
        that lack what is asked of them (see tests/chat_cli.sh)
  vocab_oracle.py seeds OUT          the seeds of tests/fuzz_vocab (tests/corpus/vocab/):
        small SentencePiece and byte-level BPE vocabularies with templates, and the bad ones
Several commands may follow one another in one run (transformers is slow to
import). Exit 0, 1 on an error, 77 where a package it needs cannot be imported."""
import json
import os
import sys

TEXTS = [
    "Hello world",
    "The capital of France is Paris.",
    "  leading spaces, trailing spaces  ",
    "Ünïcödé: naïve café, 日本語のテキスト, Привет мир, emoji 🦙🚀 and ≤ ≥ ∑",
    "digits 3 33 333 3333 12345678 3.14159 -42 1e10",
    "def f(x):\n    return x * 2  # code\n\tif x != 0: print(f'{x}')\n",
    "it's, we've, they'll, I'm, you'd, don't",
    "line one\nline two\r\n\n\nlast",
]
SPECIAL_TEXTS = [  # SmolLM2's special tokens written in the text
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "a<|endoftext|>b <|im_end|> c",
    "<repo_name>x<file_sep>y",
]
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a terse assistant."},
     {"role": "user", "content": "Name three primes."}],
    [{"role": "system", "content": "Be brief."},
     {"role": "user", "content": "Hello"},
     {"role": "assistant", "content": "Hi there! How can I help?"},
     {"role": "user", "content": "  Who are you?  "}],
    [{"role": "user", "content": "Ünïcödé ✅ and code: `x = [1, 2, 3]`\n"},
     {"role": "assistant", "content": "   I am an assistant   "},
     {"role": "user", "content": "Another question"}],
]
BAD_CHATS = [  # the Llama 2 template raises on these
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
]

SMOLLM2_TEMPLATE = None  # read from the GGUF: the file's own text
QWEN2_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                  "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
                  "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
                  "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
CHATML_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                   "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                   "{% endif %}")
LLAMA2_TEMPLATE = (  # meta-llama/Llama-2-7b-chat-hf
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")
LLAMA3_TEMPLATE = (  # meta-llama/Meta-Llama-3-8B-Instruct
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")


def need(*modules):
    import importlib
    for m in modules:
        try:
            importlib.import_module(m)
        except ImportError as e:
            print("skip: cannot import %s (%s)" % (m, e), file=sys.stderr)
            sys.exit(77)


def write(path, data):
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(data)


def write_ids(path, ids):
    write(path, " ".join(str(i) for i in ids) + "\n")


def render(template, messages, bos, eos):
    """transformers' own chat-template rendering (its jinja2 environment)."""
    from transformers.utils.chat_template_utils import _compile_jinja_template
    return _compile_jinja_template(template).render(messages=messages, bos_token=bos, eos_token=eos,
                                                    add_generation_prompt=True)


def ids_of(enc):
    return list(enc["input_ids"] if hasattr(enc, "keys") else enc)


def smollm2(path, out):
    need("transformers", "gguf")
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(path)), gguf_file=os.path.basename(path))
    for n, text in enumerate(TEXTS + SPECIAL_TEXTS):
        write(os.path.join(out, "text_%d.txt" % n), text)
        write_ids(os.path.join(out, "text_%d.want" % n), ids_of(tok(text)))
    for n, chat in enumerate(CHATS):
        write(os.path.join(out, "chat_%d.json" % n), json.dumps(chat, ensure_ascii=False))
        for m, message in enumerate(chat):  # for --system and --user
            write(os.path.join(out, "chat_%d.%d.txt" % (n, m)), message["content"])
        write_ids(os.path.join(out, "chat_%d.want" % n),
                  ids_of(tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True)))
    tok.save_pretrained(os.path.join(out, "hf"))


def spm_arrays(model):
    """pieces, scores and GGUF token types of a SentencePiece model, as llama.cpp's converter reads them."""
    import gguf
    from sentencepiece import SentencePieceProcessor
    sp = SentencePieceProcessor()
    if not sp.LoadFromFile(model):
        raise SystemExit("%s: not a SentencePiece model" % model)
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        t = gguf.TokenType.NORMAL
        if sp.IsUnknown(i):
            t = gguf.TokenType.UNKNOWN
        elif sp.IsControl(i):
            t = gguf.TokenType.CONTROL
        elif sp.IsUnused(i):
            t = gguf.TokenType.UNUSED
        elif sp.IsByte(i):
            t = gguf.TokenType.BYTE
        tokens.append(sp.IdToPiece(i).encode("utf-8"))
        scores.append(sp.GetScore(i))
        types.append(t)
    return sp, tokens, scores, types


def write_gguf(path, model, tokens, merges=None, scores=None, types=None, template=None, extra=None, pre=None):
    import gguf
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    if merges is not None:
        w.add_token_merges(merges)
    if scores is not None:
        w.add_token_scores(scores)
    if types is not None:
        w.add_token_types(types)
    for key, value in (extra or {}).items():
        w.add_uint32(key, value)
    if template is not None:
        w.add_chat_template(template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def spm(model, out):
    need("gguf", "sentencepiece", "transformers")
    sp, tokens, scores, types = spm_arrays(model)
    write_gguf(os.path.join(out, "spm.gguf"), "llama", tokens, scores=scores, types=types,
               template=LLAMA2_TEMPLATE,
               extra={"tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
                      "tokenizer.ggml.unknown_token_id": 0})
    for n, text in enumerate(TEXTS):
        write(os.path.join(out, "text_%d.txt" % n), text)
        write_ids(os.path.join(out, "text_%d.want" % n), [1] + sp.encode(text))
    specials = {"<s>": 1, "</s>": 2}
    for n, chat in enumerate(CHATS):
        text, ids, start = render(LLAMA2_TEMPLATE, chat, "<s>", "</s>"), [], 0
        i = 0
        while i < len(text):
            hit = next((s for s in specials if text.startswith(s, i)), None)
            if hit is None:
                i += 1
                continue
            if i > start:
                ids += sp.encode(text[start:i])
            ids.append(specials[hit])
            i += len(hit)
            start = i
        if start < len(text):
            ids += sp.encode(text[start:])
        write(os.path.join(out, "chat_%d.json" % n), json.dumps(chat, ensure_ascii=False))
        write_ids(os.path.join(out, "chat_%d.want" % n), ids)


def render_cases(smollm2_gguf, out):
    need("transformers", "jinja2", "gguf")
    smollm2_gguf = smollm2_gguf or None
    import gguf
    templates = {"qwen2": QWEN2_TEMPLATE, "chatml": CHATML_TEMPLATE, "llama2": LLAMA2_TEMPLATE,
                 "llama3": LLAMA3_TEMPLATE}
    if smollm2_gguf:
        f = gguf.GGUFReader(smollm2_gguf).fields["tokenizer.chat_template"]
        templates["smollm2"] = bytes(f.parts[f.data[0]]).decode("utf-8")
    for name, template in templates.items():
        write(os.path.join(out, name + ".jinja"), template)
        for n, chat in enumerate(CHATS + BAD_CHATS):
            write(os.path.join(out, "chat_%d.json" % n), json.dumps(chat, ensure_ascii=False))
            try:
                text = render(template, chat, "<s>", "</s>")
            except Exception as e:  # raise_exception in the template
                write(os.path.join(out, "%s.chat_%d.err" % (name, n)), str(e) + "\n")
                continue
            write(os.path.join(out, "%s.chat_%d.want" % (name, n)), text)


def bad(out):
    need("gguf")
    base = [b"<unk>", b"<s>", b"</s>"] + [b"<0x%02X>" % b for b in range(256)] + [b"\xe2\x96\x81a", b"b"]
    scores = [0.0] * len(base)
    types = [2, 3, 3] + [6] * 256 + [1, 1]
    write_gguf(os.path.join(out, "nomerges.gguf"), "gpt2", [b"a", b"b", b"ab"])
    write_gguf(os.path.join(out, "rwkv.gguf"), "rwkv", base)
    write_gguf(os.path.join(out, "notemplate.gguf"), "llama", base, scores=scores, types=types)
    write_gguf(os.path.join(out, "oddtemplate.gguf"), "llama", base, scores=scores, types=types,
               template="{% for m in messages %}### {{ m['role'] }}: {{ m['content'] }}\n{% endfor %}### Assistant:")
    write(os.path.join(out, "notarray.json"), '{"role": "user", "content": "hi"}')
    write(os.path.join(out, "norole.json"), '[{"role": "user", "content": "hi"}, {"content": "no role"}]')
    write(os.path.join(out, "notjson.json"), '[{"role": "user", "content": "hi"')


def seeds(out):
    """Small vocabularies of each kind for tests/fuzz_vocab, and the refused ones of bad()."""
    need("gguf")
    bad(out)
    for name in ("notarray.json", "norole.json", "notjson.json"):
        os.remove(os.path.join(out, name))
    for name in os.listdir(out):
        os.rename(os.path.join(out, name), os.path.join(out, "seed-" + name[:-len(".gguf")]))
    spm_tokens = [b"<unk>", b"<s>", b"</s>"] + [b"<0x%02X>" % b for b in range(256)] + \
        [b"\xe2\x96\x81", b"a", b"b", b"\xe2\x96\x81a", b"ab", b"<|user|>"]
    spm_types = [2, 3, 3] + [6] * 256 + [1] * 5 + [4]
    write_gguf(os.path.join(out, "seed-spm-llama2"), "llama", spm_tokens, scores=[-float(i) for i in
               range(len(spm_tokens))], types=spm_types, template=LLAMA2_TEMPLATE)
    bpe_tokens = [b"<|im_start|>", b"<|im_end|>", b"a", b"b", b"ab", b"\xc4\xa0", b"\xc4\xa0a", b"1", b"\xc4\x8a"]
    bpe_types = [3, 3] + [1] * 7
    write_gguf(os.path.join(out, "seed-bpe-chatml"), "gpt2", bpe_tokens, merges=["a b", "\u0120 a"],
               types=bpe_types, template=QWEN2_TEMPLATE,
               extra={"tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 1})
    write_gguf(os.path.join(out, "seed-bpe-llama3"), "gpt2", bpe_tokens, merges=["a b"], types=bpe_types,
               template=LLAMA3_TEMPLATE, extra={"tokenizer.ggml.eos_token_id": 1}, pre="llama-bpe")


def main():
    """Runs each COMMAND ARGS... in turn (one process: transformers is imported once)."""
    commands = {"smollm2": (smollm2, 2), "spm": (spm, 2), "render": (render_cases, 2), "bad": (bad, 1),
                "seeds": (seeds, 1)}
    args = sys.argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 1
    while args:
        if args[0] not in commands or len(args) <= commands[args[0]][1]:
            print(__doc__, file=sys.stderr)
            return 1
        fn, n = commands[args[0]]
        fn(*args[1:1 + n])
        args = args[1 + n:]
    return 0


if __name__ == "__main__":
    sys.exit(main())
