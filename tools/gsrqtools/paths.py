"""Where things are: the repository, the tools' cache, the gsrq binary and the reference decoder."""
import importlib.util
import os

TOOLS = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
ROOT = os.path.dirname(TOOLS)
DOCS = os.path.join(ROOT, "docs")
MANIFEST = os.path.join(TOOLS, "python", "models.json")


def cache_root():
    """${GSRQ_CACHE:-${XDG_CACHE_HOME:-~/.cache}/gsrq-studio}: fetched models, texts, environments."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("GSRQ_CACHE") or os.path.join(base, "gsrq-studio")


def default_gsrq():
    """The gsrq binary the tools run: $GSRQ_CLI, else the build's (build/app/cli/gsrq)."""
    return os.environ.get("GSRQ_CLI", os.path.join(ROOT, "build", "app", "cli", "gsrq"))


def llamacpp_python():
    """The llama-cpp-python environment's interpreter the llama.cpp benchmarks run (tools/bench/
    llamacpp_decode.py --help says how to make it): the cache's llamacpp/bin/python3."""
    return os.path.join(cache_root(), "llamacpp", "bin", "python3")


def import_built_gsrq():
    """The Python package `gsrq` as the build made it ($GSRQ_PYTHON_PATH, else build/python/)."""
    import sys
    sys.path.insert(0, os.environ.get("GSRQ_PYTHON_PATH", os.path.join(ROOT, "build", "python")))
    import gsrq
    return gsrq


_gsrq_decode = None


def gsrq_decode():
    """docs/gsrq_decode.py, the reference decoder of codebooks files, loaded once from its path (it is
    documentation that users copy, so it stays a standalone file there)."""
    global _gsrq_decode
    if _gsrq_decode is None:
        spec = importlib.util.spec_from_file_location("gsrq_decode", os.path.join(DOCS, "gsrq_decode.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # kept only once it has run
        _gsrq_decode = module
    return _gsrq_decode
