"""dmlkit.search.index: exact search against brute force, measured recall of IVF / HNSW, persistence, CLI."""

import json

import numpy as np
import pytest

from dmlkit.cli import main
from dmlkit.search import IndexConfig, SearchIndex, build_index_from_embeddings, recall_at_k


def clustered(n, d, clusters, seed):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, d)) * 3
    return (centres[rng.integers(0, clusters, n)] + rng.normal(size=(n, d))).astype(np.float32)


def brute_force(x, q, k):
    d = np.sqrt(((q[:, None, :].astype(np.float64) - x[None].astype(np.float64)) ** 2).sum(-1))
    ids = np.argsort(d, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(d, ids, 1), ids


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_mode_equals_brute_force(seed):
    x = clustered(300, 8, 5, seed)
    q = clustered(20, 8, 5, seed + 100)
    index = SearchIndex(8)
    index.add(x[:100])
    index.add(x[100:])  # ids continue across adds
    dist, ids = index.search(q, 7)
    ref_d, ref_ids = brute_force(x, q, 7)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(dist, ref_d, atol=1e-4)
    assert np.all(np.diff(dist, axis=1) >= 0)
    d1, i1 = index.search(q[0], 100_000)  # k larger than the index: everything, sorted
    assert i1.shape == (1, 300) and sorted(i1[0].tolist()) == list(range(300))


def test_recall_at_k_by_hand():
    found = np.array([[1, 2, 3], [4, 5, -1]])
    truth = np.array([[3, 2, 9], [7, 8, 9]])
    assert recall_at_k(found, truth) == pytest.approx((2 / 3 + 0) / 2)


def leave_one_out_recall(index, x, k):
    """Independent reference: brute-force neighbours in numpy, the index's own search, self removed."""
    _, truth = brute_force(x, x, k + 1)
    _, found = index.search(x, k + 1)
    hits = []
    for r in range(len(x)):
        t = [j for j in truth[r] if j != r][:k]
        f = [j for j in found[r] if j != r][:k]
        hits.append(len(set(t) & set(f)) / k)
    return float(np.mean(hits))


@pytest.mark.parametrize(
    "config",
    [
        IndexConfig("ivf", nlist=16, nprobe=1),
        IndexConfig("ivf", nlist=16, nprobe=4),
        IndexConfig("hnsw", m=4, ef_search=4),
        IndexConfig("hnsw", m=16, ef_search=64),
    ],
)
def test_approximate_modes_report_their_measured_recall(config):
    x = clustered(600, 16, 12, 3)
    index = SearchIndex.build(x, config, recall_k=10, recall_sample=len(x))
    reported = index.meta["recall"]
    assert reported["k"] == 10 and reported["queries"] == 600
    assert reported["recall"] == pytest.approx(leave_one_out_recall(index, x, 10), abs=1e-9)
    assert f"recall@10 = {reported['recall']:.4f}" in index.describe()
    print(index.describe())


def test_ivf_visiting_every_cell_is_exact_and_few_cells_lose_recall():
    x = clustered(800, 16, 20, 4)
    all_cells = SearchIndex.build(x, IndexConfig("ivf", nlist=32, nprobe=32), recall_sample=200)
    assert all_cells.meta["recall"]["recall"] == 1.0
    one_cell = SearchIndex.build(x, IndexConfig("ivf", nlist=32, nprobe=1), recall_sample=200)
    assert one_cell.meta["recall"]["recall"] < 1.0
    one_cell.set_search_params(nprobe=32)
    _, ids = one_cell.search(x[:50], 5)
    np.testing.assert_array_equal(ids, brute_force(x, x[:50], 5)[1])


@pytest.mark.parametrize(
    "config", [IndexConfig("exact"), IndexConfig("ivf", nlist=8, nprobe=2), IndexConfig("hnsw", m=8)]
)
def test_save_load_roundtrip(config, tmp_path):
    x = clustered(400, 12, 6, 5)
    index = SearchIndex.build(x, config, meta={"paths": [f"img{i}.png" for i in range(400)]})
    index.save(tmp_path / "idx")
    loaded = SearchIndex.load(tmp_path / "idx")
    assert loaded.config == index.config and loaded.meta == index.meta and len(loaded) == 400
    for a, b in zip(index.search(x[:30], 6), loaded.search(x[:30], 6)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(loaded.vector(7), x[7])
    loaded.add(x[:3])
    assert len(loaded) == 403


def test_bad_inputs_raise_value_errors():
    x = clustered(50, 4, 2, 6)
    with pytest.raises(ValueError, match="unknown index mode"):
        IndexConfig("lsh")
    with pytest.raises(ValueError, match="dimension 3"):
        SearchIndex(4).add(x[:, :3])
    with pytest.raises(ValueError, match="not trained"):
        SearchIndex(4, IndexConfig("ivf", nlist=4)).add(x)
    with pytest.raises(ValueError, match="smaller --ivf"):
        SearchIndex.build(x, IndexConfig("ivf", nlist=100))
    with pytest.raises(ValueError, match="empty"):
        SearchIndex(4).search(x[:1], 3)
    index = SearchIndex.build(x)
    with pytest.raises(ValueError, match="k must be"):
        index.search(x[:1], 0)
    with pytest.raises(ValueError, match="NaN"):
        index.search(np.full(4, np.nan), 2)
    with pytest.raises(ValueError, match="not an index folder"):
        SearchIndex.load("/nonexistent-index")


def test_build_from_embeddings_file_and_cli(tmp_path, capsys):
    x = clustered(200, 8, 4, 7)
    np.save(tmp_path / "emb.npy", x)
    meta = {
        "count": 200,
        "dim": 8,
        "paths": [f"/data/{i}.png" for i in range(200)],
        "labels": [i % 4 for i in range(200)],
        "class_names": ["a", "b", "c", "d"],
        "run_dir": "/runs/r",
    }
    (tmp_path / "emb.meta.json").write_text(json.dumps(meta))
    index = build_index_from_embeddings(tmp_path / "emb.npy", tmp_path / "idx")
    assert index.meta["paths"][5] == "/data/5.png" and index.meta["run_dir"] == "/runs/r"

    assert main(["index", "build", str(tmp_path / "emb.npy"), "--out", str(tmp_path / "hnsw"), "--hnsw", "8"]) == 0
    assert "recall@10 =" in capsys.readouterr().out
    np.save(tmp_path / "q.npy", x[11])
    assert main(["search", str(tmp_path / "hnsw"), "--embedding", str(tmp_path / "q.npy"), "--k", "3", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    ref_d, ref_ids = brute_force(x, x[11:12], 3)
    assert [r["id"] for r in results] == ref_ids[0].tolist()
    assert results[0]["distance"] == 0.0 and results[0]["path"] == "/data/11.png" and results[0]["class_name"] == "d"
    assert main(["search", str(tmp_path / "idx"), "--image", str(tmp_path / "q.npy")]) == 2  # no such run recorded


def test_bench_search_index_part_runs(capsys):
    assert main(["bench", "search", "--n", "400", "--queries", "20", "--clusters", "8", "--parts", "index"]) == 0
    out = capsys.readouterr().out
    assert "batch q/s" in out and "hnsw16 ef=64" in out
    exact_row = next(line for line in out.splitlines() if line.startswith("exact"))
    assert "1.0000" in exact_row


@pytest.mark.parametrize(
    "args, says",
    [
        (["--ivf", "0"], "nlist (--ivf N) must be a positive integer, got 0"),
        (["--hnsw", "0"], "m (--hnsw M) must be a positive integer, got 0"),
        (["--hnsw", "4", "--recall-sample", "0"], "recall_sample (--recall-sample) must be a positive integer, got 0"),
        (["--ivf", "2", "--recall-k", "-1"], "recall_k (--recall-k) must be a positive integer, got -1"),
    ],
)
def test_index_build_refuses_zero_sizes_instead_of_building_another_index(tmp_path, capsys, args, says):
    np.save(tmp_path / "emb.npy", clustered(40, 4, 2, 5))
    assert main(["index", "build", str(tmp_path / "emb.npy"), "--out", str(tmp_path / "idx"), *args]) == 2
    assert says in capsys.readouterr().err and not (tmp_path / "idx").exists()


def test_saving_an_index_removes_what_a_killed_save_left(tmp_path):
    stale = tmp_path / "idx" / ".index.faiss.999999999-0a1b2c3d.tmp"  # no such pid
    stale.parent.mkdir()
    stale.write_bytes(b"half an index")
    SearchIndex.build(clustered(20, 4, 2, 1)).save(tmp_path / "idx")
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == ["index.faiss", "meta.json"]


@pytest.mark.parametrize("mode", ["ivf", "hnsw"])
def test_unset_parameters_follow_the_data_as_the_approximate_evaluation_does(mode, tmp_path):
    from dmlkit.evaluation.approx_index import default_nlist

    x = clustered(3000, 16, 40, seed=3)
    index = SearchIndex.build(x, IndexConfig(mode), recall_sample=400)
    param = {"ivf": "nprobe", "hnsw": "ef_search"}[mode]
    if mode == "ivf":
        assert index.config.nlist == default_nlist(3000) == 55
    tuned = index.meta["tuned"]
    assert tuned["param"] == param and getattr(index.config, param) == tuned["value"] == tuned["curve"][-1][0]
    lowers = [point[2] for point in tuned["curve"]]
    assert lowers[-1] >= 0.95 or tuned["curve"][-1][1] == 1.0, "the chosen value reaches the target"
    assert all(lower < 0.95 for lower in lowers[:-1]), "and is the cheapest of the ladder that does"
    assert index.meta["recall"]["recall"] > 0.9
    index.save(tmp_path / "idx")
    assert getattr(SearchIndex.load(tmp_path / "idx").config, param) == tuned["value"]


def test_cli_index_build_with_bare_ivf_chooses_from_the_data(tmp_path, capsys):
    x = clustered(2000, 8, 20, seed=4)
    np.save(tmp_path / "emb.npy", x)
    assert main(["index", "build", str(tmp_path / "emb.npy"), "--out", str(tmp_path / "idx"), "--ivf"]) == 0
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    assert meta["config"]["nlist"] == 45 and meta["config"]["nprobe"] == meta["tuned"]["value"]
    assert main(["index", "build", str(tmp_path / "emb.npy"), "--out", str(tmp_path / "i2"), "--ivf", "many"]) == 2
    assert "--ivf takes a positive integer or 'auto'" in capsys.readouterr().err
