#!/usr/bin/env python3
"""SmolLM2-135M-Instruct in runahead against Hugging Face transformers.

transformers (PyPI, CPU, fp32) loads SmolLM2's GGUF itself: its own GGUF reader, gguf-py's
dequantization of the Q4_1 and Q8_0 tensors, its own Llama graph. Its tokenizer, read from the
same GGUF, makes the prompts' ids, so no runahead tokenizer is involved. On the same file:

  (a) runahead's last-position logits (tests/logits_dump, fp32 CPU backend) agree with the
      reference within REL_BOUND, normwise: |runahead - hf|_2 / |hf|_2, and within ABS_BOUND
      elementwise, on every prompt: a ChatML chat, short plain and code prompts and several
      hundred tokens of public-domain English;
  (b) greedy tokens of the runahead CLI (--prompt-ids ... -n 64 --ignore-eos -o ids) agree with
      the reference's over 64 steps. The reference is teacher-forced on runahead's tokens (one
      causal pass over the prompt and them): where each is its argmax, its own greedy run gives
      the same tokens. A divergence is accepted only where, at that step, the reference's top-2
      logit margin (and the gap between its token and runahead's, in its own logits) is below
      MARGIN_BOUND: 2 * ABS_BOUND, the largest swing of two logits each off by ABS_BOUND. The
      margin is printed either way; later steps are not compared (the contexts differ).

The second path: `runahead-synth --from FILE.gguf` writes the Hugging Face layout (dequantized
f32, q and k rows in rotate-half order); transformers loads that directory, and (a) and (b) hold
between it and runahead on the directory, and its logits equal those of transformers' own GGUF
load within REL_BOUND (two readers of one file: runahead-synth's and transformers').

    hf_oracle.py RUNAHEAD LOGITS_DUMP GGUF CONVERTED_DIR TMPDIR
    exit 0 pass, 1 fail, 77 torch, transformers, accelerate, gguf or numpy not importable
"""
import functools
import os
import subprocess
import sys
import time

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF progress bar, one line per tensor
try:
    import numpy as np
    import torch
    import accelerate  # noqa: F401  (transformers needs it to load a GGUF)
    import gguf
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
except ImportError as e:
    print(f"skip: cannot import the Hugging Face oracle's packages ({e}); "
          "pip install torch transformers accelerate gguf numpy")
    sys.exit(77)
# Two speed-ups of transformers' GGUF load (most of this test's time without them), which change
# no value: it builds gguf-py's tensor name map once per tensor, a pure function of (architecture,
# layers); and it parses the file anew for the tokenizer, the config and the weights, with a reader
# it only reads. One of each serves.
if hasattr(gguf, "get_tensor_name_map"):
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(gguf.get_tensor_name_map)
_gguf_reader = gguf.GGUFReader
gguf.GGUFReader = functools.lru_cache(maxsize=None)(lambda path, mode="r": _gguf_reader(path, mode))

# Measured on this file (x86-64 with AVX-512, runahead's f32 CPU kernels, one thread; torch 2.15,
# transformers 5.24): over the prompts below and both paths, the largest normwise error was
# 1.7e-6 and the largest elementwise one 6.1e-5 (logits of magnitude up to 34); in the ASan build
# (jobs/sanitize's flags) 3.3e-6 and 8.0e-5. Every greedy token agreed, the reference's smallest
# top-2 margin being 0.016. The bounds leave a margin of about 15x over the worst of these for
# other CPUs, kernels and library versions; a RoPE theta 10% off already misses them by 100x.
REL_BOUND = 5e-5
ABS_BOUND = 2e-3
MARGIN_BOUND = 2 * ABS_BOUND
STEPS = 64

