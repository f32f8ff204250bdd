#!/usr/bin/env bash
# Installs what `make demo` needs on a Debian 12 machine (run as root), and
# nothing more: the Go modules the CLI needs, node and npm, node-llama-cpp 3.22.1 (its
# prebuilt llama.cpp) into testdata/llm, and tracefs mounted. The BPF
# objects are committed, so no clang; chromium, when present, only adds
# the report's screenshot. scripts/setup.sh installs the rest `make test`
# needs. Safe to run again: each step returns at once when its part is
# there.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	echo "setup-demo: installing nodejs npm" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi

# The tracer and iocorr doctor read tracefs; it is not mounted by default here.
if [ ! -e /sys/kernel/tracing/events ]; then
	mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || echo "setup-demo: could not mount tracefs (not root?)" >&2
fi

# Only the modules the CLI builds from: `go mod download` would also
# fetch what only tests use (DuckDB's libraries for five platforms, some
# 140 MB), which scripts/setup.sh does.
# go says what it downloads on stderr: shown only when it fails.
if ! out=$(go list -deps ./cmd/iocorr 2>&1 >/dev/null); then
	echo "$out" >&2
	exit 1
fi
./testdata/llm/setup.sh --default-only
