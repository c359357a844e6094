#!/usr/bin/env python3
"""The GPU kernels' registers, spills and shared memory as nvcc builds them, against their plans.

    python3 tools/gpu/resource_usage.py [--nvcc PATH] [--arch 80,90] [--json FILE]

Compiles gpu/decode/fp16_kernels.cu for each architecture (a cubin, `nvcc --resource-usage`; no
device needed), reads ptxas' report for every instance of fp16DecodeKernel<G, head_dim>, and checks
what the split planner (gpu/decode/roofline.cpp, fp16ResidentBlocks) assumes of them:
- at most kFp16MaxRegisters (64) registers a thread and no spills to local memory;
- no static shared memory (the kernel holds only its dynamic stages, fp16DecodeSharedBytes());
- hence resident blocks per multiprocessor, by CUDA's occupancy rules (registers allocated per warp
  in units of 256, shared memory with 1 KiB reserved per block, 2,048 threads and 32 blocks per
  multiprocessor, 164 KiB of shared memory on sm_80 and 228 KiB on sm_90), at least the plan's: 8
  blocks of 128 threads, 4 of 256 (an instance under the cap may fit one more on sm_80, whose
  planned waves are then a floor).
And of gpu/cluster/cluster_kernels.cu's pass and update kernels on sm_90, at most the registers the
pass's latency model assumes for Hopper (gpu/cluster/pass_costs.h, ClusterKernelRegisters), no spills,
and so of gpu/cluster/fused_argmax.cu's fusedScoreArgmaxKernel<D> for every D it is built for;
of the paper kernels (paperBinsKernel, paperDecodeKernel) on sm_90, at most the registers the paper
path's latency model assumes (decode_math.h, kPaperBinsRegisters, kPaperBinsWalkRegisters and
kPaperSplitRegisters), no spills.
And of gpu/decode/lookup_kernels.cu's lookupStepKernel (the tables', the splits' and the combine's
blocks of one launch), what lookupResidentBlocks assumes: 256 threads at no more registers than
kLookupMinBlocks (4) blocks allow, no spills or stack frame (nor in lookupTables and stageCombine,
the table and combine blocks' calls), and its static shared memory kLookupSplitStaticBytes (a float
per warp of kMaxBlockWarps); and no spills in the paper path's combine, lookupStageKernel.
Prints a table; exit 0 when every instance meets the plan, 1 when one does not, 2 on bad input.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(ROOT, "gpu", "decode", "decode_kernels.cu")  # the paper path's kernels
FP16_SOURCE = os.path.join(ROOT, "gpu", "decode", "fp16_kernels.cu")
LOOKUP_SOURCE = os.path.join(ROOT, "gpu", "decode", "lookup_kernels.cu")
MATH = os.path.join(ROOT, "gpu", "decode", "decode_math.h")
CLUSTER_SOURCE = os.path.join(ROOT, "gpu", "cluster", "cluster_kernels.cu")
FUSED_SOURCE = os.path.join(ROOT, "gpu", "cluster", "fused_argmax.cu")
FUSED_WIDTHS = (16, 32, 48, 64, 80, 96, 112, 128)
PASS_COSTS = os.path.join(ROOT, "gpu", "cluster", "pass_costs.h")
# Each clustering kernel and its field of ClusterKernelRegisters.
CLUSTER_KERNELS = {"argmaxRowsKernel": "argmax", "tileSumsKernel": "tileSums", "tileReduceKernel": "tileReduce",
                   "sumArraysKernel": "rowTotals", "clusterTotalsKernel": "clusterTotals",
                   "updateCentroidsKernel": "update"}


def cluster_instances():
    """(instance, ClusterKernelRegisters field): the sums kernel's instances for 256, 128 and 32 clusters."""
    for kernel, field in CLUSTER_KERNELS.items():
        if kernel == "tileSumsKernel":
            for c in (256, 128, 32):
                yield f"{kernel}<{c}>", field
        else:
            yield kernel, field


def cluster_registers():
    """ClusterKernelRegisters' defaults, read from pass_costs.h so the check follows the source."""
    text = open(PASS_COSTS, encoding="utf-8").read()
    m = re.search(r"struct ClusterKernelRegisters \{\s*int ([^;]+);", text)
    if not m:
        raise SystemExit(f"resource_usage.py: {PASS_COSTS} has no ClusterKernelRegisters")
    out = {k.strip(): int(v) for k, v in (x.split("=") for x in m.group(1).split(","))}
    m = re.search(r"int fusedNarrow = (\d+), fusedWide = (\d+);", text)
    if not m:
        raise SystemExit(f"resource_usage.py: {PASS_COSTS} has no fusedNarrow, fusedWide")
    out["fusedNarrow"], out["fusedWide"] = int(m.group(1)), int(m.group(2))
    return out

