"""The device check: what a lent GPU machine measures first, in one time-bounded run (``scripts/device_check.sh``).

Sections, in this order, each bounded in time and each recorded whatever happens to the others (an error
is written into its row, never stops the run):

1. ``environment``: device name, torch and CUDA versions, bf16 support, CPU cores.
2. ``cuda_tests``: the tests marked ``cuda`` (``pytest -m cuda``); on a machine without CUDA they skip.
3. ``training``: images/s of a paper-sized run (``timm:resnet50`` at 224 px, batch 96, on a CUB-layout
   folder of generated 300 x 250 JPEGs) in fp32 and bf16-mixed: dmlkit's Trainer against a bare loop
   over the same parts (``benchmarks.train``), same steps.
4. ``exact_search``: exact retrieval metrics (MAP@R, R@K) of 1M x 128 embeddings searched on the GPU
   (:mod:`dmlkit.evaluation.knn_device`), the k-NN search alone (k = 10), and a parity check against the
   CPU search (:func:`dmlkit.evaluation.knn_search`) on a 100k subset, whose CPU time is the reference.
5. ``execution``: images/s of the model alone in fp32 and bf16, with and without ``train.channels_last``, and
   bf16 with ``train.compile``.
6. ``testbed``: ``dmlkit protocol holdout`` of the given configs for the time left, tabulated.

``--cpu`` runs every section at small sizes on the CPU (ResNet-20 at 32 px, 20k embeddings), so that a
test runs the whole script and a lent device cannot fail it for a trivial reason. Writes
``device_check.md`` and ``device_check.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Sizes:
    """The sizes of one mode (GPU or ``--cpu``)."""

    device: str
    backbone: str
    image_size: int
    batch_size: int
    train_steps: int
    images: int
    jpeg_size: tuple[int, int]
    workers: int
    search_n: int
    parity_n: int
    extra_sets: tuple[str, ...] = field(default_factory=tuple)


GPU = Sizes("cuda", "timm:resnet50", 224, 96, 40, 1600, (300, 250), 14, 1_000_000, 100_000)
CPU = Sizes("cpu", "resnet20", 32, 16, 3, 96, (300, 250), 0, 20_000, 5_000, ("train.m_per_class=4",))


# ---------------------------------------------------------------- sections
def environment(sizes: Sizes) -> dict[str, Any]:
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_cores": os.cpu_count(),
        "device": sizes.device,
    }
    if sizes.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
            capability=f"{props.major}.{props.minor}",
            bf16=torch.cuda.is_bf16_supported(),
        )
    return info


def pytest_progress(printed: str) -> dict[str, int]:
    """Tests passed, failed (or errored) and skipped so far, read off ``pytest -q``'s progress lines."""
    lines = [line.split("[")[0].strip() for line in printed.splitlines()]
    marks = "".join(line for line in lines if line and re.fullmatch(r"[.FEsxX]+", line))
    return {"passed": marks.count("."), "failed": marks.count("F") + marks.count("E"), "skipped": marks.count("s")}


