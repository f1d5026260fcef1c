#!/usr/bin/env bash
# Installs the Debian packages goro needs, if any is missing. Sourced by the
# other scripts. As root it runs apt-get; otherwise it prints the exact line.
set -euo pipefail
# A script needing more (scripts/fuzz.sh) sets GORO_EXTRA_PACKAGES first.
GORO_PACKAGES=(g++ cmake make libabsl-dev libunwind-dev libgtest-dev libbenchmark-dev gnuplot-nox python3
               ${GORO_EXTRA_PACKAGES[@]+"${GORO_EXTRA_PACKAGES[@]}"})
goro_missing=()
for p in "${GORO_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || goro_missing+=("$p")
done
if ((${#goro_missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "goro: installing ${goro_missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${goro_missing[@]}" >/dev/null
  else
    echo "goro: missing Debian packages; run:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${goro_missing[*]}" >&2
    exit 1
  fi
fi
