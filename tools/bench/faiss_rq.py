#!/usr/bin/env python3
"""Train FAISS's ResidualQuantizer on a .npy and report training time and held-out NMSE.

Plain k-means per stage (Train_default), the same K, stages and iterations as gsrq train; every
training row is used. Prints one JSON object.
"""
import argparse
import json
import time

import faiss
import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("train")
    ap.add_argument("heldout")
    ap.add_argument("--stages", type=int, required=True)
    ap.add_argument("--nbits", type=int, default=8)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--beam", type=int, default=1)
    args = ap.parse_args()

    xt = np.ascontiguousarray(np.load(args.train).astype(np.float32))
    xh = np.ascontiguousarray(np.load(args.heldout).astype(np.float32))
    rq = faiss.ResidualQuantizer(xt.shape[1], args.stages, args.nbits)
    rq.train_type = faiss.ResidualQuantizer.Train_default
    rq.max_beam_size = args.beam
    rq.cp.niter = args.iters
    rq.cp.max_points_per_centroid = xt.shape[0] + 1
    start = time.perf_counter()
    rq.train(xt)
    train_seconds = time.perf_counter() - start
    start = time.perf_counter()
    recon = rq.decode(rq.compute_codes(xh))
    encode_seconds = time.perf_counter() - start
    nmse = float(((xh - recon) ** 2).sum() / (xh.astype(np.float64) ** 2).sum())
    print(json.dumps({"faiss_version": faiss.__version__, "beam": args.beam, "train_seconds": train_seconds,
                      "encode_seconds": encode_seconds, "heldout_nmse": nmse}))


if __name__ == "__main__":
    main()
