"""Benchmark: search speed and recall, embedding throughput, and latency of the search server.

Three parts, each with its reference measured in the same process and run:

1. **Index** (``SearchIndex``): ``n`` (default 100,000) x ``dim`` (128) clustered float32 embeddings
   (``clusters`` Gaussian blobs of noise norm about 1.25 around random unit centres, L2-normalised,
   seeded: the blobs overlap enough that approximate search misses some neighbours; at 1.0 every mode
   is near-perfect, at 1.5 the data is close to uniform) and ``queries`` (1,000)
   further points of the same mixture. For exact, IVF and HNSW: build time, queries per second with
   all queries in one ``search`` call (exact search then runs as one BLAS matrix product) and one query
   per call (the first 200, as a server answers them), ``threads`` faiss threads, and recall@10 of the
   held-out queries against exact search. Ratios are the speed-ups over exact search.
2. **Embedding throughput** of the quickstart model (``configs/quickstart.yaml``: ResNet-20, GAP,
   128-d, grey 32 x 32) with random weights on CPU, in images per second: eager at batch 256 (the
   reference), eager at batch 1, the TorchScript export at batch 256, and the whole ``dmlkit embed``
   pipeline (PNG decoding, eval transform, model) over ``files`` PNG files of a synthetic run folder.
3. **Server latency**: the same files indexed (exact) and served by ``dmlkit serve``'s app under
   uvicorn on 127.0.0.1 (loopback only). A bounded load: at most ``requests`` requests per endpoint
   and ``seconds`` seconds, ``concurrency`` client threads. Reported per endpoint: median, p90, p99
   latency and requests per second; the reference is ``GET /api/info`` (framework overhead).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from benchmarks import _harness as h

__all__ = ["clustered_embeddings", "main", "run"]


def clustered_embeddings(n: int, dim: int, clusters: int, seed: int, spread: float = 1.25) -> np.ndarray:
    """``n`` unit vectors: random unit centres plus Gaussian noise of norm about ``spread``, normalised."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = centres[rng.integers(0, clusters, n)] + rng.standard_normal((n, dim), dtype=np.float32) * np.float32(
        spread / dim**0.5
    )
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


# ------------------------------------------------------------------ part 1
def bench_index(n: int, dim: int, queries: int, clusters: int, threads: int, seed: int) -> list[dict[str, Any]]:
    import faiss

    from dmlkit.search.index import IndexConfig, SearchIndex, recall_at_k

    faiss.omp_set_num_threads(threads)
    data = clustered_embeddings(n + queries, dim, clusters, seed)
    x, q = data[:n], data[n:]
    nlist = max(1, int(round(n**0.5)))
    configs = [
        ("exact", IndexConfig("exact")),
        (f"ivf{nlist} nprobe=4", IndexConfig("ivf", nlist=nlist, nprobe=4)),
        (f"ivf{nlist} nprobe=16", IndexConfig("ivf", nlist=nlist, nprobe=16)),
        ("hnsw16 ef=16", IndexConfig("hnsw", m=16, ef_construction=40, ef_search=16)),
        ("hnsw16 ef=64", IndexConfig("hnsw", m=16, ef_construction=40, ef_search=64)),
    ]
    rows, truth, built = [], None, {}
    for name, cfg in configs:
        key = (cfg.mode, cfg.nlist, cfg.m)
        start = time.perf_counter()
        if key in built:  # same structure, other query-time setting
            index = built[key]
            index.set_search_params(nprobe=cfg.nprobe, ef_search=cfg.ef_search)
            build = float("nan")
        else:
            index = SearchIndex(dim, cfg)
            if cfg.mode == "ivf":  # k-means on a sample of 64 points per cell, as faiss recommends
                sample = np.random.default_rng(seed).choice(n, size=min(n, 64 * nlist), replace=False)
                index.train(x[sample], seed=seed)
            index.add(x)
            build = time.perf_counter() - start
            built[key] = index
        start = time.perf_counter()
        _, ids = index.search(q, 10)
        elapsed = time.perf_counter() - start
        single = q[: min(200, queries)]
        start = time.perf_counter()
        for row in single:  # one query per call, as a server answers them
            index.search(row, 10)
        single_qps = len(single) / (time.perf_counter() - start)
        if truth is None:
            truth = ids
        rows.append(
            {
                "index": name,
                "build_s": build,
                "qps": queries / elapsed,
                "single_qps": single_qps,
                "recall@10": recall_at_k(ids, truth),
            }
        )
    for row in rows:
        row["speedup"] = row["qps"] / rows[0]["qps"]
        row["single_speedup"] = row["single_qps"] / rows[0]["single_qps"]
    return rows


# ------------------------------------------------------------------ part 2
def _quickstart_run(folder: Path, seed: int) -> Path:
    """A run folder with the quickstart config and randomly initialised weights (no training)."""
    import torch

    from dmlkit.config import dump_config, load_config
    from dmlkit.engine.checkpoint import save_checkpoint
    from dmlkit.models import build_embedder

    config_file = h.ROOT / "configs" / "quickstart.yaml"
    cfg = load_config(config_file if config_file.is_file() else None)
    cfg.seed = seed
    torch.manual_seed(seed)
    model = build_embedder(cfg.model, in_channels=1)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(dump_config(cfg))
    save_checkpoint(folder / "best.pt", {"model": model.state_dict(), "step": 0})
    return folder