# Per architecture: registers and shared memory per multiprocessor, threads and blocks per multiprocessor.
ARCH = {
    80: {"regs": 65536, "shared": 164 * 1024, "threads": 2048, "blocks": 32},
    90: {"regs": 65536, "shared": 228 * 1024, "threads": 2048, "blocks": 32},
}


def constants():
    """The plan's constants, read from decode_math.h so the check follows the source."""
    text = open(MATH, encoding="utf-8").read()

    def const(name):
        m = re.search(r"constexpr int %s = (\d+);" % name, text)
        if not m:
            raise SystemExit(f"resource_usage.py: {MATH} has no constant {name}")
        return int(m.group(1))

    return {n: const(n) for n in ("kFp16Stages", "kFp16StageBytes", "kFp16MaxRegisters", "kFp16MinThreads",
                                  "kFeaturesPerLane", "kLookupSplitThreads", "kLookupMinBlocks", "kMaxBlockWarps")}


def paper_registers():
    """decode_math.h's kPaperBinsRegisters, kPaperBinsWalkRegisters and kPaperSplitRegisters, by compiled group
    1, 2, 4, 8."""
    text = open(MATH, encoding="utf-8").read()
    out = {}
    for kind, name in (("paperBinsKernel", "kPaperBinsRegisters"), ("paperBinsWalk", "kPaperBinsWalkRegisters"),
                       ("paperDecodeKernel", "kPaperSplitRegisters")):
        m = re.search(r"%s\[4\] = \{([\d, ]+)\};" % name, text)
        if not m:
            raise SystemExit(f"resource_usage.py: {MATH} has no {name}")
        out[kind] = [int(x) for x in m.group(1).split(",")]
    return out


def layout_threads(head_dim, group, c):
    lanes = head_dim // c["kFeaturesPerLane"]
    return max(c["kFp16MinThreads"], lanes * group)


