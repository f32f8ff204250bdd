#!/usr/bin/env bash
# Installs node-llama-cpp 3.22.1 (prebuilt llama.cpp for linux-x64) from the
# committed package-lock.json into testdata/llm/node_modules, and each older
# release of the version matrix the same way into versions/<v>/node_modules
# (one directory per version: each node-llama-cpp loads only the addon and
# libraries it was built with; generate.mjs --llama-version <v> runs one).
# After this, generate.mjs needs no network: it never builds or downloads
# llama.cpp. With --default-only (what `make demo` needs) it installs
# 3.22.1 alone.
#
# Safe to run again: it returns at once while each installed tree was made
# from the same package.json and package-lock.json (a stamp per tree holds
# their hash), and reinstalls a tree when either changed.
#
# Why `npm install --no-save` and not `npm ci`: node-llama-cpp lists every
# platform's binaries as optional dependencies. A lock written where some of
# them cannot be resolved (with --omit=optional, or from a registry mirror
# that lacks the mac and win packages, as here) leaves them out, and `npm ci`
# then refuses the lock as out of sync. `npm install` takes every version it
# needs from the lock all the same; --no-save keeps it from rewriting the
# committed lock, --omit=optional skips the GPU and other platforms' packages
# (hundreds of MB), --ignore-scripts skips node-llama-cpp's postinstall,
# which would try to download or build llama.cpp.
set -euo pipefail
cd "$(dirname "$0")"

# install DIR VERSION installs DIR's lock into DIR/node_modules and checks
# that it holds VERSION's libraries.
install() (
	cd "$1"
	local version=$2
	lib=node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
	stamp=node_modules/.iocorr-setup
	want=$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1)

	installed() {
		[ -f node_modules/node-llama-cpp/package.json ] && ls "$lib"/libllama.*so >/dev/null 2>&1 &&
			[ -f "$lib"/libggml-base.so ]
	}

	if installed && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
		exit 0
	fi

	command -v npm >/dev/null || { echo "testdata/llm/setup.sh: npm not found (install nodejs and npm)" >&2; exit 1; }
	echo "testdata/llm/setup.sh: installing node-llama-cpp $version from $1/package-lock.json" >&2
	NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --no-save --ignore-scripts --omit=optional \
		--no-audit --no-fund --loglevel=error

	installed || { echo "testdata/llm/setup.sh: npm finished but $lib (in $1) has no libllama or libggml-base" >&2; exit 1; }
	# The exact versions the lock pins, not whatever npm resolved.
	for pkg in node-llama-cpp @node-llama-cpp/linux-x64; do
		got=$(node -p "require('./node_modules/$pkg/package.json').version")
		if [ "$got" != "$version" ]; then
			echo "testdata/llm/setup.sh: $pkg in $1 is $got, the lock pins $version" >&2
			exit 1
		fi
	done
	echo "$want" >"$stamp"
)

only_default=false
case "${1:-}" in
"") ;;
--default-only) only_default=true ;;
*) echo "usage: testdata/llm/setup.sh [--default-only]" >&2; exit 2 ;;
esac

# vulkan installs node-llama-cpp 3.22.1's prebuilt Vulkan build
# (@node-llama-cpp/linux-x64-vulkan: libggml-vulkan.so, the CPU variants
# as loadable backends, libllama and libggml built with GGML_BACKEND_DL)
# into vulkan/node_modules: the hybrid-offload tests run llama.cpp's
# Vulkan backend on Mesa's lavapipe with it (testkit/llmtest/hybrid.go).
# Its lock was written without --omit=optional (the package has no
# optional dependencies), so `npm ci` takes it as it is.
vulkan() (
	cd vulkan
	lib=node_modules/@node-llama-cpp/linux-x64-vulkan/bins/linux-x64-vulkan
	stamp=node_modules/.iocorr-setup
	want=$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1)
	if [ -f "$lib/libggml-vulkan.so" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
		exit 0
	fi
	echo "testdata/llm/setup.sh: installing @node-llama-cpp/linux-x64-vulkan from vulkan/package-lock.json" >&2
	npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	[ -f "$lib/libggml-vulkan.so" ] || { echo "testdata/llm/setup.sh: npm finished but vulkan/$lib has no libggml-vulkan.so" >&2; exit 1; }
	echo "$want" >"$stamp"
)

install . 3.22.1
$only_default && exit 0
vulkan
# The version matrix: node-llama-cpp releases whose prebuilt llama.cpp spans
# late 2024 to mid 2025 (llama.cpp b4234, b4753, b5640; see README.md).
for dir in versions/*/; do
	dir=${dir%/}
	install "$dir" "$(basename "$dir")"
done