def _write_pngs(folder: Path, count: int, seed: int) -> Path:
    from PIL import Image

    rng = np.random.default_rng(seed)
    for i in range(count):
        sub = folder / f"c{i % 16:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (32, 32), dtype=np.uint8), mode="L").save(sub / f"{i:05d}.png")
    return folder


def _rate(fn: Callable[[], int], min_seconds: float = 2.0, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    done, start = 0, time.perf_counter()
    while True:
        done += fn()
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return done / elapsed


def bench_embedding(run_dir: Path, images: Path, workdir: Path, threads: int) -> list[dict[str, Any]]:
    import torch

    from dmlkit.search import embed_images, load_run_model
    from dmlkit.search.export import export_run

    torch.set_num_threads(threads)
    run = load_run_model(run_dir)
    big = run.example_input(batch=256)
    one = run.example_input(batch=1)
    export_run(run, "torchscript", workdir / "model.pt")
    scripted = torch.jit.load(str(workdir / "model.pt"))

    def eager_big() -> int:
        run.embed(big)
        return 256

    def eager_one() -> int:
        run.embed(one)
        return 1

    def script_big() -> int:
        with torch.no_grad():
            scripted(big)
        return 256

    counter = iter(range(10**6))

    def pipeline() -> int:
        r = embed_images(run, images, workdir / f"emb{next(counter)}.npy", batch_size=256, quiet=True)
        return r.count

    rows = [
        {"path": "eager, batch 256 (reference)", "images_per_s": _rate(eager_big)},
        {"path": "eager, batch 1", "images_per_s": _rate(eager_one)},
        {"path": "TorchScript, batch 256", "images_per_s": _rate(script_big)},
        {"path": "dmlkit embed (PNG files)", "images_per_s": _rate(pipeline, warmup=0)},
    ]
    for row in rows:
        row["ratio"] = row["images_per_s"] / rows[0]["images_per_s"]
    return rows


# ------------------------------------------------------------------ part 3
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _load(call: Callable[[], None], requests: int, seconds: float, concurrency: int) -> dict[str, Any]:
    """Run ``call`` at most ``requests`` times within ``seconds`` from ``concurrency`` threads; latencies in ms."""
    latencies: list[float] = []
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds
    budget = iter(range(requests))

    def worker() -> None:
        while time.perf_counter() < deadline:
            with lock:
                if next(budget, None) is None:
                    return
            start = time.perf_counter()
            call()
            with lock:
                latencies.append((time.perf_counter() - start) * 1000)

    start = time.perf_counter()
    workers = [threading.Thread(target=worker) for _ in range(concurrency)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - start
    lat = sorted(latencies)
    pick = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]  # noqa: E731
    return {
        "requests": len(lat),
        "p50_ms": statistics.median(lat),
        "p90_ms": pick(0.9),
        "p99_ms": pick(0.99),
        "req_per_s": len(lat) / wall,
    }


def bench_server(
    index_dir: Path, run_dir: Path, query: Path, requests: int, seconds: float, concurrency: int
) -> list[dict[str, Any]]:
    import httpx
    import uvicorn

    from dmlkit.serve.app import create_app

    host, port = "127.0.0.1", _free_port()  # loopback only
    server = uvicorn.Server(uvicorn.Config(create_app(index_dir, run_dir), host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    if not server.started:
        raise RuntimeError("the benchmark server did not start within 30 s")
    base = f"http://{host}:{port}"
    image = query.read_bytes()
    rows = []
    try:
        with httpx.Client(base_url=base, timeout=30) as client:

            def check(response: httpx.Response) -> None:
                if response.status_code != 200:
                    raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text[:200]}")

            calls = {
                "GET /api/info (reference)": lambda: check(client.get("/api/info")),
                "GET /api/search/{id} k=10": lambda: check(client.get("/api/search/7", params={"k": 10})),
                "POST /api/search (PNG) k=10": lambda: check(
                    client.post("/api/search", params={"k": 10}, files={"image": ("q.png", image, "image/png")})
                ),
            }
            for name, call in calls.items():
                call()  # warm-up
                rows.append({"endpoint": name, **_load(call, requests, seconds, concurrency)})
    finally:
        server.should_exit = True
        thread.join(10)
    for row in rows:
        row["ratio"] = row["p50_ms"] / rows[0]["p50_ms"]
    return rows


# ------------------------------------------------------------------ driver
def run(
    n: int = 100_000,
    dim: int = 128,
    queries: int = 1000,
    clusters: int = 1000,
    files: int = 2048,
    requests: int = 200,
    seconds: float = 20.0,
    concurrency: int = 1,
    threads: int = 1,
    seed: int = 0,
    parts: tuple[str, ...] = ("index", "embed", "serve"),
) -> dict[str, Any]:
    """All parts of the benchmark; see the module docstring."""
    from dmlkit.search import IndexConfig, build_index_from_embeddings, embed_images

    if n < 2 or queries < 1 or files < 2 or requests < 1 or seconds <= 0 or concurrency < 1:
        raise ValueError("need n >= 2, queries >= 1, files >= 2, requests >= 1, seconds > 0, concurrency >= 1")
    result: dict[str, Any] = {
        "settings": {
            "n": n,
            "dim": dim,
            "queries": queries,
            "clusters": clusters,
            "files": files,
            "requests": requests,
            "seconds": seconds,
            "concurrency": concurrency,
            "threads": threads,
            "seed": seed,
        }
    }
    if "index" in parts:
        result["index"] = bench_index(n, dim, queries, clusters, threads, seed)
    if "embed" in parts or "serve" in parts:
        with tempfile.TemporaryDirectory(prefix="dmlkit-bench-search-") as tmp:
            work = Path(tmp)
            run_dir = _quickstart_run(work / "run", seed)
            images = _write_pngs(work / "images", files, seed)
            if "embed" in parts:
                result["embed"] = bench_embedding(run_dir, images, work, threads)
            if "serve" in parts:
                emb = embed_images(run_dir, images, work / "gallery.npy", quiet=True)
                build_index_from_embeddings(emb.embeddings, work / "index", IndexConfig("exact"))
                query = sorted(images.rglob("*.png"))[3]
                result["serve"] = bench_server(work / "index", run_dir, query, requests, seconds, concurrency)
    return result


def format_table(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = []
    if "index" in result:
        lines += [
            f"search: {s['n']} x {s['dim']} clustered embeddings ({s['clusters']} clusters), {s['queries']} held-out "
            f"queries, k=10, {s['threads']} thread(s)",
            h.table(
                ["index", "build s", "batch q/s", "vs exact", "1-by-1 q/s", "vs exact", "recall@10"],
                [
                    [
                        r["index"],
                        "(same)" if r["build_s"] != r["build_s"] else f"{r['build_s']:.2f}",
                        f"{r['qps']:.0f}",
                        f"{r['speedup']:.1f}x",
                        f"{r['single_qps']:.0f}",
                        f"{r['single_speedup']:.1f}x",
                        f"{r['recall@10']:.4f}",
                    ]
                    for r in result["index"]
                ],
            ),
            "",
        ]
    if "embed" in result:
        lines += [
            f"embedding throughput: quickstart model (ResNet-20, GAP, 128-d, 1x32x32), random weights, CPU, "
            f"{s['threads']} thread(s)",
            h.table(
                ["path", "images/s", "ratio"],
                [[r["path"], f"{r['images_per_s']:.0f}", f"{r['ratio']:.2f}x"] for r in result["embed"]],
            ),
            "",
        ]
    if "serve" in result:
        lines += [
            f"server latency: uvicorn on 127.0.0.1, exact index of {s['files']} images, at most {s['requests']} "
            f"requests / {s['seconds']:g} s per endpoint, concurrency {s['concurrency']}",
            h.table(
                ["endpoint", "n", "p50 ms", "p90 ms", "p99 ms", "req/s", "p50 ratio"],
                [
                    [
                        r["endpoint"],
                        str(r["requests"]),
                        f"{r['p50_ms']:.2f}",
                        f"{r['p90_ms']:.2f}",
                        f"{r['p99_ms']:.2f}",
                        f"{r['req_per_s']:.1f}",
                        f"{r['ratio']:.2f}x",
                    ]
                    for r in result["serve"]
                ],
            ),
        ]
    return "\n".join(lines).rstrip("\n")


def _parser() -> argparse.ArgumentParser:
    p = h.parser("search", __doc__)
    p.add_argument("--n", type=int, default=100_000, help="indexed embeddings (default: 100000)")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--clusters", type=int, default=1000)
    p.add_argument("--files", type=int, default=2048, help="PNG files for the embed and server parts")
    p.add_argument("--requests", type=int, default=200, help="most requests per endpoint (bounded load)")
    p.add_argument("--seconds", type=float, default=20.0, help="most seconds per endpoint (bounded load)")
    p.add_argument("--concurrency", type=int, default=1, help="client threads of the load")
    p.add_argument("--threads", type=int, default=1, help="faiss / torch threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parts", default="index,embed,serve", help="comma-separated subset of index,embed,serve")
    return p


def _run(a: argparse.Namespace) -> dict[str, Any]:
    parts = tuple(p.strip() for p in a.parts.split(",") if p.strip())
    unknown = set(parts) - {"index", "embed", "serve"}
    if unknown:
        raise ValueError(f"unknown --parts {sorted(unknown)}; choose from index, embed, serve")
    return run(
        a.n, a.dim, a.queries, a.clusters, a.files, a.requests, a.seconds, a.concurrency, a.threads, a.seed, parts
    )


def main(argv: list[str] | None = None) -> int:
    return h.main(_parser().parse_args(argv), _run, format_table)


if __name__ == "__main__":
    raise SystemExit(main())
