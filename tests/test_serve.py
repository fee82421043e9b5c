"""dmlkit.serve: the JSON API against brute-force search, upload checks, and the page in headless Chromium."""

import io
import socket
import threading
import time

import numpy as np
import pytest
from PIL import Image

from browser import browser_page  # noqa: F401  (pytest fixture)
from dmlkit.cli import _parser
from dmlkit.search import IndexConfig, build_index_from_embeddings, embed_images, load_run_model
from dmlkit.serve import create_app
from dmlkit.serve.server import is_loopback
from search_helpers import tiny_search_run, write_glyph_folder

fastapi_testclient = pytest.importorskip("fastapi.testclient")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A tiny run, its embeddings of 4 glyph classes and an HNSW index folder recording the run."""
    run_dir = tiny_search_run(tmp_path_factory)
    root = tmp_path_factory.mktemp("serve")
    folder, _ = write_glyph_folder(root / "gallery", max_classes=4)
    result = embed_images(run_dir, folder, root / "emb.npy", quiet=True)
    build_index_from_embeddings(result.embeddings, root / "index", IndexConfig("hnsw", m=8))
    return {
        "run": run_dir,
        "index": root / "index",
        "emb": np.load(result.embeddings),
        "folder": folder,
        "paths": sorted(folder.rglob("*.png")),
    }


@pytest.fixture(scope="module")
def client(served):
    app = create_app(served["index"], max_upload_bytes=20_000)
    return fastapi_testclient.TestClient(app)


def png_bytes(path):
    return path.read_bytes()


def assert_matches_brute_force(neighbours, emb, query, k):
    """Returned distances are the k smallest true distances and belong to the returned ids (robust to ties)."""
    d = np.linalg.norm(emb.astype(np.float64) - query.astype(np.float64), axis=1)
    got = [n["distance"] for n in neighbours]
    np.testing.assert_allclose(got, np.sort(d)[:k], atol=1e-4)
    np.testing.assert_allclose(got, d[[n["id"] for n in neighbours]], atol=1e-4)
    assert len({n["id"] for n in neighbours}) == k


def test_info_and_gallery(client, served):
    info = client.get("/api/info").json()
    assert info["count"] == len(served["emb"]) and info["dim"] == 16 and info["mode"] == "hnsw"
    assert info["recall"]["k"] == 10 and 0 <= info["recall"]["recall"] <= 1
    page = client.get("/api/gallery", params={"offset": 5, "limit": 3}).json()
    assert page["total"] == len(served["emb"]) and [item["id"] for item in page["items"]] == [5, 6, 7]
    assert page["items"][0]["path"] == str(served["paths"][5].resolve()) and page["items"][0]["class_name"] == "c00"
    thumb = client.get("/thumb/5")
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(thumb.content)).size == (96, 96)
    html = client.get("/")
    assert html.status_code == 200 and '<form id="upload-form">' in html.text


def test_upload_search_equals_brute_force(client, served):
    path = served["paths"][13]
    response = client.post("/api/search", params={"k": 5}, files={"image": (path.name, png_bytes(path), "image/png")})
    assert response.status_code == 200, response.text
    data = response.json()
    run = load_run_model(served["run"])
    query = run.embed(run.preprocess.load(path)[None]).numpy()[0]
    assert_matches_brute_force(data["neighbours"], served["emb"], query, 5)
    itself = next(n for n in data["neighbours"] if n["id"] == 13)  # the uploaded file is indexed: found at ~0
    assert itself["distance"] < 1e-3 and itself["thumbnail"] == "/thumb/13" and data["query"]["filename"] == path.name


def test_the_page_embeds_uploads_with_an_exported_model_and_its_own_preprocessing(served, tmp_path):
    from dmlkit.search import export_run

    export_run(served["run"], "torchscript", tmp_path / "model.pt")
    exported = fastapi_testclient.TestClient(create_app(served["index"], run=tmp_path / "model.pt"))
    assert exported.get("/api/info").json()["run_dir"] == str((tmp_path / "model.pt").resolve())
    path = served["paths"][13]
    response = exported.post("/api/search", params={"k": 5}, files={"image": (path.name, png_bytes(path), "image/png")})
    assert response.status_code == 200, response.text
    run = load_run_model(served["run"])
    assert_matches_brute_force(
        response.json()["neighbours"], served["emb"], run.embed(run.preprocess.load(path)[None]).numpy()[0], 5
    )


def test_search_by_gallery_item(client, served):
    data = client.get("/api/search/20", params={"k": 4}).json()
    assert_matches_brute_force(data["neighbours"], served["emb"], served["emb"][20], 4)
    assert data["neighbours"][0]["distance"] == 0.0 and 20 in {n["id"] for n in data["neighbours"]}
    assert client.get("/api/search/99999").status_code == 404
    assert client.get("/api/search/1", params={"k": 0}).status_code == 400


def test_uploads_of_wrong_type_size_or_content_are_rejected(client, served):
    ok = png_bytes(served["paths"][0])
    r = client.post("/api/search", files={"image": ("notes.txt", b"hello", "text/plain")})
    assert r.status_code == 415 and "upload PNG, JPEG, BMP or WebP" in r.json()["detail"]
    r = client.post("/api/search", files={"image": ("broken.png", b"\x89PNG\r\n\x1a\n" + b"garbage" * 20, "image/png")})
    assert r.status_code == 400 and "not a readable image" in r.json()["detail"]
    r = client.post("/api/search", files={"image": ("empty.png", b"", "image/png")})
    assert r.status_code == 400 and "empty" in r.json()["detail"]
    gif = io.BytesIO()
    Image.new("L", (8, 8)).save(gif, format="GIF")
    r = client.post("/api/search", files={"image": ("a.gif", gif.getvalue(), "image/gif")})
    assert r.status_code == 415
    r = client.post("/api/search", files={"image": ("a.png", gif.getvalue(), "image/png")})  # GIF bytes, PNG label
    assert r.status_code == 415 and "is a GIF image" in r.json()["detail"]
    bmp = io.BytesIO()
    Image.new("L", (8, 8)).save(bmp, format="BMP")
    r = client.post("/api/search", files={"image": ("b.png", bmp.getvalue(), "image/png")})  # allowed kind, wrong label
    assert r.status_code == 415 and "holds a BMP image" in r.json()["detail"]
    for side in (200, 400):  # over the 20 kB limit: caught in the handler, then already by the body-size middleware
        noise = io.BytesIO()
        Image.fromarray(np.random.default_rng(0).integers(0, 256, (side, side), dtype=np.uint8)).save(
            noise, format="PNG"
        )
        assert len(noise.getvalue()) > 20_000
        r = client.post("/api/search", files={"image": ("big.png", noise.getvalue(), "image/png")})
        assert r.status_code == 413 and "MiB" in r.json()["detail"]
    assert client.post("/api/search", files={"image": ("ok.png", ok, "image/png")}).status_code == 200


def test_server_binds_loopback_by_default():
    args = _parser().parse_args(["serve", "some-index"])
    assert args.host == "127.0.0.1" and is_loopback(args.host)
    assert is_loopback("localhost") and is_loopback("::1") and not is_loopback("0.0.0.0")


@pytest.mark.parametrize("value", ["-1", "0", "nan"])
def test_a_bad_upload_limit_is_named_in_mib(value, capsys):
    from dmlkit.cli import main

    assert main(["serve", "no-such-index", "--max-upload-mb", value]) == 2
    err = capsys.readouterr().err
    assert (
        f"--max-upload-mb must be a positive number of MiB (e.g. 5), got {float(value):g}" in err
        and "max_bytes" not in err
    )


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def live_server(served):
    """The app under uvicorn on a free loopback port, in a thread, for the browser."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(served["index"]), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def test_page_upload_and_gallery_click_in_chromium(browser_page, live_server, served, tmp_path):
    page = browser_page.page
    page.goto(live_server + "/")
    page.wait_for_selector("#gallery .gallery-item")
    assert "hnsw" in page.locator("#info").inner_text()

    page.fill("#k", "6")
    page.set_input_files("#file", str(served["paths"][13]))
    page.click("#search-button")
    page.wait_for_selector("#results[data-query='upload'] .result")
    assert page.locator("#results .result").count() == 6
    results = page.locator("#results .result")
    assert "d=0.000" in results.first.inner_text()  # the uploaded file is in the gallery
    assert "13" in [results.nth(i).get_attribute("data-id") for i in range(6)]
    distances = [float(results.nth(i).get_attribute("data-distance")) for i in range(6)]
    assert distances == sorted(distances)
    page.wait_for_function(
        "[...document.querySelectorAll('#results .result img')].every(img => img.complete && img.naturalWidth === 96)"
    )  # thumbnails loaded

    page.locator("#gallery .gallery-item[data-id='20']").click()
    page.wait_for_selector("#results[data-query='20'] .result")
    ids = page.locator("#results .result").evaluate_all("cards => cards.map(c => c.dataset.id)")
    assert len(ids) == 6 and "20" in ids
    assert "neighbours in" in page.locator("#status").inner_text()
    page.screenshot(path=str(tmp_path / "search-page.png"), full_page=True)
    browser_page.assert_no_console_errors()
