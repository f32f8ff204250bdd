#!/usr/bin/env bash
# Installs node-llama-cpp (prebuilt llama.cpp for linux-x64) from the
# committed lock, without the optional GPU and other-platform packages.
# `npm ci` cannot be used: npm leaves the other platforms' optional
# packages out of a lock written on Linux and then calls it out of sync.
set -euo pipefail
cd "$(dirname "$0")"
lib=node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
if [ -d node_modules/node-llama-cpp ] && ls "$lib"/libllama*.so >/dev/null 2>&1; then
	exit 0
fi
command -v npm >/dev/null || { echo "setup: npm not found (install nodejs and npm)" >&2; exit 1; }
NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --ignore-scripts --omit=optional --no-audit --no-fund --loglevel=error
ls "$lib"/libllama*.so >/dev/null