def resident_blocks(arch, threads, regs, shared_bytes):
    a = ARCH[arch]
    warps = (threads + 31) // 32
    regs_per_warp = (regs * 32 + 255) // 256 * 256
    by_regs = a["regs"] // (regs_per_warp * warps) if regs else a["blocks"]
    by_shared = a["shared"] // (shared_bytes + 1024)
    return min(a["threads"] // threads, by_regs, by_shared, a["blocks"])


def planned_blocks(arch, threads, c, shared_bytes):
    """fp16BlocksPerSm's arithmetic: registers at the cap."""
    a = ARCH[arch]
    return min(a["threads"] // threads, a["regs"] // (threads * c["kFp16MaxRegisters"]),
               a["shared"] // (shared_bytes + 1024), a["blocks"])


def compile_report(nvcc, arch, source=SOURCE):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [nvcc, "-I" + ROOT, "-isystem=/usr/include/eigen3", "-O3", "-DNDEBUG", "-std=c++20",
               f"-arch=sm_{arch}", "-cubin", "--resource-usage", "-o", os.path.join(tmp, "k.cubin"), source]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"resource_usage.py: nvcc failed for sm_{arch}:\n{r.stderr[-4000:]}")
        return r.stdout + r.stderr


def parse(report, key=lambda name: (lambda k: (int(k.group(1)), int(k.group(2))) if k else None)(
        re.search(r"16fp16DecodeKernelILi(\d+)ELi(\d+)EE", name))):
    """{key(name): {"regs", "spill_stores", "spill_loads", "stack", "smem"}} for the kernels key names
    (by default fp16DecodeKernel's instances, keyed (G, head_dim))."""
    out = {}
    current = None
    for line in report.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            current = key(m.group(1))
            if current:
                out[current] = {"smem": 0}
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            out[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            out[current]["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            out[current]["smem"] = int(s.group(1)) if s else 0
            current = None
    return out


def called_functions(report, names):
    """(name, problem) for every copy of the device functions whose mangled names contain one of
    `names`: problem is "" where ptxas gave it no stack frame and no spills."""
    out = []
    lines = report.splitlines()
    for i, line in enumerate(lines):
        m = re.search(r"Function properties for (\S+)", line)
        if not m or not any(n in m.group(1) for n in names):
            continue
        name = next(n for n in names if n in m.group(1)).lstrip("0123456789")
        frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                          lines[i + 1] if i + 1 < len(lines) else "")
        if not frame:
            out.append((name, "no stack and spill line in ptxas' report"))
        elif any(int(x) for x in frame.groups()):
            out.append((name, f"{frame.group(1)} bytes of stack frame, "
                              f"{int(frame.group(2)) + int(frame.group(3))} bytes of spills"))
        else:
            out.append((name, ""))
    return out


def check_assumed(arch, kernel, r, want, rows, bad):
    """One kernel's ptxas report r (None: not in it) against the registers a latency model assumes."""
    what = f"sm_{arch} {kernel}"
    if r is None:
        bad.append(f"{what}: not found in ptxas' report")
        return
    spills = r.get("spill_stores", 0) + r.get("spill_loads", 0)
    rows.append({"arch": arch, "kernel": kernel, **r, "model_registers": want})
    print(f"{'sm_%d' % arch:>5} {kernel:<22} {r['regs']:>4} {spills:>6} {r['smem']:>5}  "
          f"(the latency model assumes {want} registers)")
    if r["regs"] > want:
        bad.append(f"{what}: {r['regs']} registers, the latency model assumes {want}")
    if spills:
        bad.append(f"{what}: {spills} bytes of spills to local memory")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    ap.add_argument("--arch", default="80,90", help="comma-separated: 80, 90")
    ap.add_argument("--json", help="write the table here as JSON")
    a = ap.parse_args()
    if not os.access(a.nvcc, os.X_OK):
        print(f"resource_usage.py: --nvcc {a.nvcc}: not an executable nvcc", file=sys.stderr)
        return 2
    try:
        archs = [int(x) for x in a.arch.split(",") if x.strip()]
    except ValueError:
        archs = []
    if not archs or any(x not in ARCH for x in archs):
        print(f"resource_usage.py: --arch {a.arch}: takes {', '.join(map(str, ARCH))}", file=sys.stderr)
        return 2
    c = constants()
    shared_bytes = c["kFp16Stages"] * c["kFp16StageBytes"] + 16  # fp16DecodeSharedBytes()
    rows, bad = [], []
    print(f"{'arch':>5} {'G':>2} {'head_dim':>8} {'threads':>7} {'regs':>4} {'spills':>6} {'smem':>5} "
          f"{'blocks/SM':>9} {'planned':>7}")
    for arch in archs:
        found = parse(compile_report(a.nvcc, arch, FP16_SOURCE))
        expected = {(g, hd) for g in (1, 2, 4, 8) for hd in (64, 128, 256)}
        if set(found) != expected:
            bad.append(f"sm_{arch}: instances {sorted(found)} where {sorted(expected)} were expected")
        for (g, hd), r in sorted(found.items()):
            threads = layout_threads(hd, g, c)
            blocks = resident_blocks(arch, threads, r["regs"], shared_bytes + r["smem"])
            plan = planned_blocks(arch, threads, c, shared_bytes)
            spills = r.get("spill_stores", 0) + r.get("spill_loads", 0)
            rows.append({"arch": arch, "group": g, "head_dim": hd, "threads": threads, **r,
                         "blocks_per_sm": blocks, "planned_blocks_per_sm": plan})
            print(f"{'sm_%d' % arch:>5} {g:>2} {hd:>8} {threads:>7} {r['regs']:>4} {spills:>6} {r['smem']:>5} "
                  f"{blocks:>9} {plan:>7}")
            what = f"sm_{arch} fp16DecodeKernel<{g}, {hd}>"
            if r["regs"] > c["kFp16MaxRegisters"]:
                bad.append(f"{what}: {r['regs']} registers, the plan caps {c['kFp16MaxRegisters']}")
            if spills:
                bad.append(f"{what}: {spills} bytes of spills to local memory")
            if r["smem"]:
                bad.append(f"{what}: {r['smem']} bytes of static shared memory, the plan has none")
            if blocks < plan:
                bad.append(f"{what}: {blocks} blocks per multiprocessor, the plan {plan}")
        lookup_report = compile_report(a.nvcc, arch, LOOKUP_SOURCE)
        lookup = parse(lookup_report,
                       key=lambda name: "lookupStepKernel" if "16lookupStepKernel" in name else
                       "lookupStageKernel" if "17lookupStageKernel" in name else None)
        # The step's roles, called rather than inlined (the table blocks' and the combine blocks'),
        # every copy ptxas makes of them: nothing to local memory, no spills and no stack frame.
        for name, frame in called_functions(lookup_report, ("12lookupTables", "12stageCombine")):
            if frame:
                bad.append(f"sm_{arch} {name}: {frame}")
        for name in ("lookupTables", "stageCombine"):
            if f"12{name}" not in lookup_report:
                bad.append(f"sm_{arch} {name}: not found in ptxas' report")
        stage = lookup.get("lookupStageKernel")
        if stage is None:
            bad.append(f"sm_{arch} lookupStageKernel: not found in ptxas' report")
        elif stage.get("spill_stores", 0) + stage.get("spill_loads", 0):
            bad.append(f"sm_{arch} lookupStageKernel: "
                       f"{stage.get('spill_stores', 0) + stage.get('spill_loads', 0)} bytes of spills")
        what = f"sm_{arch} lookupStepKernel"
        if "lookupStepKernel" not in lookup:
            bad.append(f"{what}: not found in ptxas' report")
        else:
            r = lookup["lookupStepKernel"]
            threads = c["kLookupSplitThreads"]
            cap = 65536 // (threads * c["kLookupMinBlocks"])
            spills = r.get("spill_stores", 0) + r.get("spill_loads", 0)
            static = c["kMaxBlockWarps"] * 4
            by_regs = resident_blocks(arch, threads, r["regs"], 0)
            rows.append({"arch": arch, "kernel": "lookupStepKernel", "threads": threads, **r,
                         "blocks_per_sm_by_registers": by_regs, "planned_blocks_per_sm": c["kLookupMinBlocks"]})
            print(f"{'sm_%d' % arch:>5} lookupStepKernel {threads:>7} {r['regs']:>4} {spills:>6} {r['smem']:>5} "
                  f"{by_regs:>9} {c['kLookupMinBlocks']:>7}  (blocks by threads and registers; shared memory by shape)")
            if r["regs"] > cap:
                bad.append(f"{what}: {r['regs']} registers, {c['kLookupMinBlocks']} blocks of {threads} allow {cap}")
            if spills or r.get("stack", 0):
                bad.append(f"{what}: {spills} bytes of spills, {r.get('stack', 0)} bytes of stack frame")
            if r["smem"] != static:
                bad.append(f"{what}: {r['smem']} bytes of static shared memory, the plan {static}")
            if by_regs < c["kLookupMinBlocks"]:
                bad.append(f"{what}: {by_regs} blocks per multiprocessor, the plan {c['kLookupMinBlocks']}")
        # On Hopper (the latency models' devices, H100 and H200): the paper kernels at most the
        # registers their latency model assumes (decode_math.h), the clustering kernels at most what
        # the pass's assumes (pass_costs.h, kClusterKernelRegisters); no spills.
        if arch != 90:
            continue
        # The bins kernel is built twice per group, walking the keys' RoPE or not (paperBinsWalk), each
        # held to its own registers.
        paper = parse(compile_report(a.nvcc, arch), key=lambda name: (lambda k: (k.group(1), int(k.group(2)), k.group(3)) if k else None)(
            re.search(r"\d+(paperBinsKernel|paperDecodeKernel)ILi(\d+)ELi\d+E(?:Lb(\d)E)?", name)))
        assumed_paper = paper_registers()
        for kind, walks in (("paperBinsKernel", ("1", "0")), ("paperDecodeKernel", (None,))):
            for i, g in enumerate((1, 2, 4, 8)):
                for w in walks:
                    name = f"{kind}<{g}{'' if w is None else ', walk' if w == '1' else ', no walk'}>"
                    want = assumed_paper["paperBinsWalk" if w == "1" else kind][i]
                    check_assumed(arch, name, paper.get((kind, g, w)), want, rows, bad)
        cluster = parse(compile_report(a.nvcc, arch, CLUSTER_SOURCE),
                        key=lambda name: (lambda k: k.group(1) + (f"<{k.group(3)}>" if k.group(3) else "") if k else None)(
                            re.search(r"\d+(argmaxRowsKernel|tileSumsKernel|tileReduceKernel|sumArraysKernel|"
                                      r"clusterTotalsKernel|updateCentroidsKernel)(ILi(\d+)E)?", name)))
        assumed = cluster_registers()
        for kernel, field in cluster_instances():
            check_assumed(arch, kernel, cluster.get(kernel), assumed[field], rows, bad)
        fused = parse(compile_report(a.nvcc, arch, FUSED_SOURCE),
                      key=lambda name: (lambda k: int(k.group(1)) if k else None)(
                          re.search(r"fusedScoreArgmaxKernelILi(\d+)E", name)))
        for d in FUSED_WIDTHS:
            check_assumed(arch, f"fusedScoreArgmaxKernel<{d}>", fused.get(d),
                          assumed["fusedNarrow" if d <= 64 else "fusedWide"], rows, bad)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    for b in bad:
        print("resource_usage.py: " + b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
