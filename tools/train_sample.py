#!/usr/bin/env python3
"""Train the realistic sample: a small Llama-style model (head_dim 128, GQA, RoPE) from scratch on
the corpus tools/sample_corpus.py prepares, then dump its KV cache on held-out text.

    python3 tools/sample_corpus.py --out corpus/
    python3 tools/train_sample.py --corpus corpus/ --out sample/ [--minutes 4] [--gsrq build/app/cli/gsrq]

Writes to --out: model/ (config, weights, BPE tokenizer trained on the corpus), loss.csv (step,
tokens, train loss, held-out loss), dump/ (the KV dump of held-out text, ≤ 20 MB: two of the layers,
bf16, with gradients), PROVENANCE.md, and with --gsrq effects.json: what `gsrq compare` and
`gsrq sweep --over dim` find on the dump's values and keys (GSKM's cosine and gain-error gains, K-means'
shrinkage as D grows). Needs torch, transformers and tokenizers; meant for a CUDA GPU (bf16).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODEL = dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=6, num_attention_heads=4,
             num_key_value_heads=2, head_dim=128, max_position_embeddings=1024, rope_theta=10000.0,
             tie_word_embeddings=True)
VOCAB = 4096
SEQ = 512
DUMP_LAYERS = "2,4"       # a middle layer and a late one
DUMP_SAMPLES = 6          # 6 × 512 tokens × 2 layers × (k, v, 2 grads: 4×256, q: 512) × 2 B ≈ 18.9 MB


def log(msg):
    print(msg, flush=True)


def train_tokenizer(tokenizers, transformers, text_path, out_dir):
    tk = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token=None, byte_fallback=False))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<s>", "</s>"],
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tk.train([text_path], trainer)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>")
    tok.save_pretrained(out_dir)
    return tok


def batches(ids, batch, seq, gen, torch):
    n = (len(ids) - 1) // seq
    while True:
        starts = torch.randint(0, len(ids) - seq - 1, (batch,), generator=gen)
        x = torch.stack([ids[s:s + seq] for s in starts])
        yield x, n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, help="directory with train.txt and heldout.txt")
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=4.0, help="training time budget")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gsrq", default="", help="gsrq binary: also measure the paper's effects on the dump")
    a = ap.parse_args(argv)
    train_txt, held_txt = (os.path.join(a.corpus, f) for f in ("train.txt", "heldout.txt"))
    for p in (train_txt, held_txt):
        if not os.path.isfile(p):
            print(f"train_sample.py: --corpus {a.corpus}: no {os.path.basename(p)} (run tools/sample_corpus.py)",
                  file=sys.stderr)
            return 2
    try:
        import tokenizers
        import torch
        import transformers
    except ImportError as e:
        print(f"train_sample.py: needs torch, transformers and tokenizers ({e})", file=sys.stderr)
        return 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    os.makedirs(a.out, exist_ok=True)
    model_dir = os.path.join(a.out, "model")
    os.makedirs(model_dir, exist_ok=True)
    torch.manual_seed(a.seed)
    t0 = time.time()
    tok = train_tokenizer(tokenizers, transformers, train_txt, model_dir)
    log(f"tokenizer: {VOCAB} BPE tokens in {time.time() - t0:.0f} s")
    with open(train_txt, encoding="utf-8") as f:
        train_ids = torch.tensor(tok(f.read())["input_ids"], dtype=torch.long)
    with open(held_txt, encoding="utf-8") as f:
        held_ids = torch.tensor(tok(f.read())["input_ids"], dtype=torch.long)
    log(f"corpus: {len(train_ids):,} training tokens, {len(held_ids):,} held out")

    cfg = transformers.LlamaConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                   **MODEL)
    model = transformers.LlamaForCausalLM(cfg).to(device)
    params = sum(p.numel() for p in model.parameters())
    log(f"model: {params / 1e6:.1f} M parameters on {device}")
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=device == "cuda")
    gen = torch.Generator().manual_seed(a.seed)
    bos = torch.full((a.batch, 1), tok.bos_token_id, dtype=torch.long)
    it = batches(train_ids, a.batch, SEQ - 1, gen, torch)
    budget = a.minutes * 60
    warm = 200
    rows = []
    step, tokens, start = 0, 0, time.time()

    def held_loss():
        model.eval()
        losses = []
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            for s in range(0, min(len(held_ids) - SEQ, 64 * (SEQ - 1)), SEQ - 1):
                x = torch.cat([torch.tensor([tok.bos_token_id]), held_ids[s:s + SEQ - 1]])[None].to(device)
                losses.append(float(model(input_ids=x, labels=x).loss))
        model.train()
        return sum(losses) / len(losses)

    model.train()
    while True:
        elapsed = time.time() - start
        if elapsed > budget:
            break
        # Warm-up, then cosine decay over the time budget (time, not steps, is what is fixed).
        frac = min(1.0, elapsed / budget)
        lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, _ = next(it)
        x = torch.cat([bos, x], dim=1).to(device, non_blocking=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += x.numel()
        if step % 100 == 0 or step == 1:
            h = held_loss() if step % 500 == 0 or step == 1 else float("nan")
            rows.append((step, tokens, float(loss), h, time.time() - start))
            log(f"step {step}: {tokens / 1e6:.1f} M tokens, loss {float(loss):.3f}"
                + (f", held-out {h:.3f}" if h == h else "") + f", {time.time() - start:.0f} s")
    final_held = held_loss()
    rows.append((step, tokens, float(loss), final_held, time.time() - start))
    model.save_pretrained(model_dir)
    with open(os.path.join(a.out, "loss.csv"), "w") as f:
        f.write("step,tokens,train_loss,heldout_loss,seconds\n")
        for r in rows:
            f.write(",".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in r) + "\n")
    log(f"trained {step} steps, {tokens / 1e6:.1f} M tokens in {time.time() - start:.0f} s; held-out loss {final_held:.3f}")

    dump = os.path.join(a.out, "dump")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "dump_kv.py"), "--model", model_dir, "--text",
                        held_txt, "--samples", str(DUMP_SAMPLES), "--seq-len", str(SEQ), "--layers", DUMP_LAYERS,
                        "--out", dump, "--device", device, "--model-dtype", "f32", "--dtype", "bf16", "--force",
                        "--quiet"], capture_output=True, text=True)
    if r.returncode:
        print(r.stderr, file=sys.stderr)
        return 1
    size = sum(os.path.getsize(os.path.join(dump, f)) for f in os.listdir(dump))
    log(f"dump: {size / 1e6:.1f} MB")
    with open(os.path.join(a.out, "PROVENANCE.md"), "w") as f:
        f.write(f"""# The realistic sample: provenance

