"""`hlx bench` on a tiny bf16 fixture: the JSON record has every figure the issue asks for, and the
numbers that can be recomputed independently agree (weight bytes from the safetensors header,
KV bytes from config.json, roofline = probe bandwidth / bytes per token, batch ratios, RSS ratio).
Timings themselves are not asserted (no timing assertions in tests)."""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

REPS = 2  # decode rounds: the best and the median-of-rounds figures then differ in general


def safetensors_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


def safetensors_bytes(path):
    return {name: info["data_offsets"][1] - info["data_offsets"][0]
            for name, info in safetensors_header(path).items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlx", required=True)
    args = ap.parse_args()
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)
            print("FAIL", what)

    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "m")
        subprocess.run([args.hlx, "fixture", "--family", "qwen3", "--dtype", "bf16", "--no-tokenizer",
                        "--out", model], check=True, capture_output=True)
        out = os.path.join(tmp, "bench.json")
        r = subprocess.run([args.hlx, "bench", "-m", model, "--json", out, "--threads", "2", "--capacity", "256",
                            "--small-capacity", "128", "--prefill", "32", "64", "--batches", "1", "2", "4",
                            "--decode-tokens", "4", "--context", "16", "--reps", str(REPS)],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"hlx bench exit {r.returncode}: {r.stderr}")
        if r.returncode != 0:
            return 1
        rec = json.load(open(out))
        cfg = json.load(open(os.path.join(model, "config.json")))

        m = rec["machine"]
        check(m["threads"] == 2 and m["cores"] >= 1 and m["cpu"] is not None, "machine threads/cores/cpu")
        check(set(m["isa"]) >= {"avx512f", "avx512bf16", "amx_bf16", "amx_int8"}, "ISA flags present")
        check(m["matmul"]["small_m_max"] >= 0, "matmul paths present")
        bw = rec["dram_read_gbps"]["best"]
        check(bw > 0 and rec["dram_read_gbps"]["threads"] == 2, "DRAM probe on the same threads")

        # Weight bytes streamed per token: all tensors, the embedding counted once (tied lm_head) or as
        # one row (untied).
        sizes = safetensors_bytes(os.path.join(model, "model.safetensors"))
        tied = cfg.get("tie_word_embeddings", False)
        embed = [k for k in sizes if k.endswith("embed_tokens.weight")][0]
        want_w = sum(sizes.values()) if tied else sum(v for k, v in sizes.items() if k != embed) + 2 * cfg["hidden_size"]
        check(rec["roofline"]["weight_bytes_per_token"] == want_w,
              f"weight bytes {rec['roofline']['weight_bytes_per_token']} vs {want_w}")
        head_dim = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
        ctx = rec["roofline"]["context"]
        want_kv = cfg["num_hidden_layers"] * 2 * ctx * cfg["num_key_value_heads"] * head_dim * 2
        check(rec["roofline"]["kv_bytes_per_token_at_context"] == want_kv, "KV bytes per token")
        check(ctx == 16 + 4 // 2, "roofline context = mid decode context")
        want_roof = bw * 1e9 / (want_w + want_kv)
        check(abs(rec["roofline"]["decode_tok_s_batch1"] - want_roof) <= 1e-6 * want_roof, "roofline = bw / bytes")

        check([p["tokens"] for p in rec["prefill"]] == [32, 64], "prefill lengths")
        for p in rec["prefill"]:
            check(p["tok_s"] > 0 and abs(p["tok_s"] - p["tokens"] / (p["ttft_ms"] / 1000)) < 1e-6 * p["tok_s"],
                  "prefill tok/s = tokens / TTFT")
        dec = rec["decode"]
        check([d["batch"] for d in dec] == [1, 2, 4], "decode batches")
        for d in dec:
            b = d["batch"]
            roof = b * bw * 1e9 / (want_w + b * want_kv)
            check(abs(d["roofline_tok_s"] - roof) <= 1e-6 * roof, f"batch {b} roofline")
            check(abs(d["fraction_of_roofline"] - d["tok_s"] / roof) <= 1e-6, f"batch {b} fraction")
            check(abs(d["vs_batch1"] - d["tok_s"] / dec[0]["tok_s"]) <= 1e-9, f"batch {b} ratio to batch 1")
            check(abs(d["tok_s"] - b * 1000.0 / d["ms_per_step"]) <= 1e-6 * d["tok_s"], f"batch {b} tok/s vs ms/step")
            # one run per round, each against the probe taken just before its round
            probes = rec["decode_round_probe_gbps"]
            check(len(d["round_tok_s"]) == len(probes) == REPS and min(probes) > 0, f"batch {b} rounds")
            check(d["tok_s"] == max(d["round_tok_s"]), f"batch {b} best round")
            fr = sorted(t / (b * g * 1e9 / (want_w + b * want_kv)) for t, g in zip(d["round_tok_s"], probes))
            check(abs(d["fraction_of_adjacent_probe_roofline_median"] - fr[len(fr) // 2]) <= 1e-6,
                  f"batch {b} fraction vs adjacent probes")
        ci = rec["capacity_invariance"]
        check(ci["small_capacity"] == 128 and ci["large_capacity"] == 256 and ci["small_tok_s"] > 0
              and ci["large_tok_s"] > 0, "capacity comparison")
        pr = ci["pair_ratios"]
        check(len(pr) == max(5, REPS) and pr == sorted(pr) and min(pr) > 0, "capacity pairs")
        check(ci["large_over_small"] == pr[len(pr) // 2], "capacity ratio = median of pairs")
        mem = rec["memory"]
        layers, kvh = cfg["num_hidden_layers"], cfg["num_key_value_heads"]
        want_cache = layers * 2 * 4 * 256 * kvh * head_dim * 2  # slots = largest batch, capacity 256, bf16
        check(rec["model"]["kv_bytes"] == want_cache, "KV cache bytes")
        check(mem["weights_plus_kv_bytes"] == sum(sizes.values()) + want_cache, "weights + KV")
        check(mem["peak_rss_bytes"] >= mem["rss_bytes"] > 0, "peak RSS >= RSS")
        check(rec["times_ms"]["modules_emitted"] >= 1 and rec["times_ms"]["entries_compiled"] >= 1, "load stats")

        # Long-context section alone (issue 27): per batch and context, decode against the roofline of
        # weights + the K/V actually read, prefill of the whole context against the reference prefill.
        out_long = os.path.join(tmp, "long.json")
        r = subprocess.run([args.hlx, "bench", "-m", model, "--json", out_long, "--threads", "2",
                            "--long-context-only", "--long-capacity", "256", "--long-contexts", "40", "200",
                            "--long-batches", "1", "3", "--decode-tokens", "4", "--reps", "1"],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"hlx bench --long-context-only exit {r.returncode}: {r.stderr}")
        if r.returncode == 0:
            lrec = json.load(open(out_long))
            lbw = lrec["dram_read_gbps"]["best"]
            check("decode" not in lrec and "prefill" not in lrec, "--long-context-only skips the other sections")
            ref = lrec["long_context_prefill_reference"]
            check(ref["tokens"] == 255 and ref["tok_s"] > 0, "reference prefill min(512, capacity - 1)")
            lc = lrec["long_context"]
            check([(e["batch"], e["context"]) for e in lc] == [(1, 40), (1, 200), (3, 40), (3, 200)],
                  "long-context batches x contexts")
            for e in lc:
                b, mid = e["batch"], e["context"] + 4 // 2
                kv = cfg["num_hidden_layers"] * 2 * mid * cfg["num_key_value_heads"] * head_dim * 2
                check(e["bytes_per_step"] == want_w + b * kv, f"long {b}/{e['context']} bytes per step")
                roof = b * lbw * 1e9 / (want_w + b * kv)
                check(abs(e["roofline_tok_s"] - roof) <= 1e-6 * roof, f"long {b}/{e['context']} roofline")
                check(abs(e["fraction_of_roofline"] - e["decode_tok_s"] / roof) <= 1e-6, "long fraction")
                # the probes that bracket the round, each with its own fraction
                for key, frac in (("round_probe_gbps", "fraction_of_round_probe_roofline"),
                                  ("probe_after_gbps", "fraction_of_probe_after_roofline")):
                    r_roof = b * e[key] * 1e9 / (want_w + b * kv)
                    check(e[key] > 0 and abs(e[frac] - e["decode_tok_s"] / r_roof) <= 1e-6 * e[frac],
                          f"long {b}/{e['context']} {frac}")
                check(abs(e["decode_tok_s"] - b * 1000.0 / e["decode_ms_per_step"]) <= 1e-6 * e["decode_tok_s"],
                      "long tok/s vs ms/step")
                check(e["capacity"] == 256, "long capacity")
                check(("prefill_tok_s" in e) == (b == 1), "prefill figure on the batch-1 model only")
                if b == 1:
                    check(abs(e["prefill_over_prefill512"] - e["prefill_tok_s"] / ref["tok_s"]) <= 1e-9,
                          "long prefill ratio")
        # Prefix-reuse section alone (issue 19): turn k reuses turn k-1's prompt (reply 8 + user 24
        # tokens later), the tokens with and without reuse match, the ratio is that of the sums.
        out_chat = os.path.join(tmp, "chat.json")
        r = subprocess.run([args.hlx, "bench", "-m", model, "--json", out_chat, "--threads", "2",
                            "--prefix-chat-only", "--chat-history", "100", "--chat-turns", "3", "--reps", "1"],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"hlx bench --prefix-chat-only exit {r.returncode}: {r.stderr}")
        if r.returncode == 0:
            pc = json.load(open(out_chat))["prefix_chat"]
            turns = pc["turns"]
            check([t["prompt_tokens"] for t in turns] == [100, 132, 164], "chat prompts grow by reply + user")
            check([t["cached_tokens"] for t in turns] == [0, 100, 132], "each turn reuses the previous prompt")
            check(pc["same_tokens"] is True, "the same tokens with and without reuse")
            on = sum(t["ttft_ms_reuse"] for t in turns[1:])
            off = sum(t["ttft_ms_no_reuse"] for t in turns[1:])
            check(abs(pc["later_turns_ttft_ratio"] - on / off) <= 1e-9, "ratio of the later turns' sums")
        # Without --long-capacity: the largest context + the decode steps, rounded up to 1024 (so the
        # default contexts, 8192 and 32768, run as they are).
        r = subprocess.run([args.hlx, "bench", "-m", model, "--json", out_long, "--threads", "2",
                            "--long-context-only", "--long-contexts", "40", "--long-batches", "1",
                            "--decode-tokens", "4", "--reps", "1"], capture_output=True, text=True)
        check(r.returncode == 0, f"hlx bench --long-context-only (default capacity) exit {r.returncode}: {r.stderr}")
        if r.returncode == 0:
            check([e["capacity"] for e in json.load(open(out_long))["long_context"]] == [1024],
                  "default long capacity: context + decode steps rounded up to 1024")
        bad = subprocess.run([args.hlx, "bench", "-m", model, "--long-context", "--long-contexts", "300",
                              "--long-capacity", "256"], capture_output=True, text=True)
        check(bad.returncode != 0 and "300" in bad.stderr, "long context beyond the long capacity is rejected")

        # --weights int8: the memory budget counts linear layers as packed int8 (64-column blocks,
        # K in pairs, one f32 scale per column), an untied embedding table and 1-D tensors as stored.
        int8_json = os.path.join(tmp, "int8.json")
        r = subprocess.run([args.hlx, "bench", "-m", model, "--json", int8_json, "--weights", "int8", "--threads", "2",
                            "--capacity", "128", "--prefill", "16", "--batches", "1", "--decode-tokens", "2",
                            "--reps", "1"], capture_output=True, text=True)
        check(r.returncode == 0, f"hlx bench (int8) exit {r.returncode}: {r.stderr}")
        if r.returncode == 0:
            held = 0
            for name, info in safetensors_header(os.path.join(model, "model.safetensors")).items():
                b, e = info["data_offsets"]
                if len(info["shape"]) == 2 and not (name.endswith("embed_tokens.weight")
                                                    and not cfg.get("tie_word_embeddings", False)):
                    n, k = info["shape"]
                    cols = -(-n // 64) * 64
                    held += cols * 2 * ((k + 1) // 2) + 4 * cols
                else:
                    held += e - b
            rec8 = json.load(open(int8_json))
            budget = rec8["memory"]["weights_plus_kv_bytes"]
            check(budget == held + rec8["model"]["kv_bytes"], f"int8 weights as held + KV {budget} vs {held} + KV")

        # An FP8 block-scaled checkpoint: its linear layers stream as packed int8 (matmul_int8.h: columns
        # in blocks of 64, K in pairs, one f32 scale per column), not as bf16; the other tensors as stored.
        fp8 = os.path.join(tmp, "fp8")
        subprocess.run([args.hlx, "fixture", "--family", "qwen3", "--dtype", "bf16", "--quant", "fp8",
                        "--no-tokenizer", "--out", fp8], check=True, capture_output=True)
        fp8_json = os.path.join(tmp, "fp8.json")
        r = subprocess.run([args.hlx, "bench", "-m", fp8, "--json", fp8_json, "--threads", "2", "--capacity", "128",
                            "--prefill", "16", "--batches", "1", "--decode-tokens", "2", "--reps", "1"],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"hlx bench (fp8) exit {r.returncode}: {r.stderr}")
        if r.returncode == 0:
            header = safetensors_header(os.path.join(fp8, "model.safetensors"))
            fp8_tied = json.load(open(os.path.join(fp8, "config.json"))).get("tie_word_embeddings", False)
            want = held = 0  # bytes a decode step streams; bytes the model holds
            for name, info in header.items():
                b, e = info["data_offsets"]
                if name.endswith("weight_scale_inv"):
                    continue
                if info["dtype"] == "F8_E4M3":
                    n, k = info["shape"]
                    cols = -(-n // 64) * 64
                    want += cols * 2 * ((k + 1) // 2) + 4 * cols
                    held += cols * 2 * ((k + 1) // 2) + 4 * cols
                elif name.endswith("embed_tokens.weight") and not fp8_tied:
                    want += 2 * info["shape"][1]
                    held += e - b
                else:
                    want += e - b
                    held += e - b
            rec = json.load(open(fp8_json))
            got = rec["roofline"]["weight_bytes_per_token"]
            check(got == want, f"fp8 weight bytes per token {got} vs {want} (int8-packed linear layers)")
            budget = rec["memory"]["weights_plus_kv_bytes"]
            check(budget == held + rec["model"]["kv_bytes"], f"fp8 weights as held + KV {budget} vs {held} + KV")

        bad = subprocess.run([args.hlx, "bench", "-m", model, "--prefill", "999", "--capacity", "256"],
                             capture_output=True, text=True)
        check(bad.returncode != 0 and "999" in bad.stderr, "prefill longer than capacity is rejected")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
