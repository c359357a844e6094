#!/usr/bin/env python3
"""English text for training the realistic sample model: the Python 3.11 documentation's sources as
Debian's python3.11-doc package ships them (/usr/share/doc/python3.11/html/_sources/**/*.rst.txt;
PSF License Version 2, see /usr/share/doc/python3.11-doc/copyright).

    python3 tools/sample_corpus.py --out DIR      # DIR/train.txt, DIR/heldout.txt, DIR/PROVENANCE.md

reStructuredText markup is thinned to prose: directive lines (".. note::"), roles (":func:`x`" →
"x"), heading underlines and tables go; code blocks stay (the documentation is about code). Every
20th document (in sorted path order) is held out: the sample's KV dump is of text the model never
trained on. Deterministic: the same package gives the same files.
"""
import argparse
import hashlib
import os
import re
import sys

SOURCE = "/usr/share/doc/python3.11/html/_sources"
ROLE = re.compile(r":[a-z:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
LITERAL = re.compile(r"``([^`]*)``")
LINK = re.compile(r"`([^`<]*?)\s*<[^>]*>`_+")


def clean(text):
    out = []
    for line in text.splitlines():
        s = line.strip()
        if re.fullmatch(r"([=\-~^\"'`#*+.:_])\1{2,}", s):
            continue  # heading underline or table border
        if s.startswith(".. ") or s.startswith("|") or s.startswith("+-"):
            continue  # directive, substitution or grid table
        if re.match(r"\s*:[a-z-]+:( |$)", line):
            continue  # a directive's option
        line = ROLE.sub(r"\1", line)
        line = LINK.sub(r"\1", line)
        line = LITERAL.sub(r"\1", line)
        out.append(line.rstrip())
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--source", default=SOURCE)
    a = ap.parse_args(argv)
    if not os.path.isdir(a.source):
        print(f"sample_corpus.py: --source {a.source}: not found; install Debian's python3.11-doc", file=sys.stderr)
        return 2
    paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(a.source) for f in fs if f.endswith(".rst.txt"))
    train, held = [], []
    for i, p in enumerate(paths):
        with open(p, encoding="utf-8", errors="replace") as f:
            (held if i % 20 == 19 else train).append(clean(f.read()))
    os.makedirs(a.out, exist_ok=True)
    digests = {}
    for name, docs in (("train.txt", train), ("heldout.txt", held)):
        body = "\n\n".join(docs)
        with open(os.path.join(a.out, name), "w", encoding="utf-8") as f:
            f.write(body)
        digests[name] = (len(docs), len(body.encode()), hashlib.sha256(body.encode()).hexdigest())
    with open(os.path.join(a.out, "PROVENANCE.md"), "w") as f:
        f.write("# Corpus provenance\n\n"
                "Text: the sources of the Python 3.11 documentation (`*.rst.txt`) as Debian 12's `python3.11-doc`\n"
                "package ships them under /usr/share/doc/python3.11/html/_sources. Licence: PSF License Version 2\n"
                "(the package's /usr/share/doc/python3.11-doc/copyright). reStructuredText markup thinned to prose\n"
                "by tools/sample_corpus.py; every 20th document held out.\n\n")
        for name, (n, size, h) in digests.items():
            f.write(f"- {name}: {n} documents, {size:,} bytes, sha256 {h}\n")
    for name, (n, size, _) in digests.items():
        print(f"wrote {os.path.join(a.out, name)}: {n} documents, {size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