# Public-domain English: Lincoln's Gettysburg Address (1863, the Bliss copy) and the opening of
# Dickens's A Tale of Two Cities (1859).
LONG_TEXT = """Four score and seven years ago our fathers brought forth on this continent, a new \
nation, conceived in Liberty, and dedicated to the proposition that all men are created equal.

Now we are engaged in a great civil war, testing whether that nation, or any nation so conceived \
and so dedicated, can long endure. We are met on a great battle-field of that war. We have come to \
dedicate a portion of that field, as a final resting place for those who here gave their lives that \
that nation might live. It is altogether fitting and proper that we should do this.

But, in a larger sense, we can not dedicate -- we can not consecrate -- we can not hallow -- this \
ground. The brave men, living and dead, who struggled here, have consecrated it, far above our poor \
power to add or detract. The world will little note, nor long remember what we say here, but it can \
never forget what they did here. It is for us the living, rather, to be dedicated here to the \
unfinished work which they who fought here have thus far so nobly advanced. It is rather for us to \
be here dedicated to the great task remaining before us -- that from these honored dead we take \
increased devotion to that cause for which they gave the last full measure of devotion -- that we \
here highly resolve that these dead shall not have died in vain -- that this nation, under God, \
shall have a new birth of freedom -- and that government of the people, by the people, for the \
people, shall not perish from the earth.

It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of \
foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of \
Light, it was the season of Darkness, it was the spring of hope, it was the winter of despair, we \
had everything before us, we had nothing before us, we were all going direct to Heaven, we were all \
going direct the other way--in short, the period was so far like the present period, that some of \
its noisiest authorities insisted on its being received, for good or for evil, in the superlative \
degree of comparison only.

There were a king with a large jaw and a queen with a plain face, on the throne of England; there \
were a king with a large jaw and a queen with a fair face, on the throne of France. In both \
countries it was clearer than crystal to the lords of the State preserves of loaves and fishes, \
that things in general were settled for ever. Summarize the passages above in one sentence:"""

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


def ids_of(enc):
    """apply_chat_template and __call__ give a list or a BatchEncoding, by version."""
    if hasattr(enc, "keys") and "input_ids" in enc:
        enc = enc["input_ids"]
    return [int(t) for t in enc]


def prompts(tok):
    chat = [{"role": "system", "content": "You are a helpful AI assistant."},
            {"role": "user", "content": "Explain in two sentences why the sky is blue."}]
    return {
        "chat": ids_of(tok.apply_chat_template(chat, add_generation_prompt=True)),
        "plain": ids_of(tok("The three most important inventions of the nineteenth century were")),
        "code": ids_of(tok("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n")),
        "long": ids_of(tok(LONG_TEXT)),
    }


@torch.inference_mode()
def hf_logits(model, ids, keep):
    """The reference's logits at the last KEEP positions of IDS, one causal pass: [keep][vocab]."""
    out = model(torch.tensor([ids]), use_cache=False, logits_to_keep=keep)
    return out.logits[0].float().numpy()


def runahead_logits(dump, model, plist, tmp, tag):
    ids_path, out_path = os.path.join(tmp, tag + ".ids"), os.path.join(tmp, tag + ".f32")
    with open(ids_path, "w") as f:
        f.write("".join(" ".join(map(str, p)) + "\n" for p in plist))
    r = subprocess.run([dump, model, ids_path, out_path], capture_output=True, text=True, timeout=300)
    print(r.stderr.strip())
    if r.returncode != 0:
        fail(f"logits_dump on {model} exited {r.returncode}")
        return None
    return np.fromfile(out_path, np.float32).reshape(len(plist), -1)


