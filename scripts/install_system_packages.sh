#!/usr/bin/env bash
# System (Debian) packages the test suite needs: headless Chromium + its driver for the browser tests
# (tests/browser.py). Idempotent: does nothing when /usr/bin/chromium is already there. Needs root
# (or sudo) for apt-get; CI runs as root.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
    echo "install_system_packages: chromium already installed ($(/usr/bin/chromium --version 2>/dev/null || echo unknown version))"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "install_system_packages: need root (or sudo) to apt-get install chromium" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q chromium chromium-driver
echo "install_system_packages: installed $(/usr/bin/chromium --version)"
