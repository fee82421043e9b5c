"""``dmlkit embed``, ``index build``, ``search``, ``export`` and ``serve``: from a trained run to search
(``dmlkit.search``, ``dmlkit.serve``)."""

from __future__ import annotations

import argparse
import json

from dmlkit.cli.options import add_quiet

__all__ = ["COMMANDS"]


def _embed_arguments(embed: argparse.ArgumentParser) -> None:
    embed.add_argument("run", help="a run folder (its best.pt) or a checkpoint inside one")
    source = embed.add_mutually_exclusive_group(required=True)
    source.add_argument("--images", help="a folder of images (class = parent folder) or a list file")
    source.add_argument("--split", help="the images of the run's own split (e.g. test: the classes the run tested on)")
    embed.add_argument("--out", default="embeddings.npy", help="embeddings .npy; paths/labels go to <stem>.meta.json")
    embed.add_argument(
        "--batch-size", type=int, default=None, help="images per forward pass (default: eval.batch_size)"
    )
    embed.add_argument("--chunk-size", type=int, default=4096, help="images per saved chunk (the unit of resume)")
    embed.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    embed.add_argument(
        "--on-corrupt",
        choices=["error", "skip"],
        default="error",
        help="unreadable images: error (list them all and stop) or skip (leave them out, listed in "
        "<stem>.skipped.json)",
    )
    add_quiet(embed, "no progress bar")


def _index_arguments(index: argparse.ArgumentParser) -> None:
    index_sub = index.add_subparsers(dest="index_command", required=True)
    build = index_sub.add_parser("build", help="index an embeddings .npy written by dmlkit embed")
    build.add_argument("embeddings", help="an embeddings.npy written by dmlkit embed (its .meta.json beside it)")
    build.add_argument("--out", required=True, help="index folder to write")
    mode = build.add_mutually_exclusive_group()
    mode.add_argument("--exact", action="store_true", help="brute force (default)")
    mode.add_argument(
        "--ivf",
        nargs="?",
        const="auto",
        metavar="N",
        help="IVF with N k-means cells (--ivf alone: chosen from the data's size, as the evaluation does)",
    )
    mode.add_argument(
        "--hnsw", nargs="?", const="auto", metavar="M", help="HNSW with M links per node (--hnsw alone: 32)"
    )
    build.add_argument(
        "--nprobe",
        type=int,
        default=None,
        help="IVF cells visited per query (default: the fewest that reach recall@1 0.95 on the data)",
    )
    build.add_argument(
        "--ef-search",
        type=int,
        default=None,
        help="HNSW candidates per query (default: the fewest that reach recall@1 0.95 on the data)",
    )
    build.add_argument("--recall-k", type=int, default=10, help="k of the recall@k measured for IVF / HNSW")
    build.add_argument("--recall-sample", type=int, default=1000, help="queries of that measurement")


def _search_arguments(search: argparse.ArgumentParser) -> None:
    search.add_argument("index_dir", help="an index folder written by dmlkit index build")
    query = search.add_mutually_exclusive_group(required=True)
    query.add_argument("--image", help="an image file, embedded with the index's run (or --run)")
    query.add_argument("--embedding", help="a .npy query embedding of shape (d,)")
    search.add_argument("--k", type=int, default=10, help="neighbours to return (default: 10)")
    search.add_argument("--run", default=None, help="run folder that embeds --image (default: the index's run)")
    search.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _export_arguments(export: argparse.ArgumentParser) -> None:
    export.add_argument("run", help="a run folder or a checkpoint inside one")
    export.add_argument("--format", choices=["torchscript", "onnx"], default="torchscript")
    export.add_argument("--out", required=True, help="file to write (e.g. model.pt or model.onnx)")


def _serve_arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("index_dir", help="an index folder written by dmlkit index build")
    serve.add_argument("--run", default=None, help="run folder that embeds uploads (default: the index's run)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, this machine only)")
    serve.add_argument("--port", type=int, default=8000, help="port to bind (default: 8000)")
    serve.add_argument("--max-upload-mb", type=float, default=5.0, help="largest accepted upload (default: 5)")


def _cmd_embed(args: argparse.Namespace) -> int:
    from dmlkit.search import embed_images
    from dmlkit.search.embed_images import skipped_path_for

    images = args.images
    if args.split is not None:
        from dmlkit.search.split_images import split_images

        images = split_images(args.run, args.split)
    r = embed_images(
        args.run,
        images,
        args.out,
        batch_size=args.batch_size,
        chunk_size=args.chunk_size,
        num_workers=args.workers,
        quiet=args.quiet,
        on_corrupt=args.on_corrupt,
    )
    left_out = (
        f"; {r.images_skipped} unreadable image(s) left out, listed in {skipped_path_for(r.embeddings)}"
        if args.on_corrupt == "skip"
        else ""
    )
    print(
        f"{r.count} x {r.dim} embeddings -> {r.embeddings} (+ {r.meta.name}); "
        f"chunks computed {r.chunks_computed}, already done {r.chunks_skipped}{left_out}"
    )
    return 0


def _int_option(flag: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{flag} takes a positive integer or 'auto', got {value!r}") from None


def _cmd_index(args: argparse.Namespace) -> int:
    from dmlkit.search import IndexConfig, build_index_from_embeddings

    mode = "ivf" if args.ivf is not None else "hnsw" if args.hnsw is not None else "exact"
    nlist = None if args.ivf in (None, "auto") else _int_option("--ivf", args.ivf)
    m = 32 if args.hnsw in (None, "auto") else _int_option("--hnsw", args.hnsw)
    cfg = IndexConfig(mode, nlist=nlist, nprobe=args.nprobe, m=m, ef_search=args.ef_search)
    index = build_index_from_embeddings(args.embeddings, args.out, cfg, args.recall_k, args.recall_sample)
    print(f"index {index.describe()} -> {args.out}")
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    from dmlkit.search.query import print_neighbours, search_index_folder

    index, results = search_index_folder(args.index_dir, args.image, args.embedding, args.k, args.run)
    if args.json:
        print(json.dumps([n.to_dict() for n in results], indent=2))
    else:
        print_neighbours(index, results)
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from dmlkit.search.export import export_run

    r = export_run(args.run, args.format, args.out)
    print(f"{r.format} model -> {r.path}; max |exported - eager| = {r.max_abs_diff:.2e} on batches {r.checked_batches}")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from dmlkit.serve.server import serve

    if not 0 < args.max_upload_mb < 2**20:  # also NaN
        raise ValueError(f"--max-upload-mb must be a positive number of MiB (e.g. 5), got {args.max_upload_mb:g}")
    serve(args.index_dir, args.run, args.host, args.port, max_upload_bytes=max(1, int(args.max_upload_mb * 2**20)))
    return 0


COMMANDS = {
    "embed": ("embed image files with a trained run (resumable)", _embed_arguments, _cmd_embed),
    "index": ("build a faiss search index", _index_arguments, _cmd_index),
    "search": ("query an index folder with an image or an embedding", _search_arguments, _cmd_search),
    "export": ("export a run's model to TorchScript or ONNX (parity-checked)", _export_arguments, _cmd_export),
    "serve": ("local web page + JSON API to search an index", _serve_arguments, _cmd_serve),
}