- Model: Llama-style, trained from scratch by tools/train_sample.py (seed {a.seed}): {MODEL['num_hidden_layers']} layers,
  hidden {MODEL['hidden_size']}, {MODEL['num_attention_heads']} query heads and {MODEL['num_key_value_heads']} KV heads of
  head_dim {MODEL['head_dim']} (GQA), RoPE θ {MODEL['rope_theta']:g}, {params / 1e6:.1f} M parameters; a {VOCAB}-token
  byte-level BPE tokenizer trained on the same text. {step} steps of {a.batch} × {SEQ} tokens
  ({tokens / 1e6:.1f} M tokens) on {torch.cuda.get_device_name(0) if device == 'cuda' else 'the CPU'} in bf16 autocast;
  held-out loss {final_held:.3f} (loss.csv).
- Text: see corpus PROVENANCE.md (the Python 3.11 documentation sources from Debian's python3.11-doc,
  PSF License Version 2); the dump is of held-out documents the model never trained on.
- Dump: tools/dump_kv.py, layers {DUMP_LAYERS}, {DUMP_SAMPLES} sequences of {SEQ} tokens, bf16, with key and value
  gradients of the summed next-token loss; {size / 1e6:.1f} MB.
""")
    if a.gsrq:
        effects = {}
        for tensor in [f"layers.{DUMP_LAYERS.split(',')[0]}.value", f"layers.{DUMP_LAYERS.split(',')[0]}.key"]:
            c = subprocess.run([a.gsrq, "--no-db", "compare", dump, "--tensor", tensor, "--dim", "8", "--k", "256",
                                "--iters", "50", "--json", "-q"], capture_output=True, text=True)
            s = subprocess.run([a.gsrq, "--no-db", "sweep", dump, "--tensor", tensor, "--over", "dim", "--values",
                                "2,4,8,16,32", "--k", "256", "--iters", "30", "--json", "-q"],
                               capture_output=True, text=True)
            effects[tensor] = {"compare": json.loads(c.stdout) if c.returncode == 0 else c.stderr[-300:],
                               "sweep": json.loads(s.stdout) if s.returncode == 0 else s.stderr[-300:]}
        with open(os.path.join(a.out, "effects.json"), "w") as f:
            json.dump(effects, f, indent=1)
        for tensor, e in effects.items():
            c = e["compare"]
            if isinstance(c, dict):
                log(f"{tensor}: cosine km {c['km']['cosine']:.4f} gskm {c['gskm']['cosine']:.4f}; gain error km "
                    f"{c['km']['gain_error']:.4f} gskm {c['gskm']['gain_error']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
