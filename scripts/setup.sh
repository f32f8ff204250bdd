#!/usr/bin/env bash
# Installs what iocorr's tests and benchmarks need on a Debian 12 machine
# (run as root), on top of what the demo needs (scripts/setup-demo.sh, run
# first): every Go module (DuckDB's among them, for the Parquet tests),
# the BPF toolchain, bpftrace, qemu-user-static (arm64 tests), a C/C++ toolchain and cmake for the
# llama.cpp builds, chromium and protoc for the report's and the Perfetto
# trace's tests, node-llama-cpp's older releases and its Vulkan build with
# Mesa's lavapipe (the hybrid-offload tests), and llama.cpp built from
# source twice. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup-demo.sh

need_apt=()
# qemu-user-static runs the arm64 test binaries of `make arm64`.
for cmd_pkg in clang:clang llc:llvm bpftool:bpftool bpftrace:bpftrace gcc:gcc g++:g++ cmake:cmake git:git qemu-aarch64-static:qemu-user-static python3:python3; do
	cmd=${cmd_pkg%%:*} pkg=${cmd_pkg#*:}
	command -v "$cmd" >/dev/null 2>&1 || need_apt+=("$pkg")
done
[ -e /usr/include/bpf/bpf_helpers.h ] || need_apt+=(libbpf-dev)
# The report test opens the HTML in a real browser and the Perfetto test
# decodes the trace with protoc; without recommends chromium stays small.
need_lean=()
# scripts/oldkernel.sh boots Debian's 6.1 kernel in qemu with busybox; its
# arm64 run downloads the arm64 kernel and busybox (a foreign architecture).
# The bench's far disk mounts a FUSE file system (fusermount3).
for cmd_pkg in chromium:chromium protoc:protobuf-compiler qemu-system-x86_64:qemu-system-x86 qemu-system-aarch64:qemu-system-arm busybox:busybox-static fusermount3:fuse3; do
	cmd=${cmd_pkg%%:*} pkg=${cmd_pkg#*:}
	command -v "$cmd" >/dev/null 2>&1 || need_lean+=("$pkg")
done
command -v perf >/dev/null 2>&1 || need_lean+=(linux-perf) # the wrapper test runs perf trace --pf=maj
# The hybrid-offload tests run llama.cpp's Vulkan backend on lavapipe,
# Mesa's Vulkan device on the CPU (mesa-vulkan-drivers; vulkaninfo names it).
[ -e /usr/share/vulkan/icd.d/lvp_icd.x86_64.json ] || [ "$(uname -m)" != x86_64 ] || need_lean+=(mesa-vulkan-drivers)
command -v vulkaninfo >/dev/null 2>&1 || need_lean+=(vulkan-tools)
add_arm64=
dpkg --print-foreign-architectures | grep -qx arm64 || add_arm64=1
if [ ${#need_apt[@]} -gt 0 ] || [ ${#need_lean[@]} -gt 0 ] || [ -n "$add_arm64" ]; then
	echo "setup: installing ${need_apt[*]} ${need_lean[*]}" >&2
	[ -z "$add_arm64" ] || dpkg --add-architecture arm64
	apt-get update -qq
fi
if [ ${#need_apt[@]} -gt 0 ]; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# The llama.cpp builds (some 17 minutes of compiling on a fresh 2-CPU
# machine) need only the compilers above and the bundle setup-demo.sh
# installed: they run while the rest downloads (the chromium and qemu
# packages, the Go modules, node-llama-cpp's older releases), which waits
# on the network rather than the CPU.
./scripts/build-llama.sh &
build=$!
rest() {
	if [ ${#need_lean[@]} -gt 0 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_lean[@]}" >/dev/null
	fi
	go mod download
	./testdata/llm/setup.sh
}
# In the background too, so that set -e still stops it at its first
# failure (a function called as `rest || ...` would run on past one).
rest &
others=$!
failed=
wait "$others" || failed="installing the packages, Go modules or node-llama-cpp releases"
wait "$build" || failed="${failed:+$failed and }building llama.cpp"
[ -z "$failed" ] || { echo "setup: $failed failed (above)" >&2; exit 1; }
