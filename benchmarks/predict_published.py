"""The timeline model (benchmarks/timeline_model.py, through
benchmarks/predict_scaling.py --timeline) beside published scaling results,
with nothing fitted to them: every input is a published figure of the
hardware or software, a committed timeline, or left out (and the gap said
in docs/benchmarks.md).

    python benchmarks/predict_published.py \\
        --json benchmarks/results/predicted-published/comparison.json \\
        --markdown benchmarks/results/predicted-published/comparison.md

The inputs and their sources are in CASES and LINKS below and are written
into the JSON beside each prediction.
"""

import argparse
import sys
from pathlib import Path

from benchmarks import predict_scaling
from horovod_train.core.errors import ArgumentParser, run_main

PROG = "predict_published"
TIMELINES = Path(__file__).resolve().parent / "timelines"

HOROVOD_DOCS = "https://github.com/horovod/horovod/blob/master/docs/benchmarks.rst"
TF_BENCHMARKS = ("https://github.com/tensorflow/docs/blob/master/site/en/r1/guide/"
                 "performance/benchmarks.md")
NVIDIA_RN50 = ("https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch/"
               "Classification/ConvNets/resnet50v1.5")
NCCL_TUNING = "https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc"

# Links, as their makers state them; latencies per ring step from NCCL's
# tuning model (Ring, Simple protocol), base latency 8.4 us per allreduce.
LINKS = {
    "roce25": {"gbit": 25, "latency_us": 6.6,
               "source": "25 Gbit/s RoCE, one NIC per server (Horovod's docs); NCCL NET "
                         "latency per ring step (tuning.cc)"},
    "pcie3": {"gbit": 126, "latency_us": 5.7,
              "source": "PCIe 3.0 x16, 15.75 GB/s a direction; NCCL PCI latency (tuning.cc)"},
    "nvlink3": {"gbit": 2400, "latency_us": 5.7,
                "source": "DGX A100: NVLink 3, 300 GB/s a direction per GPU; NCCL NVLink "
                          "latency (tuning.cc)"},
    "nvlink2-dgx1": {"gbit": 1200, "latency_us": 5.7,
                     "source": "DGX-1 V100: six NVLink 2 links of 25 GB/s a direction per "
                               "GPU; NCCL NVLink latency (tuning.cc)"},
}

HOROVOD_2018 = {"fusion_mb": 64, "cycle_ms": 5, "op_latency_us": 8.4, "algorithm": "ring",
                "source": "Horovod's defaults of early 2018 (64 MB fusion buffer, 5 ms "
                          "cycle); NCCL's ring over all 512 ranks"}
PYTORCH_DDP = {"fusion_mb": 25, "cycle_ms": 0, "op_latency_us": 8.4, "algorithm": "ring",
               "source": "PyTorch DDP's 25 MB buckets, each reduced as soon as it is full"}

# (name, timeline, one-GPU images/s, batch, layout, published efficiency,
# links inter/intra, settings, source of the one-GPU and published figures)
CASES = [
    ("Horovod, Inception V3, 128x4 P100", "inception_v3", 142, 64, (128, 4), 0.90,
     "roce25", "pcie3", HOROVOD_2018,
     f"efficiency: {HOROVOD_DOCS}; one GPU: TensorFlow's DGX-1 P100, synthetic, batch 64 "
     f"({TF_BENCHMARKS})"),
    ("Horovod, ResNet-101, 128x4 P100", "resnet101", 129, 64, (128, 4), 0.90,
     "roce25", "pcie3", HOROVOD_2018,
     f"efficiency: {HOROVOD_DOCS}; one GPU: not published; 129 images/s interpolated from "
     f"TensorFlow's DGX-1 P100 ResNet-50 (219) and ResNet-152 (91.8), per-image time linear "
     f"in depth, 101 midway between 50 and 152 ({TF_BENCHMARKS})"),
    ("Horovod, VGG-16, 128x4 P100", "vgg16", 154, 64, (128, 4), 0.68,
     "roce25", "pcie3", HOROVOD_2018,
     f"efficiency: {HOROVOD_DOCS}; one GPU: TensorFlow's DGX-1 P100, synthetic, batch 64 "
     f"({TF_BENCHMARKS})"),
    ("NVIDIA ResNet-50, DGX A100 80GB, TF32, 1x8", "resnet50", 938, 256, (1, 8),
     7248 / (8 * 938), None, "nvlink3", PYTORCH_DDP,
     f"938 -> 7,248 images/s, batch 256 ({NVIDIA_RN50}, training performance)"),
    ("NVIDIA ResNet-50, DGX A100 80GB, AMP, 1x8", "resnet50", 2470, 256, (1, 8),
     16621 / (8 * 2470), None, "nvlink3", PYTORCH_DDP,
     f"2,470 -> 16,621 images/s, batch 256 ({NVIDIA_RN50}, training performance)"),
    ("NVIDIA ResNet-50, DGX-1 16GB, FP32, 1x8", "resnet50", 367, 112, (1, 8),
     2855 / (8 * 367), None, "nvlink2-dgx1", PYTORCH_DDP,
     f"367 -> 2,855 images/s, batch 112 ({NVIDIA_RN50}, training performance)"),
    ("NVIDIA ResNet-50, DGX-1 16GB, AMP, 1x8", "resnet50", 1200, 256, (1, 8),
     8322 / (8 * 1200), None, "nvlink2-dgx1", PYTORCH_DDP,
     f"1,200 -> 8,322 images/s, batch 256 ({NVIDIA_RN50}, training performance)"),
]
TARGET_POINTS = 5