def runahead_greedy(runahead, model, ids):
    # One thread (logits_dump too): two threads on a machine busy with other work decode many times
    # slower, as each step's threads wait for one another. The file's Q4_1 blocks as f32, as
    # transformers computes on them (the int8 kernels against that: tests/quant_model.sh).
    cmd = [runahead, "--model", model, "--prompt-ids", " ".join(map(str, ids)), "-n", str(STEPS),
           "--ignore-eos", "-o", "ids", "--compute-dtype", "f32", "--threads", "1", "--dequantize-weights"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        fail(f"runahead on {model} exited {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
        return None
    return [int(t) for t in r.stdout.split()]


def compare_logits(name, got, ref, worst):
    rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    mx = float(np.max(np.abs(got - ref)))
    same_top = int(np.argmax(got)) == int(np.argmax(ref))
    print(f"  {name}: logits: normwise relative error {rel:.2e} (bound {REL_BOUND:.0e}), "
          f"max abs {mx:.2e} (bound {ABS_BOUND:.0e}), |logits| up to {float(np.max(np.abs(ref))):.1f}")
    worst[0], worst[1] = max(worst[0], rel), max(worst[1], mx)
    if not (rel <= REL_BOUND and mx <= ABS_BOUND):
        fail(f"{name}: runahead's logits differ from the reference by {rel:.2e} normwise, {mx:.2e} at most")
    if not same_top:
        print(f"  {name}: note: argmax differs (runahead {int(np.argmax(got))}, reference {int(np.argmax(ref))})")


def compare_tokens(name, got, rows):
    """runahead's greedy tokens GOT against the reference, teacher-forced: ROWS[i] are its logits after
    the prompt and got[:i]. Where every got[i] is the argmax of rows[i], the reference's own greedy run
    gives the same tokens; at the first step where it is not, the runs part, and the divergence is
    accepted only where the reference was nearly tied there."""
    top2 = [float(np.diff(np.sort(r)[-2:])[0]) for r in rows]
    k = next((i for i in range(STEPS) if int(np.argmax(rows[i])) != got[i]), None)
    if k is None:
        print(f"  {name}: greedy: all {STEPS} tokens agree (the reference's smallest top-2 margin "
              f"{min(top2):.3g}, at step {int(np.argmin(top2))})")
        return
    ref = int(np.argmax(rows[k]))
    gap = float(rows[k][ref] - rows[k][got[k]])
    ok = top2[k] < MARGIN_BOUND and gap < MARGIN_BOUND
    print(f"  {name}: greedy: tokens agree for {k} steps; at step {k} runahead chose {got[k]}, the reference "
          f"{ref}: the reference's top-2 margin there is {top2[k]:.3g}, its gap to runahead's token {gap:.3g} "
          f"(bound {MARGIN_BOUND:.3g}): {'accepted' if ok else 'NOT accepted'}")
    if not ok:
        fail(f"{name}: greedy tokens diverge at step {k} where the reference's top-2 margin {top2[k]:.3g} "
             f"(gap {gap:.3g}) is not below {MARGIN_BOUND:.3g}")


def run_path(label, model_path, hf_model, plist, greedy, args, tmp, worst):
    """(a) on every prompt and (b) on the prompts named in GREEDY, for one file runahead reads and the
    reference model it is checked against. Returns the reference's last-position logits per prompt."""
    runahead, dump = args
    print(f"{label}: runahead on {model_path}")
    got = runahead_logits(dump, model_path, list(plist.values()), tmp, label)
    last = {}
    for i, (name, ids) in enumerate(plist.items()):
        t0 = time.time()
        toks = runahead_greedy(runahead, model_path, ids) if name in greedy else None
        t1 = time.time()
        if toks is not None and len(toks) != STEPS:
            fail(f"{name}: runahead gave {len(toks)} tokens, not {STEPS}")
            toks = None
        rows = hf_logits(hf_model, ids + toks[:-1], STEPS) if toks else hf_logits(hf_model, ids, 1)
        last[name] = rows[0]
        print(f"  {name}: {len(ids)} prompt tokens; runahead {t1 - t0:.1f} s, the reference {time.time() - t1:.1f} s")
        if got is not None:
            compare_logits(name, got[i], rows[0], worst)
        if toks:
            compare_tokens(name, toks, rows)
    return last


def main():
    runahead, dump, gguf_path, conv_dir, tmp = sys.argv[1:6]
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    # One thread, as runahead here: on a machine busy with other work, torch's two threads take
    # several times as long as one (their barriers wait on each other).
    torch.set_num_threads(1)
    t0 = time.time()
    gdir, gname = os.path.split(os.path.abspath(gguf_path))
    tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
    hf = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32).eval()
    plist = prompts(tok)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: loaded {gname} "
          f"(fp32) and its tokenizer in {time.time() - t0:.1f} s; prompts: "
          + ", ".join(f"{k} {len(v)} tokens" for k, v in plist.items()))
    if len(plist["long"]) < 300:
        fail(f"the long prompt has {len(plist['long'])} tokens, fewer than 300")
    if plist["chat"][0] != tok.convert_tokens_to_ids("<|im_start|>"):
        fail("the chat prompt does not start with <|im_start|>: the GGUF's ChatML template was not used")

    worst = [0.0, 0.0]
    last = run_path("gguf", gguf_path, hf, plist, set(plist), (runahead, dump), tmp, worst)
    del hf

    # The second path: runahead-synth's conversion in the Hugging Face layout (greedy on the chat).
    hf2 = AutoModelForCausalLM.from_pretrained(conv_dir, dtype=torch.float32).eval()
    last2 = run_path("converted", conv_dir, hf2, plist, {"chat"}, (runahead, dump), tmp, worst)
    for name in plist:
        rel = float(np.linalg.norm(last2[name] - last[name]) / np.linalg.norm(last[name]))
        print(f"  {name}: transformers on the conversion vs on the GGUF: normwise {rel:.2e}")
        if rel > REL_BOUND:
            fail(f"{name}: transformers gives the conversion logits {rel:.2e} away from its own GGUF load")
    print(f"worst over both paths: normwise {worst[0]:.2e}, max abs {worst[1]:.2e}; "
          f"{time.time() - t0:.1f} s in all")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