def cuda_tests(seconds: float) -> dict[str, Any]:
    """``pytest -m cuda`` over the test files that hold such tests: counts of passed, failed, skipped."""
    files = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").glob("test_*.py")
        if "pytest.mark.cuda" in p.read_text(encoding="utf-8")
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider", *files]
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=seconds)
    except subprocess.TimeoutExpired as stopped:  # what pytest printed so far is kept: its progress dots
        printed = stopped.stdout.decode() if isinstance(stopped.stdout, bytes) else (stopped.stdout or "")
        counts = pytest_progress(printed)
        raise TimeoutError(
            f"pytest -m cuda stopped at its {seconds:.0f} s; by then {counts['passed']} passed, "
            f"{counts['failed']} failed, {counts['skipped']} skipped; give the check a larger "
            "BUDGET (the tests took about 52 s on an H200)"
        ) from None
    tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error|errors|deselected)", tail)}
    failures = [line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return {"files": files, "returncode": done.returncode, "summary": tail, **counts, "failures": failures[:20]}


def training(sizes: Sizes, folder: Path) -> dict[str, Any]:
    """Images/s of the Trainer and of a bare loop, fp32 and bf16-mixed, on generated JPEGs."""
    from benchmarks.data import make_jpegs
    from benchmarks.train import bare_seconds, trainer_seconds

    root = make_jpegs(folder / "cub", sizes.images, *sizes.jpeg_size, test_per_class=4)
    rows = []
    for precision in ("32-true", "bf16-mixed"):
        cfg = _training_config(sizes, root, precision)
        bare_seconds(_training_config(sizes, root, precision, steps=3), sizes.device)  # warm-up: cuDNN's choice
        row: dict[str, Any] = {
            "precision": precision,
            "steps": sizes.train_steps,
            "batch": sizes.batch_size,
            "compute_images_per_s": round(compute_images_per_second(cfg, sizes.device), 1),
        }
        bare = bare_seconds(cfg, sizes.device)
        trainer = trainer_seconds(cfg, folder / f"run-{precision}")
        images = sizes.train_steps * sizes.batch_size
        row.update(
            trainer_images_per_s=round(images / trainer, 1),
            bare_images_per_s=round(images / bare, 1),
            trainer_over_bare=round(trainer / bare, 3),
        )
        rows.append(row)
    loader = loader_images_per_second(_training_config(sizes, root, "32-true"))
    return {
        "backbone": sizes.backbone,
        "image_size": sizes.image_size,
        "workers": sizes.workers,
        "loader_images_per_s": round(loader, 1),
        "rows": rows,
    }


def compute_images_per_second(cfg: Any, device: str, steps: int = 10) -> float:
    """Training images/s of the model and objective alone: one batch resident on the device, no loader."""
    from benchmarks.train import bare_step
    from dmlkit.assemble import build_run
    from dmlkit.engine.execution import prepare_model, to_channels_last
    from dmlkit.engine.optim import build_optimizer

    parts = build_run(cfg)
    model, objective = parts.model.to(device), parts.objective.to(device)
    optimizer = build_optimizer(parts.param_groups, cfg.train)
    model = prepare_model(model, cfg.train.channels_last, cfg.train.compile)
    parts.batch_sampler.set_epoch(0)
    batch = next(iter(parts.batch_sampler))
    images = torch.stack([parts.splits.train[i][0] for i in batch]).to(device)
    if cfg.train.channels_last:
        images = to_channels_last(images)
    labels = torch.as_tensor([parts.splits.train[i][1] for i in batch]).to(device)
    bf16 = cfg.train.precision == "bf16-mixed"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step() -> None:
        bare_step(model, objective, optimizer, images, labels, 0, bf16)

    step(), step(), sync()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return steps * len(batch) / (time.perf_counter() - started)


def execution(sizes: Sizes, folder: Path) -> dict[str, Any]:
    """Images/s of the model alone (one resident batch) under ``train.channels_last`` and ``train.compile``."""
    from benchmarks.data import make_jpegs

    root = make_jpegs(folder / "cub-exec", sizes.images, *sizes.jpeg_size, test_per_class=4)
    rows = []
    settings = [
        ("32-true", False, False),
        ("32-true", True, False),
        ("bf16-mixed", False, False),
        ("bf16-mixed", True, False),
    ]
    if sizes.device == "cuda":  # inductor's CPU code generation takes minutes: the CPU mode leaves it out
        settings.append(("bf16-mixed", True, True))
    for precision, channels_last, compiled in settings:
        cfg = _training_config(
            sizes, root, precision, extra=(f"train.channels_last={channels_last}", f"train.compile={compiled}")
        )
        rows.append(
            {
                "precision": precision,
                "channels_last": channels_last,
                "compile": compiled,
                "images_per_s": round(compute_images_per_second(cfg, sizes.device, steps=10), 1),
            }
        )
    return {"backbone": sizes.backbone, "image_size": sizes.image_size, "batch": sizes.batch_size, "rows": rows}


def loader_images_per_second(cfg: Any, batches: int = 30) -> float:
    """Images/s of the training DataLoader alone (JPEG decode + the papers' train transform), its workers."""
    from torch.utils.data import DataLoader

    from dmlkit.assemble import build_run

    parts = build_run(cfg)
    parts.batch_sampler.set_epoch(0)
    loader = DataLoader(parts.splits.train, batch_sampler=parts.batch_sampler, num_workers=cfg.data.num_workers)
    seen, it = 0, iter(loader)
    next(it)  # worker start-up is not the steady rate
    started = time.perf_counter()
    for _, (images, _labels) in zip(range(batches), it):
        seen += len(images)
    return seen / (time.perf_counter() - started)


def _training_config(
    sizes: Sizes, root: Path, precision: str, steps: int | None = None, extra: Sequence[str] = ()
) -> Any:
    from dmlkit.config import load_config

    steps = steps or sizes.train_steps
    return load_config(
        ROOT / "configs/paper/sft_t1_multi_similarity_base_cub.yaml",
        [
            f"data.root={root}",
            f"data.image_size={sizes.image_size}",
            f"data.num_workers={sizes.workers}",
            "data.val_fraction=0.0",
            f"model.backbone={sizes.backbone}",
            "model.pretrained=false",
            f"train.batch_size={sizes.batch_size}",
            f"train.max_steps={steps}",
            f"train.val_every={steps}",
            "train.patience=1000",
            f"train.precision={precision}",
            f"train.accelerator={sizes.device}",
            "eval.clustering=false",
            "plots=false",
            *sizes.extra_sets,
            *extra,
        ],
    )


def exact_search(sizes: Sizes) -> dict[str, Any]:
    """Exact metrics and k-NN of ``search_n`` x 128 embeddings on the device; parity and CPU time on a subset."""
    from benchmarks.retrieval import make_data
    from dmlkit.evaluation.knn import knn_search
    from dmlkit.evaluation.knn_device import device_knn_search
    from dmlkit.evaluation.retrieval import retrieval_metrics

    x_np, y_np = make_data(sizes.search_n, 128, per_class=50, seed=0)
    x, y = torch.from_numpy(x_np).to(sizes.device), torch.from_numpy(y_np)
    sync = torch.cuda.synchronize if sizes.device == "cuda" else (lambda: None)
    started = time.perf_counter()
    metrics = retrieval_metrics(x, y, ks=(1, 10, 100))
    metrics_s = time.perf_counter() - started
    sync()
    started = time.perf_counter()
    device_knn_search(x, 10)
    sync()
    knn_s = time.perf_counter() - started
    sub = torch.from_numpy(x_np[: sizes.parity_n])
    started = time.perf_counter()
    on_cpu = knn_search(sub, 10)
    cpu_s = time.perf_counter() - started
    started = time.perf_counter()
    on_device = device_knn_search(sub.to(sizes.device), 10)
    sync()
    device_sub_s = time.perf_counter() - started
    same = bool(torch.equal(on_device.indices.cpu(), on_cpu.indices))
    return {
        "n": sizes.search_n,
        "dim": 128,
        "metrics_seconds": round(metrics_s, 2),
        "knn10_seconds": round(knn_s, 2),
        "map_at_r": round(metrics["mean_average_precision_at_r"], 6),
        "parity_n": sizes.parity_n,
        "parity_cpu_seconds": round(cpu_s, 2),
        "parity_device_seconds": round(device_sub_s, 2),
        "cpu_threads": torch.get_num_threads(),
        "parity_same_neighbours": same,
    }


def testbed(
    configs: Sequence[str], seeds: Sequence[int], seconds: float, jobs: int, folder: Path, sets: Sequence[str] = ()
) -> dict[str, Any]:
    """``dmlkit protocol holdout`` of ``configs`` until ``seconds``, then the finished runs tabulated."""
    if seconds <= 0 or not configs:
        return {"skipped": "no time left" if configs else "no configs"}
    base = [
        sys.executable,
        "-m",
        "dmlkit",
        "protocol",
        "holdout",
        *configs,
        "--seeds",
        *map(str, seeds),
        "--out",
        str(folder),
        "--columns",
        "all",
        *[a for s in sets for a in ("--set", s)],
    ]
    proc = subprocess.Popen(
        [*base, "--jobs", str(jobs)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=seconds)
        stopped = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        _, err = proc.communicate()
        stopped = True
    tab = subprocess.run([*base, "--reuse-only"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    table = (folder / "results.md").read_text(encoding="utf-8") if (folder / "results.md").exists() else ""
    return {
        "stopped_at_budget": stopped,
        "table": table,
        "error": (err or "")[-400:] if not table else "",
        "tabulate_error": tab.stderr[-400:] if tab.returncode else "",
    }


# ---------------------------------------------------------------- driver
def cuda_tests_seconds(remaining: float, later_sections: bool) -> float:
    """The time limit of ``cuda_tests``: 30 to 150 s, keeping 60 s of ``remaining`` for the sections after it
    only when some are to run (``--only environment cuda_tests`` gives the tests all that is left)."""
    return max(30.0, min(150.0, remaining - (60.0 if later_sections else 0.0)))


def run_sections(
    sizes: Sizes, budget: float, out: Path, testbed_args: dict[str, Any], only: Sequence[str] = ()
) -> dict[str, Any]:
    """Every section in order (or those in ``only``), each recorded (value or error and seconds); the testbed
    gets the time left."""
    deadline = time.monotonic() + budget
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        plan: list[tuple[str, Callable[[], Any]]] = [
            ("environment", lambda: environment(sizes)),
            ("cuda_tests", lambda: cuda_tests(cuda_tests_seconds(deadline - time.monotonic(), later))),
            ("training", lambda: training(sizes, work)),
            ("exact_search", lambda: exact_search(sizes)),
            ("execution", lambda: execution(sizes, work)),
            (
                "testbed",
                lambda: testbed(folder=work / "testbed", seconds=deadline - time.monotonic() - 40, **testbed_args),
            ),
        ]
        chosen = [(name, section) for name, section in plan if not only or name in only]
        later = any(name not in ("environment", "cuda_tests") for name, _ in chosen)
        for name, section in chosen:
            started = time.perf_counter()
            try:
                results[name] = {"ok": True, **section()}
            except Exception as exc:  # recorded, and the next section runs
                results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:1000]}
            results[name]["seconds"] = round(time.perf_counter() - started, 1)
            _write(out, results)
    return results


def _write(out: Path, results: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "device_check.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (out / "device_check.md").write_text(format_report(results), encoding="utf-8")


def format_report(results: dict[str, Any]) -> str:
    """The markdown report: one short table per section (errors verbatim)."""
    lines = ["# Device check", ""]
    for name, r in results.items():
        lines += [f"## {name} ({r.get('seconds', '?')} s)", ""]
        if not r.get("ok"):
            lines += [f"**failed**: `{r.get('error')}`", ""]
            continue
        if name == "training":
            lines += [
                f"{r['backbone']} at {r['image_size']} px; the loader alone ({r['workers']} workers): "
                f"{r['loader_images_per_s']} img/s",
                "",
                "| precision | steps x batch | model alone img/s | Trainer img/s | bare loop img/s | Trainer / bare time |",
                "|---|---|---|---|---|---|",
            ]
            lines += [
                f"| {x['precision']} | {x['steps']} x {x['batch']} | {x['compute_images_per_s']} | "
                f"{x['trainer_images_per_s']} | {x['bare_images_per_s']} | {x['trainer_over_bare']} |"
                for x in r["rows"]
            ]
        elif name == "execution":
            lines += [
                f"{r['backbone']} at {r['image_size']} px, batch {r['batch']}, the model alone",
                "",
                "| precision | channels_last | compile | img/s |",
                "|---|---|---|---|",
            ]
            lines += [
                f"| {x['precision']} | {x['channels_last']} | {x['compile']} | {x['images_per_s']} |" for x in r["rows"]
            ]
        elif name == "testbed":
            lines.append(r.get("table") or f"no table: {r.get('skipped') or r.get('error') or r.get('tabulate_error')}")
        else:
            lines += ["| key | value |", "|---|---|"]
            lines += [f"| {k} | {v} |" for k, v in r.items() if k not in ("ok", "seconds")]
        lines.append("")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.device_check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", required=True, type=Path, help="folder for device_check.md and .json")
    p.add_argument("--cpu", action="store_true", help="small sizes on the CPU (the test of this script)")
    p.add_argument("--budget", type=float, default=480.0, help="seconds for all sections together")
    p.add_argument("--testbed", nargs="*", default=[], metavar="CONFIG", help="configs for the testbed section")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--jobs", type=int, default=12, help="testbed runs side by side")
    p.add_argument(
        "--only",
        nargs="+",
        default=[],
        metavar="SECTION",
        help="run only these sections (environment cuda_tests training exact_search execution testbed)",
    )
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override for the testbed configs (repeatable)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.cpu and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here; run with --cpu for the small CPU check")
    sizes = CPU if args.cpu else GPU
    testbed_args = {"configs": args.testbed, "seeds": args.seeds, "jobs": args.jobs, "sets": args.sets}
    results = run_sections(sizes, args.budget, args.out, testbed_args, args.only)
    print(format_report(results))
    failed = [name for name, r in results.items() if not r.get("ok") or r.get("failed") or r.get("error")]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
