#!/usr/bin/env bash
# System (Debian) packages: headless Chromium + its driver for the browser tests (tests/browser.py), the
# PostgreSQL server for the throwaway database of the shared-study tests of `dmlkit tune`
# (tests/postgres_server.py; Debian keeps initdb/pg_ctl/postgres in /usr/lib/postgresql/<ver>/bin, off PATH),
# and the font packages of the font_glyphs dataset (dmlkit_lab.datasets.font_faces.FONT_PACKAGES; keep the
# two lists equal). Idempotent: installs only what is missing (chromium and the postgres server: their
# binaries; fonts: what dpkg does not report installed), and does nothing when all are there.
# Needs root (or sudo) for apt-get; CI runs as root. The quickstart and `make run` need none of these.
# Measured 2026-11-27 (Debian 12 mirror, 2 cores): the 17 font packages install in 14 s (59.6 MB of .debs
# downloaded, apt-get update included); run again with all installed: 0.6 s. The tests start their own
# server in a temporary folder on a free port; the cluster the postgresql package may start on port 5432 is
# not used.
set -euo pipefail

FONT_PACKAGES="fonts-noto-core fonts-urw-base35 fonts-freefont-ttf fonts-liberation2 fonts-croscore fonts-texgyre
fonts-linuxlibertine fonts-ebgaramond fonts-junicode fonts-sil-gentium fonts-sil-charis fonts-sil-andika
fonts-open-sans fonts-roboto-unhinted fonts-crosextra-carlito fonts-cantarell fonts-gfs-didot"

missing=""
if [ ! -x /usr/bin/chromium ]; then
    missing="chromium chromium-driver"
fi
postgres_bin() {  # the newest Debian server binary folder holding initdb, pg_ctl and postgres, or nothing
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -n -r); do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
            echo "$d"
            return
        fi
    done
}
if [ -z "$(postgres_bin)" ]; then
    missing="$missing postgresql"
fi
for p in $FONT_PACKAGES; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -z "$missing" ]; then
    echo "install_system_packages: all installed (chromium: $(/usr/bin/chromium --version 2>/dev/null || echo unknown version); postgresql: $("$(postgres_bin)/postgres" --version 2>/dev/null || echo unknown version); 17 font packages)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "install_system_packages: need root (or sudo) to apt-get install:$missing" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
start=$(date +%s)
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
echo "install_system_packages: installed$missing in $(( $(date +%s) - start )) s"