def argv_for(case: tuple) -> list[str]:
    _, timeline, rate, batch, (nodes, per_node), _, inter, intra, settings, _ = case
    argv = ["--timeline", str(TIMELINES / f"{timeline}.json"), "--images-per-sec", str(rate),
            "--batch-size", str(batch), "--layouts", f"1x1,{nodes}x{per_node}",
            "--fusion-mb", str(settings["fusion_mb"]), "--cycle-ms", str(settings["cycle_ms"]),
            "--op-latency-us", str(settings["op_latency_us"]),
            "--algorithm", settings["algorithm"],
            "--intra-gbit", str(LINKS[intra]["gbit"]),
            "--intra-latency-us", str(LINKS[intra]["latency_us"])]
    if inter is not None:
        argv += ["--inter-gbit", str(LINKS[inter]["gbit"]),
                 "--inter-latency-us", str(LINKS[inter]["latency_us"])]
    return argv


def compare() -> list[dict]:
    rows = []
    for case in CASES:
        name, timeline, rate, batch, layout, published, inter, intra, settings, source = case
        report = predict_scaling.build_report(predict_scaling.parse_args(argv_for(case)))
        row = report["rows"][-1]
        rows.append({
            "case": name, "layout": row["layout"], "timeline": f"{timeline}.json",
            "one_gpu_images_per_sec": rate, "batch_per_gpu": batch,
            "compute_ms": report["compute_s"] * 1e3,
            "gradient_mb": report["gradient_bytes"] / 1e6,
            "links": {"inter": None if inter is None else LINKS[inter], "intra": LINKS[intra]},
            "horovod_settings": settings,
            "allreduces_ms": row["comm_time_s"] * 1e3,
            "exposed_ms": row["exposed_comm_s"] * 1e3,
            "predicted_efficiency": row["efficiency"],
            "bound_no_overlap": row["efficiency_no_overlap"],
            "bound_full_overlap": row["efficiency_full_overlap"],
            "published_efficiency": published,
            "points_off": (row["efficiency"] - published) * 100,
            "within_target": abs(row["efficiency"] - published) * 100 <= TARGET_POINTS,
            "source": source,
            "command": "benchmarks/predict_scaling.py " + " ".join(
                a.replace(str(TIMELINES), "benchmarks/timelines") for a in argv_for(case)),
        })
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| case | compute ms | gradients MB | allreduces ms | exposed ms | predicted "
             "| bounds | published | points off |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['compute_ms']:.0f} | {r['gradient_mb']:.1f} "
            f"| {r['allreduces_ms']:.1f} | {r['exposed_ms']:.1f} "
            f"| **{r['predicted_efficiency']:.1%}** "
            f"| {r['bound_no_overlap']:.0%} to {r['bound_full_overlap']:.0%} "
            f"| {r['published_efficiency']:.1%} | {r['points_off']:+.1f}"
            f"{'' if r['within_target'] else ' (outside 5)'} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = ArgumentParser(prog=PROG, description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, metavar="FILE")
    parser.add_argument("--markdown", type=Path, metavar="FILE")
    args = parser.parse_args(argv)
    predict_scaling.check_output_dirs(parser, args)
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    rows = compare()
    predict_scaling.write_outputs(args, markdown(rows), {
        "schema_version": 1, "target_points": TARGET_POINTS, "comparisons": rows})
    return 0


def cli() -> None:
    run_main(lambda: main(sys.argv[1:]), prog=PROG)


if __name__ == "__main__":
    cli()
