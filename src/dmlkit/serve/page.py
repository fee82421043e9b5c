"""The search page served at ``/``: one self-contained HTML document (inline CSS and JS, no external loads).

It asks ``/api/info`` about the index, shows a page of the gallery (``/api/gallery``) as thumbnails,
and on an upload (``POST /api/search``) or a click on a gallery item (``GET /api/search/{id}``) shows
the query and its top-k neighbours as thumbnails (``/thumb/{id}``) with their distances. Errors from
the server are shown in the page (element ``#status``), not thrown.
"""

from __future__ import annotations

__all__ = ["PAGE_HTML"]

PAGE_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>dmlkit search</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; background: #fafafa; }
  h1 { font-size: 1.4rem; margin: 0 0 .3rem; }
  #info { color: #555; font-size: .9rem; margin-bottom: 1rem; }
  form { display: flex; gap: .6rem; align-items: center; flex-wrap: wrap; margin-bottom: 1rem; }
  #status { min-height: 1.2rem; margin: .4rem 0; }
  #status.error { color: #b00020; font-weight: 600; }
  .grid { display: flex; flex-wrap: wrap; gap: .5rem; }
  .card { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: .35rem; width: 96px;
          text-align: center; font-size: .75rem; }
  .card img { width: 80px; height: 80px; object-fit: contain; image-rendering: pixelated; background: #000; }
  .card .dist { font-variant-numeric: tabular-nums; font-weight: 600; }
  .card .name { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; color: #555; }
  #gallery .card { cursor: pointer; }
  #gallery .card:hover { border-color: #36c; }
  #query img { width: 96px; height: 96px; object-fit: contain; image-rendering: pixelated; background: #000; }
  section { margin-top: 1.2rem; }
  h2 { font-size: 1.05rem; margin: .2rem 0 .5rem; }
</style>
</head>
<body>
<h1>dmlkit search</h1>
<div id="info">loading index&hellip;</div>
<form id="upload-form">
  <input type="file" id="file" name="image" accept="image/png,image/jpeg,image/bmp,image/webp">
  <label>k <input type="number" id="k" min="1" max="100" value="10" style="width:4rem"></label>
  <button type="submit" id="search-button">Search</button>
</form>
<div id="status" role="status"></div>
<section><h2>Query</h2><div id="query"></div></section>
<section><h2>Nearest neighbours</h2><div id="results" class="grid"></div></section>
<section><h2>Gallery <small>(click an item to search with it)</small></h2>
  <div id="gallery" class="grid"></div>
  <button type="button" id="more" hidden>more</button>
</section>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let galleryOffset = 0;
const GALLERY_PAGE = 48;

function setStatus(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

function card(item, extra) {
  const div = document.createElement("div");
  div.className = "card";
  const img = document.createElement("img");
  img.src = item.thumbnail;
  img.alt = item.class_name || ("item " + item.id);
  div.appendChild(img);
  if (extra) { div.appendChild(extra); }
  const name = document.createElement("div");
  name.className = "name";
  name.textContent = item.class_name || (item.path ? item.path.split("/").pop() : "#" + item.id);
  name.title = item.path || "";
  div.appendChild(name);
  return div;
}

function showResults(data) {
  const results = $("results");
  results.replaceChildren();
  results.dataset.query = data.query.source === "index" ? String(data.query.id) : "upload";
  for (const n of data.neighbours) {
    const dist = document.createElement("div");
    dist.className = "dist";
    dist.textContent = "#" + n.rank + "  d=" + n.distance.toFixed(4);
    const c = card(n, dist);
    c.classList.add("result");
    c.dataset.id = n.id;
    c.dataset.distance = n.distance;
    results.appendChild(c);
  }
  setStatus(data.neighbours.length + " neighbours in " + data.elapsed_ms.toFixed(1) + " ms", false);
}

async function readJson(response) {
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (!response.ok) {
    const detail = body && body.detail ? body.detail : response.statusText;
    throw new Error(typeof detail === "string" ? detail : JSON.stringify(detail));
  }
  return body;
}

async function searchUpload(event) {
  event.preventDefault();
  const file = $("file").files[0];
  if (!file) { setStatus("choose an image file first", true); return; }
  const query = $("query");
  query.replaceChildren();
  const img = document.createElement("img");
  img.src = URL.createObjectURL(file);
  img.alt = "query";
  query.appendChild(img);
  setStatus("searching\u2026", false);
  const form = new FormData();
  form.append("image", file);
  try {
    showResults(await readJson(await fetch("/api/search?k=" + encodeURIComponent($("k").value), {method: "POST", body: form})));
  } catch (err) {
    $("results").replaceChildren();
    setStatus(err.message, true);
  }
}

async function searchItem(item) {
  const query = $("query");
  query.replaceChildren(card(item));
  setStatus("searching\u2026", false);
  try {
    showResults(await readJson(await fetch("/api/search/" + item.id + "?k=" + encodeURIComponent($("k").value))));
  } catch (err) {
    $("results").replaceChildren();
    setStatus(err.message, true);
  }
}

async function loadGallery() {
  try {
    const data = await readJson(await fetch("/api/gallery?offset=" + galleryOffset + "&limit=" + GALLERY_PAGE));
    for (const item of data.items) {
      const c = card(item);
      c.classList.add("gallery-item");
      c.dataset.id = item.id;
      c.addEventListener("click", () => searchItem(item));
      $("gallery").appendChild(c);
    }
    galleryOffset += data.items.length;
    $("more").hidden = galleryOffset >= data.total;
  } catch (err) {
    setStatus(err.message, true);
  }
}

async function loadInfo() {
  try {
    const info = await readJson(await fetch("/api/info"));
    $("info").textContent = info.description + (info.run_dir ? "  \u00b7  run " + info.run_dir : "");
    $("k").value = info.k_default;
    $("k").max = info.max_k;
  } catch (err) {
    setStatus(err.message, true);
  }
}

$("upload-form").addEventListener("submit", searchUpload);
$("more").addEventListener("click", loadGallery);
loadInfo().then(loadGallery);
</script>
</body>
</html>
"""
