#!/bin/bash
# Repacks the font packages of .debs (scripts/gpu_font_testbed_tables.sh's header) into .debs-slim with only their
# faces (.ttf / .otf) kept: the same package names, versions and face paths, so `dpkg-query -L` lists the same faces
# and the dataset's fingerprint (paths and contents) is unchanged, at 37 MB against 60. For a device call
# whose working tree and carried files must fit in 64 MiB. Usage: bash scripts/slim_font_debs.sh [SRC] [DEST]
set -eu
src=${1:-.debs} dest=${2:-.debs-slim}
mkdir -p "$dest"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for deb in "$src"/*.deb; do
  root="$work/$(basename "$deb" .deb)"
  dpkg-deb -R "$deb" "$root"
  find "$root" -path "$root/DEBIAN" -prune -o -type f ! -name '*.ttf' ! -name '*.otf' -print0 | xargs -0 -r rm -f
  find "$root" -path "$root/DEBIAN" -prune -o -type l -print0 | xargs -0 -r rm -f
  rm -f "$root/DEBIAN/conffiles" "$root/DEBIAN/postinst" "$root/DEBIAN/postrm" "$root/DEBIAN/preinst" \
    "$root/DEBIAN/prerm" "$root/DEBIAN/triggers"
  if [ -f "$root/DEBIAN/md5sums" ]; then grep -E '\.(ttf|otf)$' "$root/DEBIAN/md5sums" > "$root/md5" || true
    mv "$root/md5" "$root/DEBIAN/md5sums"; fi
  dpkg-deb --root-owner-group -Zxz -z9 -b "$root" "$dest/$(basename "$deb")" > /dev/null
done
du -cb "$dest"/*.deb | tail -n 1
