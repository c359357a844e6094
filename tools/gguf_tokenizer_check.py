#!/usr/bin/env python3
"""The engine's tokenizer of a GGUF model against transformers' tokenizer of the same file, id for id.

Builds a mixed corpus (over 100,000 characters): prose (the evaluation part of tools/texts.py's
devil), code (this repository's Python tools), numbers, and a synthetic multilingual part written here
(Greek, Cyrillic, Chinese, Japanese, Korean, Arabic, Hebrew, Hindi, Thai, emoji with skin tones, flags
and joiners, unusual white space, and the model's special tokens inside text); tokenizes it with
`gsrq tokenize MODEL.gguf` and with AutoTokenizer.from_pretrained(dir, gguf_file=...) (no special
tokens added), and compares, part by part.

  python3 tools/gguf_tokenizer_check.py --model smollm2 [--gsrq build/app/cli/gsrq]
  python3 tools/gguf_tokenizer_check.py MODEL.gguf

Exit 0 when every part's ids are identical, 1 when any differs (the first difference printed), 2 for
bad input. Needs transformers and gguf (tools/hf_env.sh).
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile
import time

from gsrqtools import models, texts
from gsrqtools.paths import ROOT

# Synthetic multilingual lines, written for this check (not taken from anywhere).
WORLD = [
    "Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο· 12 φορές!",
    "Съешь же ещё этих мягких французских булок, да выпей чаю — 3,5 литра.",
    "敏捷的棕色狐狸跳过了懒狗。数据压缩：每个激活0.375比特。",
    "素早い茶色の狐が怠け者の犬を飛び越える。キャッシュは２０４８トークン。",
    "빠른 갈색 여우가 게으른 개를 뛰어넘는다. 키와 값을 압축합니다.",
    "الثعلب البني السريع يقفز فوق الكلب الكسول، ١٢٣ مرة.",
    "השועל החום המהיר קופץ מעל הכלב העצלן.",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है। १२३४",
    "สุนัขจิ้งจอกสีน้ำตาลกระโดดข้ามสุนัขขี้เกียจ",
    "Emoji: 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️‍🔥 🧑🏿‍💻 ✨ 😀😃😄 🤖",
    "Spaces:\tTab\t\tTwo  three   NBSP\u00a0here\u3000ideographic\u2009thin\r\nCRLF\rCR\u2028LS end",
    "Accents: naïve café résumé Ångström façade; ligature ﬁ; combining e\u0301 and precomposed é.",
    "Quotes ‘single’ “double” «guillemets» — dashes – and … ellipsis; math ∑ x² ≤ ∞ ≠ √2.",
    "Contractions: I'm, you're, we've, they'll, she'd, it's, DON'T, WE'LL, O'Neil's",
]


def corpus(specials):
    """[(part name, text)], each part on its own, together over 100,000 characters."""
    prose = open(texts.prepare("devil")[1], encoding="utf-8").read()[:45000]
    code = ""
    for path in sorted(glob.glob(os.path.join(ROOT, "tools", "*.py")) +
                       glob.glob(os.path.join(ROOT, "tools", "gsrqtools", "*.py"))):
        code += open(path, encoding="utf-8").read()
        if len(code) >= 35000:
            break
    numbers = " ".join(f"{i} {i * 37 % 1000:03d} {i / 7:.5f} {i * 1e-9:.3e} 0x{i * 2654435761 % 2**32:08x} "
                       f"{i:,} v{i % 10}.{i % 7}.{i % 3} 2026-11-{1 + i % 28:02d}" for i in range(1, 260))
    world = "\n".join(line + (f" {specials[i % len(specials)]} " if specials and i % 3 == 0 else "")
                      for i, line in enumerate(WORLD * 12))
    return [("prose", prose), ("code", code[:35000]), ("numbers", numbers), ("multilingual", world)]


def engine_ids(path, text, gsrq):
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
        f.write(text)
    try:
        r = subprocess.run([gsrq, "tokenize", path, "--text", f.name], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        raise RuntimeError(f"gsrq tokenize exited {r.returncode}: {r.stderr.strip()}")
    return [int(x) for x in r.stdout.split()]


def compare(path, gsrq):
    """[(part, characters, tokens, None or (index, ours, theirs))] for every part of the corpus."""
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    specials = [t for t in tok.all_special_tokens if t][:3]
    out = []
    for name, text in corpus(specials):
        theirs = tok(text, add_special_tokens=False)["input_ids"]
        ours = engine_ids(path, text, gsrq)
        diff = None
        if ours != theirs:
            i = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            diff = (i, ours[max(0, i - 3):i + 5], theirs[max(0, i - 3):i + 5],
                    tok.decode(theirs[max(0, i - 3):i + 5]))
        out.append((name, len(text), len(theirs), diff))
    return out


def main(argv=None):
    a, path = models.gguf_check_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]), argv,
                                          "gguf_tokenizer_check.py")
    t0 = time.time()
    rows = compare(path, a.gsrq)
    for name, chars, n, diff in rows:
        print(f"{name:13s} {chars:7,d} characters {n:7,d} tokens  " + ("identical" if diff is None else
              f"DIFFERS at token {diff[0]}: ours {diff[1]}, transformers' {diff[2]} ({diff[3]!r})"))
    total = sum(r[1] for r in rows)
    bad = [r for r in rows if r[3] is not None]
    print(f"{path}: {total:,} characters, {len(rows) - len(bad)} of {len(rows)} parts identical "
          f"({time.time() - t0:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
