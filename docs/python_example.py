"""docs/python.md's worked example: open a dump, train GSRQ (KM and GSKM stages) on a model's keys,
compare with FAISS's product residual quantizer at the same bits on the same rows, and plot.

    python docs/python_example.py [--dump resources/samples/pydocs-hd128] [--out example.png]

Needs the gsrq package, faiss-cpu and matplotlib (all in tools/hf_env.sh's environment).
"""
import argparse
import os
import time

import faiss
import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import gsrq  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ap = argparse.ArgumentParser()
ap.add_argument("--dump", default=os.path.join(ROOT, "resources", "samples", "pydocs-hd128"))
ap.add_argument("--tensor", default="layers.2.key")
ap.add_argument("--out", default="example.png")
ap.add_argument("--iters", type=int, default=10)
a = ap.parse_args()

# 1. The dump: tensors are read-only views of the mapped file; rows() gives [tokens, heads·head_dim]
#    (BF16 here, so converted to float32 once).
dump = gsrq.open_dump(a.dump)
print(dump, dump.info(a.tensor)["shape"], dump.info(a.tensor)["dtype"])
x = dump.rows(a.tensor)
rng = np.random.default_rng(0)
held = rng.permutation(len(x))[: len(x) // 4]
train_rows = np.delete(x, held, axis=0)
held_rows = x[held]

# 2. GSRQ at 1 bit per activation (the paper's D = 128, R = 16, K = 256) with KM and GSKM stages.
results = {}
for method in ("km", "gskm"):
    t0 = time.perf_counter()
    r = gsrq.train(train_rows, bpa=1, method=method, iterations=a.iters, tensor=a.tensor, source=dump)
    books = r.codebooks
    results[f"gsrq {method}"] = {
        "heldout": books.evaluate(held_rows),
        "seconds": time.perf_counter() - t0,
        "curve": [m["nmse"] for m in r.after_stage],
    }

# 3. FAISS's ProductResidualQuantizer: the same structure (2 subspaces × 16 stages × 8 bits) and the
#    same bits per row, k-means per stage, with greedy encoding as gsrq.train's beam=1 (FAISS's
#    default beam is 5: set both, gsrq.train(beam=5), to compare beam searches).
d = x.shape[1]
prq = faiss.ProductResidualQuantizer(d, d // books.dim, books.stages, 8)
for i in range(prq.nsplits):
    q = faiss.downcast_Quantizer(prq.subquantizer(i))
    q.train_type = faiss.ResidualQuantizer.Train_default
    q.max_beam_size = 1
    q.cp.niter = a.iters
    q.cp.max_points_per_centroid = len(train_rows) + 1  # every row, as gsrq trains on them
t0 = time.perf_counter()
prq.train(np.ascontiguousarray(train_rows))
seconds = time.perf_counter() - t0
recon = prq.decode(prq.compute_codes(np.ascontiguousarray(held_rows)))
results[f"faiss {faiss.__version__} PRQ"] = {"heldout": gsrq.metrics(held_rows, recon), "seconds": seconds, "curve": None}

print(f"{a.tensor}: {len(train_rows)} training rows, {len(held_rows)} held out, 1 bit per activation")
print(f"{'':22s} {'nmse':>8s} {'cosine':>8s} {'shrinkage':>9s} {'seconds':>8s}")
for name, res in results.items():
    m = res["heldout"]
    print(f"{name:22s} {m['nmse']:8.4f} {m['cosine']:8.4f} {m['shrinkage']:9.4f} {res['seconds']:8.2f}")

# 4. The curves: training NMSE after each stage, and the held-out figures as markers.
fig, ax = plt.subplots(figsize=(6, 4))
for name, res in results.items():
    if res["curve"]:
        ax.plot(range(1, len(res["curve"]) + 1), res["curve"], label=f"{name} (train)")
    ax.axhline(res["heldout"]["nmse"], linestyle=":", color=ax.lines[-1].get_color() if res["curve"] else "k",
               label=f"{name} held-out")
ax.set_xlabel("stage")
ax.set_ylabel("NMSE")
ax.set_yscale("log")
ax.set_title(f"{a.tensor} of {os.path.basename(a.dump.rstrip('/'))}")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(a.out, dpi=100)
print("wrote", a.out)
