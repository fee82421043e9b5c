"""Zero-shot prediction with GSP's pseudo-attributes on finished runs (thesis Sec. 5.3.3, Fig. 5.6).

For each run (a GSP model; typically one trained with and one without the zero-shot loss, as the
thesis compares PNCA and PNCA + L_ZS): embed the run's test split, take each image's
pseudo-attributes ``z = rowsum(plan) / mu`` (Eq. 5.2.3) and its embedding, and run
``dmlkit.evaluation.zero_shot.zero_shot_attribute_eval``: fit the ridge predictor of (P3) from
class attribute histograms to class mean embeddings on half of the classes, predict the other half,
classify by the nearest true mean (l2 and cosine), repeat (1,000 times in the thesis).

Run: ``dmlkit study gsp-zero-shot --run RUN_DIR [RUN_DIR ...] --out DIR [--repeats 1000] [--classes 10]``.
Writes ``table.md`` and ``results.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from dmlkit.evaluation.zero_shot import zero_shot_attribute_eval
from dmlkit.protocols.table import markdown_grid

__all__ = ["attributes_and_embeddings", "main", "run_study"]


@torch.no_grad()
def attributes_and_embeddings(
    model: nn.Module, dataset: Any, batch_size: int = 256
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(z (N, m), embeddings (N, d), labels (N,))`` of ``dataset`` under a GSP ``model`` in eval mode."""
    pooling = getattr(model, "pooling", None)
    if not hasattr(pooling, "forward_with_plan") or not hasattr(pooling, "mu"):
        raise ValueError(
            f"the zero-shot evaluation needs a GSP model (model.pooling: gsp or gsp_gmp), got {type(pooling).__name__}"
        )
    model.eval()
    zs, embs, labels = [], [], []
    for start in range(0, len(dataset), batch_size):
        images, y = dataset.get_batch(torch.arange(start, min(start + batch_size, len(dataset))))
        out = model.encode(images)
        zs.append(out.plan.sum(dim=-1) / float(pooling.mu))
        embs.append(out.embedding)
        labels.append(torch.as_tensor(y))
    return torch.cat(zs), torch.cat(embs), torch.cat(labels)


def run_study(
    out_dir: str | Path,
    runs: Sequence[str],
    repeats: int = 1000,
    classes_per_repeat: int | None = 10,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Evaluate each run; write ``table.md`` and ``results.json`` into ``out_dir``; return the rows."""
    from dmlkit.assemble import load_finished_run

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for run in runs:
        loaded = load_finished_run(run)
        if getattr(loaded.model.pooling, "pools_with_gap", False):
            raise ValueError(
                f"run '{run}' ended before its k-centre start (its GSP layer still pools with GAP): nothing to evaluate"
            )
        z, emb, labels = attributes_and_embeddings(loaded.model, loaded.split(loaded.cfg.eval.split))
        result = zero_shot_attribute_eval(
            z, emb, labels, repeats, classes_per_repeat, generator=torch.Generator().manual_seed(seed)
        )
        rows.append({"run": str(run), "zero_shot_weight": loaded.cfg.methods.zero_shot.weight, **result})
    table = markdown_grid(
        ["run", "lam (L_ZS)", "l2 NN accuracy", "cosine NN accuracy", "chance"],
        [
            [
                Path(r["run"]).name,
                f"{r['zero_shot_weight']:g}",
                f"{100 * r['l2']:.1f} ± {100 * r['l2_std']:.1f}",
                f"{100 * r['cosine']:.1f} ± {100 * r['cosine_std']:.1f}",
                f"{100 * r['chance']:.1f}",
            ]
            for r in rows
        ],
        align="lrrrr",
    )
    per = rows[0]["classes_per_repeat"] if rows else 0
    lines = [
        "# Zero-shot prediction from GSP pseudo-attributes (thesis Sec. 5.3.3)",
        "",
        f"{int(rows[0]['repeats']) if rows else 0} repeats; each draws {int(per)} test classes, fits the ridge predictor "
        "(P3) from class attribute histograms to class mean embeddings on half of them and classifies the other half's "
        "predicted means by the nearest true mean (percent, mean ± std over repeats).",
        "",
        table,
    ]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps({"rows": rows}, indent=1))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dmlkit study gsp-zero-shot", description=__doc__.splitlines()[0])
    parser.add_argument("--run", nargs="+", required=True, help="finished GSP run folders (e.g. with and without L_ZS)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeats", type=int, default=1000)
    parser.add_argument("--classes", type=int, default=10, help="test classes drawn per repeat (0: all; thesis: 10)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rows = run_study(args.out, args.run, args.repeats, args.classes or None, args.seed)
    print((Path(args.out) / "table.md").read_text())
    return 0 if rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
