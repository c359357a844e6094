#!/usr/bin/env python3
"""Held-out English texts from Debian packages, split into a calibration and an evaluation part.

    python3 tools/texts.py devil              # prints the two paths: NAME.calib.txt, then NAME.eval.txt
    python3 tools/texts.py debian-reference
    python3 tools/texts.py --list

Pretrained models have read much of the web; a text they have memorized says nothing about a
quantizer (the licence texts in Debian's base-files are such texts). These two are freely licensed,
ship in Debian's main archive, and are read from the installed package, so nothing is downloaded
here (tools/setup.sh --python installs both packages):

  devil             prose: Ambrose Bierce, The Devil's Dictionary (1911), public domain
                    (package dict-devil, /usr/share/dictd/devil.dict.dz)
  debian-reference  technical: Osamu Aoki, Debian Reference, version 2, GPL-2+
                    (package debian-reference-en, /usr/share/debian-reference/debian-reference.en.txt.gz)

Each text is split by position on a paragraph boundary: the first 80% of its characters calibrate
(tools/dump_kv.py --text), the last 20% evaluate (tools/hf_ppl.py --text), so no evaluated token was
seen in calibration. The parts go to ${GSRQ_CACHE:-~/.cache/gsrq-studio}/texts/, written once (through
a temporary file and a rename). Exit codes: 0 done, 2 a text it does not know or whose package is not
installed (named).
"""
import argparse
import gzip
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fetch_model  # noqa: E402  (the one cache root of the tools)

TEXTS = {
    "devil": {
        "title": "Ambrose Bierce, The Devil's Dictionary (1911)", "kind": "prose", "licence": "public domain",
        "package": "dict-devil", "path": "/usr/share/dictd/devil.dict.dz",
    },
    "debian-reference": {
        "title": "Osamu Aoki, Debian Reference (version 2)", "kind": "technical", "licence": "GPL-2+",
        "package": "debian-reference-en", "path": "/usr/share/debian-reference/debian-reference.en.txt.gz",
    },
}
CALIBRATION_SHARE = 0.8


class InputError(Exception):
    """Exit code 2."""


def cache_dir():
    return os.path.join(fetch_model.cache_root(), "texts")


def read_source(name, t, root="/"):
    path = os.path.join(root, t["path"].lstrip("/"))
    if not os.path.isfile(path):
        raise InputError(f"{name}: {t['path']} is missing: install the Debian package {t['package']} "
                         "(tools/setup.sh --python installs it)")
    with gzip.open(path, "rt", encoding="utf-8", errors="strict") as f:
        text = f.read()
    if name == "devil":
        # dictd's own entries (00-database-…) and the e-text's title page come first: keep the book,
        # from its preface on.
        lines = text.splitlines()
        start = next((i for i, l in enumerate(lines) if l.strip() == "PREFACE"), None)
        if start is None:
            raise InputError(f"{name}: {t['path']} does not hold the dictionary's entries")
        text = "\n".join(lines[start:])
    return text.replace("\r\n", "\n").strip() + "\n"


def split(text, share=CALIBRATION_SHARE):
    """(calibration, evaluation): cut at the first blank line after `share` of the characters."""
    cut = text.find("\n\n", int(len(text) * share))
    if cut < 0:
        raise InputError("the text has no paragraph break after its first part")
    return text[:cut].strip() + "\n", text[cut:].strip() + "\n"


def write_once(path, body):
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            if f.read() == body:
                return
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(body)
    os.replace(tmp, path)


def prepare(name):
    if name not in TEXTS:
        raise InputError(f"{name}: not a known text ({', '.join(TEXTS)})")
    t = TEXTS[name]
    calib, evaluation = split(read_source(name, t))
    d = cache_dir()
    os.makedirs(d, exist_ok=True)
    paths = (os.path.join(d, f"{name}.calib.txt"), os.path.join(d, f"{name}.eval.txt"))
    write_once(paths[0], calib)
    write_once(paths[1], evaluation)
    return paths


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", nargs="?")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    try:
        if a.list:
            for n, t in TEXTS.items():
                print(f"{n:<18} {t['kind']:<10} {t['title']}; {t['licence']} (Debian package {t['package']})")
            return 0
        if not a.name:
            raise InputError("name a text (--list names them)")
        for p in prepare(a.name):
            print(p)
        return 0
    except InputError as e:
        print(f"texts.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
