#!/usr/bin/env python3
"""Scaled RoPE (linear and Llama 3's) against Hugging Face transformers.

For each scaling, runahead-synth writes a random tiny-gqa model (head_dim 8: four rotated pairs,
wavelengths 6, 63, 628 and 6283 positions) whose config.json carries rope_scaling; Llama 3's is
given an original context of 64 tokens, so its three bands (unscaled, smoothed, divided) each hold
a pair, and prompts of 300 tokens reach positions where the scaling matters. Then:

  (a) transformers (fp32, CPU) loads the directory, and runahead's last-position logits
      (tests/logits_dump) agree with its logits within REL_BOUND normwise; the same model with
      rope_scaling removed misses them by far more (the test sees the scaling);
  (b) jobs/gguf-from-hf.py converts the directory to GGUF as llama.cpp's converter writes scaling
      (linear: rope.scaling.type/factor; llama3: the tensor rope_freqs.weight), and runahead's
      greedy tokens on the GGUF equal those on the directory, and so do its logits within REL_BOUND.

    rope_scaling.py RUNAHEAD LOGITS_DUMP RUNAHEAD_SYNTH GGUF_FROM_HF TMPDIR
    exit 0 pass, 1 fail, 77 torch, transformers, gguf or numpy not importable
"""
import json
import os
import random
import shutil
import subprocess
import sys

os.environ.setdefault("TQDM_DISABLE", "1")
try:
    import numpy as np
    import torch
    import gguf  # noqa: F401  (jobs/gguf-from-hf.py needs it)
    from transformers import AutoModelForCausalLM
except ImportError as e:
    print(f"skip: cannot import the oracle's packages ({e})")
    sys.exit(77)

# fp32 on both sides over 4 layers: measured errors are ~1e-6 (see the printed lines); a scaling
# ignored or applied to the wrong pairs moves the logits by 1e-2 or more.
REL_BOUND = 5e-5
SCALINGS = {"linear": "linear:4", "llama3": "llama3:8,1,4,64"}
STEPS = 24
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        fail(f"{' '.join(cmd[:3])}... exited {r.returncode}: {r.stderr.strip()[-300:]}")
    return r


def dump_logits(dump, model, prompts, tmp, tag):
    ids, out = os.path.join(tmp, tag + ".ids"), os.path.join(tmp, tag + ".f32")
    with open(ids, "w") as f:
        f.write("".join(" ".join(map(str, p)) + "\n" for p in prompts))
    if run([dump, model, ids, out]).returncode != 0:
        return None
    return np.fromfile(out, np.float32).reshape(len(prompts), -1)


@torch.inference_mode()
def hf_logits(path, prompts):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    return np.stack([model(torch.tensor([p]), use_cache=False).logits[0, -1].float().numpy() for p in prompts])


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def greedy(runahead, model, prompt):
    r = run([runahead, "--model", model, "--prompt-ids", " ".join(map(str, prompt)), "-n", str(STEPS),
             "--ignore-eos", "-o", "ids", "--compute-dtype", "f32", "--threads", "1"])
    return [int(t) for t in r.stdout.split()] if r.returncode == 0 else None


def check(kind, spec, args):
    runahead, dump, synth, conv, tmp = args
    d = os.path.join(tmp, kind)
    if run([synth, "--preset", "tiny-gqa", "--rope-scaling", spec, "--seed", "7", "--out", d,
            "--force"]).returncode != 0:
        return
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg_scaling = cfg.get("rope_scaling")
    print(f"{kind}: config.json rope_scaling {cfg_scaling}")
    rng = random.Random(11)
    prompts = [[rng.randrange(3, cfg["vocab_size"]) for _ in range(n)] for n in (40, 300)]
    got = dump_logits(dump, d, prompts, tmp, kind)
    ref = hf_logits(d, prompts)
    # the same weights without the scaling: the reference must tell them apart
    plain = d + "-unscaled"
    shutil.copytree(d, plain, dirs_exist_ok=True)
    cfg["rope_scaling"] = None
    with open(os.path.join(plain, "config.json"), "w") as f:
        json.dump(cfg, f)
    unscaled = hf_logits(plain, prompts)
    if got is not None:
        for i, p in enumerate(prompts):
            e, u = rel(got[i], ref[i]), rel(unscaled[i], ref[i])
            print(f"  {kind} {len(p)} tokens: runahead vs transformers {e:.2e} (bound {REL_BOUND:.0e}); "
                  f"unscaled vs scaled {u:.2e}")
            if not e <= REL_BOUND:
                fail(f"{kind}: {len(p)} tokens: runahead's logits differ from transformers' by {e:.2e}")
            if len(p) >= 300 and not u > 100 * REL_BOUND:
                fail(f"{kind}: the scaling changes the logits by only {u:.2e}: the test would not see it")
    g = os.path.join(tmp, kind + ".gguf")
    if run([sys.executable, conv, d, g]).returncode != 0:
        return
    got_g = dump_logits(dump, g, prompts, tmp, kind + "-gguf")
    if got is not None and got_g is not None:
        e = max(rel(got_g[i], got[i]) for i in range(len(prompts)))
        print(f"  {kind} GGUF vs directory logits {e:.2e}")
        if not e <= REL_BOUND:
            fail(f"{kind}: the GGUF's logits differ from the directory's by {e:.2e}")
    # runahead-synth --from carries the scaling back into config.json: linear from the GGUF's keys,
    # both kinds from the directory; llama3's bare factors in a GGUF have no config.json form
    for src, tag in ((d, "dir"), (g, "gguf")):
        back = os.path.join(tmp, f"{kind}-from-{tag}")
        r = subprocess.run([synth, "--from", src, "--out", back, "--force"], capture_output=True, text=True)
        if kind == "llama3" and tag == "gguf":
            print(f"  {kind} runahead-synth --from GGUF: {r.stderr.strip()}")
            if r.returncode == 0 or "no config.json form" not in r.stderr:
                fail(f"{kind}: runahead-synth --from the GGUF should refuse its bare factors")
            continue
        with open(os.path.join(back, "config.json")) as f:
            back_scaling = json.load(f).get("rope_scaling")
        print(f"  {kind} runahead-synth --from {tag}: rope_scaling {back_scaling}")
        if back_scaling != cfg_scaling:
            fail(f"{kind}: runahead-synth --from {tag} wrote rope_scaling {back_scaling}, not {cfg_scaling}")
    a, b = greedy(runahead, d, prompts[1]), greedy(runahead, g, prompts[1])
    print(f"  {kind} greedy: directory {a}\n  {kind} greedy: GGUF      {b}")
    if a is None or a != b:
        fail(f"{kind}: greedy tokens differ between the directory and its GGUF")


def main():
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    for kind, spec in SCALINGS.items():
        check(kind, spec, sys.argv[1:])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
