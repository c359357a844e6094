#!/usr/bin/env python3
"""Time FAISS k-means iterations on a .npy file: the outside baseline of bench_cluster.sh.

Every row is used (max_points_per_centroid is raised so FAISS does not subsample), with the same
K and iteration count as gsrq bench-cluster. Prints one JSON object.
"""
import argparse
import json
import time

import faiss
import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("--k", type=int, default=256)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", action="store_true",
                    help="train once untimed first (threads started, memory touched)")
    args = ap.parse_args()

    x = np.ascontiguousarray(np.load(args.data).astype(np.float32))

    def kmeans():
        return faiss.Kmeans(x.shape[1], args.k, niter=args.iters, seed=args.seed, verbose=False,
                            max_points_per_centroid=x.shape[0] + 1, spherical=False)

    if args.warmup:
        kmeans().train(x)
    km = kmeans()
    start = time.perf_counter()
    km.train(x)
    total = time.perf_counter() - start
    print(json.dumps({
        "faiss_version": faiss.__version__,
        "omp_threads": faiss.omp_get_max_threads(),
        "rows": int(x.shape[0]), "dim": int(x.shape[1]), "k": args.k, "iterations": args.iters,
        "seconds_per_iteration": total / args.iters,
        "total_seconds": total,
        "final_objective": float(km.obj[-1]) / x.shape[0] if len(km.obj) else None,
    }))


if __name__ == "__main__":
    main()
