#!/usr/bin/env python3
"""Train the realistic sample: a small Llama (head_dim 128, GQA, RoPE) from scratch on the corpus
tools/sample_corpus.py prepares, on the CPU (or a GPU), then dump its KV cache on held-out text.

    python3 tools/sample_corpus.py --out corpus/
    python3 tools/train_sample.py --corpus corpus/ --out sample/ [--minutes 45] [--seed 0]

The model and its tokenizer follow llama2.c's conventions so that `gsrq ppl` runs the same model:
hidden size = heads × head_dim, RoPE θ 10000, RMSNorm ε 1e-5, a tied classifier, and a
sentencepiece-style BPE with byte fallback (ids 0–2 <unk> <s> </s>, 3–258 the bytes). The text is
re-flowed as `gsrq ppl` re-flows it (one paragraph per line), so both read the same kind of text.

Writes to --out: model/ (config, float32 safetensors, tokenizer.json), model.bin and tokenizer.bin
(llama2.c), loss.csv (step, tokens, train loss, held-out loss, seconds), heldout.txt (the re-flowed
held-out text), dump/ (the KV dump of held-out text: one layer, bf16, with gradients, ≤ 20 MB) and
PROVENANCE.md. Deterministic for a seed and thread count up to the floating-point order of the
BLAS. Needs torch, transformers and tokenizers (tools/hf_env.sh).
"""
import argparse
import math
import os
import subprocess
import sys
import time

from gsrqtools.paths import ROOT
from gsrqtools.texts import reflow

# 7.3 M parameters: 29 MB as float32, small enough to commit in both formats.
MODEL = dict(hidden_size=512, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=128, max_position_embeddings=512, rope_theta=10000.0,
             rms_norm_eps=1e-5, tie_word_embeddings=True)
VOCAB = 2048
SEQ = 512
DUMP_LAYERS = "2"         # a middle layer of four: as many tokens as fit, rather than more layers
DUMP_SAMPLES = 12         # 12 × 512 tokens × (k, v, 2 grads: 4×256, q: 512) × 2 B ≈ 18.9 MB
SPECIAL = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]


def log(msg):
    print(msg, flush=True)


def train_tokenizer(tokenizers, transformers, text_path, out_dir):
    tk = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tk.decoder = tokenizers.decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    # Characters beyond the 120 commonest fall back to their bytes, as in llama2.c.
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL, limit_alphabet=120,
                                             show_progress=False)
    tk.train([text_path], trainer)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>",
                                               unk_token="<unk>")
    tok.save_pretrained(out_dir)
    return tok


