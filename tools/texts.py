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
import sys

from gsrqtools.texts import TEXTS, InputError, prepare  # noqa: F401


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
