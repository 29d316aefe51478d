#!/usr/bin/env python3
"""The anchor of jobs/gpu-check: PyTorch + transformers on the same card and the
same safetensors directory as runahead (bf16, attn_implementation="sdpa"):
prefill tokens/s (prompt tokens over the time to the first token's logits) and
decode tokens/s (greedy steps with the KV cache), medians of --repeat runs timed
with CUDA events; cuBLAS's bf16 GEMM rate (torch.matmul) on one layer's linear
shapes at the prompt's length; and PyTorch's causal SDPA (bf16, GQA) on the
model's heads at that length. With --runahead-report and --bench-cuda,
runahead's own figures at the same length are put beside them. Prints one
JSON line."""
import argparse
import json
import statistics
import sys


def timed(torch, fn, repeat):
    times = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def gemm_tflops(torch, cfg, n, repeat):
    """cuBLAS bf16 on the linear layers of one layer at n rows, summed over the shapes."""
    d, h = cfg.hidden_size, cfg.intermediate_size
    kv = cfg.num_key_value_heads * (d // cfg.num_attention_heads)
    shapes = [(d, d), (kv, d), (kv, d), (d, d), (h, d), (h, d), (d, h)]
    flops, secs = 0.0, 0.0
    for rows, k in shapes:
        x = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        fn = lambda: torch.matmul(x, w.t())
        fn()
        secs += timed(torch, fn, repeat)
        flops += 2.0 * n * k * rows
    return flops / secs / 1e12


def sdpa_tflops(torch, cfg, n, repeat):
    """torch.nn.functional.scaled_dot_product_attention, causal, over the lower triangle's FLOPs."""
    h, kvh = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = cfg.hidden_size // h
    q = torch.randn(1, h, n, hd, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, kvh, n, hd, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, kvh, n, hd, device="cuda", dtype=torch.bfloat16)
    fn = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    fn()
    return 4.0 * h * hd * n * (n + 1) / 2 / timed(torch, fn, repeat) / 1e12


def prefill_flops(cfg, n):
    """Linear layers (2 per weight per row, the classifier on the last row only)
    and causal attention (QK^T and PV over the lower triangle)."""
    d, h, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    hd = d // cfg.num_attention_heads
    kv = cfg.num_key_value_heads * hd
    linear = 2.0 * n * L * (2 * d * d + 2 * kv * d + 3 * h * d) + 2.0 * d * cfg.vocab_size
    attention = 4.0 * L * cfg.num_attention_heads * hd * n * (n + 1) / 2
    return linear + attention


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--label", default="")
    ap.add_argument("--runahead-report")
    ap.add_argument("--bench-cuda", help="bench-cuda's JSON line for this length")
    a = ap.parse_args()

    import torch
    from transformers import AutoConfig, LlamaForCausalLM

    row = {"model": a.label or a.model, "tokens": a.tokens}
    if a.runahead_report:
        try:
            r = json.load(open(a.runahead_report))
            row["ra_prefill_tps"] = a.tokens / r["ttft_s"]["median"]
            n_dec = len(r["generated_ids"]) - 1
            if n_dec > 0 and r.get("decode_s"):
                row["ra_decode_tps"] = n_dec / r["decode_s"]
        except (OSError, ValueError, KeyError) as e:
            row["ra_error"] = str(e)

    if a.bench_cuda:
        try:
            b = json.loads(open(a.bench_cuda).read())
            row["ra_linear_tflops"] = b["linear_tflops"]
            row["ra_attn_tflops"] = b["attn_tc_tflops"] if b["attn_tc_tflops"] > 0 else b["attn_ref_tflops"]
            row["ra_attn_ref_tflops"] = b["attn_ref_tflops"]
            row["ra_decode_attn_gbs"] = b["decode_attn_gbs"]
        except (OSError, ValueError, KeyError) as e:
            row["bench_error"] = str(e)

    cfg = AutoConfig.from_pretrained(a.model)
    if "ra_prefill_tps" in row:
        row["ra_tflops"] = prefill_flops(cfg, a.tokens) * row["ra_prefill_tps"] / a.tokens / 1e12
    torch.manual_seed(0)
    ids = torch.randint(3, cfg.vocab_size, (1, a.tokens), device="cuda")
    try:
        row["gemm_tflops"] = gemm_tflops(torch, cfg, a.tokens, a.repeat)
        row["sdpa_tflops"] = sdpa_tflops(torch, cfg, a.tokens, a.repeat)
        model = LlamaForCausalLM.from_pretrained(a.model, torch_dtype=torch.bfloat16,
                                                 attn_implementation="sdpa").cuda().eval()
        with torch.inference_mode():
            def prefill():
                return model(ids, use_cache=True, logits_to_keep=1)
            prefill()
            row["pt_prefill_tps"] = a.tokens / timed(torch, prefill, a.repeat)
            row["pt_tflops"] = prefill_flops(cfg, a.tokens) * row["pt_prefill_tps"] / a.tokens / 1e12

            out = prefill()
            past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)

            def decode():  # from the prompt's cache, cropped back after each run
                past.crop(a.tokens)
                p, t = past, nxt
                for _ in range(a.decode):
                    o = model(t, past_key_values=p, use_cache=True)
                    p, t = o.past_key_values, o.logits[:, -1:].argmax(-1)
            decode()
            row["pt_decode_tps"] = a.decode / timed(torch, decode, a.repeat)
    except torch.cuda.OutOfMemoryError as e:
        row["pt_error"] = "out of memory: " + str(e).splitlines()[0]
    if "ra_prefill_tps" in row and "pt_prefill_tps" in row:
        row["prefill_ratio"] = row["ra_prefill_tps"] / row["pt_prefill_tps"]
    if "ra_decode_tps" in row and "pt_decode_tps" in row:
        row["decode_ratio"] = row["ra_decode_tps"] / row["pt_decode_tps"]
    if "ra_linear_tflops" in row and "gemm_tflops" in row:
        row["linear_ratio"] = row["ra_linear_tflops"] / row["gemm_tflops"]
    if row.get("ra_attn_tflops", -1) > 0 and "sdpa_tflops" in row:
        row["attn_ratio"] = row["ra_attn_tflops"] / row["sdpa_tflops"]
    print(json.dumps(row))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