def batches(ids, batch, seq, gen, torch):
    while True:
        starts = torch.randint(0, len(ids) - seq - 1, (batch,), generator=gen)
        yield torch.stack([ids[s:s + seq] for s in starts])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, help="directory with train.txt and heldout.txt")
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=45.0, help="training time budget")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
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
        print(f"train_sample.py: needs torch, transformers and tokenizers ({e}); see tools/hf_env.sh",
              file=sys.stderr)
        return 2
    import llama2c_convert
    if a.threads:
        torch.set_num_threads(a.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    os.makedirs(a.out, exist_ok=True)
    model_dir = os.path.join(a.out, "model")
    os.makedirs(model_dir, exist_ok=True)
    torch.manual_seed(a.seed)

    flowed = {}
    for name, path in (("train", train_txt), ("heldout", held_txt)):
        with open(path, encoding="utf-8") as f:
            flowed[name] = reflow(f.read())
        with open(os.path.join(a.out, f"{name}.txt"), "w", encoding="utf-8") as f:
            f.write(flowed[name] + "\n")
    t0 = time.time()
    tok = train_tokenizer(tokenizers, transformers, os.path.join(a.out, "train.txt"), model_dir)
    log(f"tokenizer: {len(tok)} BPE tokens in {time.time() - t0:.0f} s")
    train_ids = torch.tensor(tok(flowed["train"], add_special_tokens=False)["input_ids"], dtype=torch.long)
    held_ids = torch.tensor(tok(flowed["heldout"], add_special_tokens=False)["input_ids"], dtype=torch.long)
    os.remove(os.path.join(a.out, "train.txt"))  # the corpus's train.txt is the source; this was a copy
    log(f"corpus: {len(train_ids):,} training tokens, {len(held_ids):,} held out")

    cfg = transformers.LlamaConfig(vocab_size=len(tok), bos_token_id=1, eos_token_id=2, **MODEL)
    model = transformers.LlamaForCausalLM(cfg).to(device)
    params = sum(p.numel() for p in model.parameters())
    log(f"model: {params / 1e6:.2f} M parameters on {device}, {torch.get_num_threads()} threads")
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(a.seed)
    bos = torch.full((a.batch, 1), 1, dtype=torch.long)
    it = batches(train_ids, a.batch, SEQ - 1, gen, torch)
    budget = a.minutes * 60
    warm = 100
    rows = []
    step, tokens, start = 0, 0, time.time()

    def held_loss(n=16):
        model.eval()
        losses = []
        with torch.no_grad():
            for s in range(0, min(len(held_ids) - SEQ, n * (SEQ - 1)), SEQ - 1):
                x = torch.cat([torch.tensor([1]), held_ids[s:s + SEQ - 1]])[None].to(device)
                losses.append(float(model(input_ids=x, labels=x, use_cache=False).loss))
        model.train()
        return sum(losses) / len(losses)

    model.train()
    loss = torch.tensor(float("nan"))
    while time.time() - start < budget:
        # Warm-up, then cosine decay over the time budget (time, not steps, is what is fixed).
        frac = min(1.0, (time.time() - start) / budget)
        lr = a.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        x = torch.cat([bos, next(it)], dim=1).to(device)
        loss = model(input_ids=x, labels=x, use_cache=False).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += x.numel()
        if step % 25 == 0 or step == 1:
            h = held_loss() if step % 100 == 0 or step == 1 else float("nan")
            rows.append((step, tokens, float(loss), h, time.time() - start))
            log(f"step {step}: {tokens / 1e6:.2f} M tokens, loss {float(loss):.3f}"
                + (f", held-out {h:.3f}" if h == h else "") + f", {time.time() - start:.0f} s")
    final_held = held_loss(64)
    rows.append((step, tokens, float(loss), final_held, time.time() - start))
    model.save_pretrained(model_dir)
    with open(os.path.join(a.out, "loss.csv"), "w") as f:
        f.write("step,tokens,train_loss,heldout_loss,seconds\n")
        for r in rows:
            f.write(",".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in r) + "\n")
    log(f"trained {step} steps, {tokens / 1e6:.2f} M tokens in {time.time() - start:.0f} s; "
        f"held-out loss {final_held:.3f}")
    llama2c_convert.to_llama2c(model_dir, os.path.join(a.out, "model.bin"), os.path.join(a.out, "tokenizer.bin"))

    dump = os.path.join(a.out, "dump")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "dump_kv.py"), "--model", model_dir, "--text",
                        os.path.join(a.out, "heldout.txt"), "--samples", str(DUMP_SAMPLES), "--seq-len", str(SEQ),
                        "--layers", DUMP_LAYERS, "--out", dump, "--device", device, "--model-dtype", "f32",
                        "--dtype", "bf16", "--force", "--quiet"], capture_output=True, text=True)
    if r.returncode:
        print(r.stderr, file=sys.stderr)
        return 1
    size = sum(os.path.getsize(os.path.join(dump, f)) for f in os.listdir(dump))
    log(f"dump: {size / 1e6:.1f} MB")
    where = torch.cuda.get_device_name(0) if device == "cuda" else f"the CPU ({torch.get_num_threads()} threads)"
    with open(os.path.join(a.out, "PROVENANCE.md"), "w") as f:
        f.write(f"""# The realistic sample: provenance

- Model: Llama, trained from scratch by tools/train_sample.py (seed {a.seed}, torch {torch.__version__},
  transformers {transformers.__version__}): {MODEL['num_hidden_layers']} layers, hidden {MODEL['hidden_size']},
  {MODEL['num_attention_heads']} query heads and {MODEL['num_key_value_heads']} KV heads of head_dim {MODEL['head_dim']} (GQA),
  RoPE θ {MODEL['rope_theta']:g}, {params / 1e6:.2f} M parameters (float32); a {len(tok)}-token sentencepiece-style
  BPE tokenizer with byte fallback trained on the same text. {step} steps of {a.batch} × {SEQ} tokens
  ({tokens / 1e6:.2f} M tokens) on {where} in float32, {a.minutes:g} minutes; held-out loss {final_held:.3f}
  (loss.csv). model.bin and tokenizer.bin are the same model and tokenizer in llama2.c's format
  (tools/llama2c_convert.py).
- Text: see the corpus's provenance below (the Python 3.11 documentation sources from Debian's
  python3.11-doc, PSF License Version 2), re-flowed one paragraph per line; the dump is of held-out
  documents the model never trained on (heldout.txt).
- Dump: tools/dump_kv.py, layers {DUMP_LAYERS}, {DUMP_SAMPLES} sequences of {SEQ} tokens, bf16, with key and value
  gradients of the summed next-token loss; {size / 1e6:.1f} MB.

""")
        with open(os.path.join(a.corpus, "PROVENANCE.md")) as c:
            f.write(c.read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
