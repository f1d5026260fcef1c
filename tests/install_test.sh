#!/usr/bin/env bash
# Installs the goro in build dir $1 into a temporary prefix, builds
# install_consumer/ against it with find_package(goro CONFIG), and runs it.
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$here/install_consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
out=$("$tmp/consumer/consumer")
[[ $out == 42 ]] || { echo "consumer printed '$out', want 42"; exit 1; }
echo "installed goro found with find_package and ran a goroutine"
