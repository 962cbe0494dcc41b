#!/bin/sh
# verify-unit FILE NAME.service: `systemd-analyze verify` FILE under its unit name, and
# fail on any finding (warnings included), so that no unit with a typo goes live.
set -eu
file=$1
name=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp "$file" "$dir/$name"
out=$(systemd-analyze verify "$dir/$name" 2>&1) || { printf '%s\n' "$out" >&2; exit 1; }
if [ -n "$out" ]; then
  printf '%s\n' "$out" >&2
  exit 1
fi
