"""Held-out English texts from Debian packages, split into a calibration and an evaluation part
(tools/texts.py prints them), and prose re-flowed as models are trained on it."""
import gzip
import os
import re

from gsrqtools.paths import cache_root

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
    return os.path.join(cache_root(), "texts")


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


def reflow(text):
    """As `gsrq ppl` reads a text: paragraphs (separated by blank lines) joined by "\n", runs of white
    space inside one collapsed to a space."""
    ws = " \t\n\r\f\v"  # C's isspace, as gsrq's reader: a no-break space is not white space here
    paras = [re.sub(f"[{ws}]+", " ", p).strip(ws) for p in re.split(r"\n[ \t\r\f\v]*\n", text)]
    return "\n".join(p for p in paras if p)
