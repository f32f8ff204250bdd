#!/usr/bin/env bash
# Builds llama-cli, llama-completion and llama-bench from the llama.cpp
# source node-llama-cpp ships (a git bundle), the way a user builds
# llama.cpp: CMake Release defaults, once with shared libraries and once
# statically linked (BUILD_SHARED_LIBS=OFF), so that tests trace a CLI
# built from source beside node-llama-cpp's prebuilt libraries. The
# static build makes llama-completion and llama-bench only: llama-cli is
# built on the server's code, which doubled the static build's time on a
# fresh machine, and what tests trace statically linked is one process
# running a prompt, which llama-completion is. The
# shared build also has llama-cli, llama-server (a deployed server to attach to),
# llama-quantize (the models' K-quant, IQ and MXFP4 types, made by
# llama.cpp itself) and, in include/, the public headers llama.h and
# ggml's, so that test programs compile against the very library the
# tools load.
#
# Offline and once per bundle: the result is cached outside the checkout,
# in $IOCORR_LLAMA_CACHE (default /var/cache/iocorr/llama.cpp), under
# <first 16 hex digits of the bundle's sha256>/{shared,static}/bin. A
# variant's directory appears only by a rename after its build succeeded,
# so an interrupted build is never taken for a finished one.
#
# GGML_NATIVE stays at its default (ON): ggml is compiled with
# -march=native, for this machine's CPU (AVX-512 on Sapphire Rapids). The
# cache is therefore only good for the machine that built it (or one with
# the same CPU features): restored on an older CPU, the binaries die of
# SIGILL. Delete the cache directory to rebuild.
#
# Except AMX, left out on x86-64 (-mno-amx-*, which win over -march=native
# whatever their order): on a lab VM that advertises it (2026-12-06, a PVM
# guest on Sapphire Rapids), ggml's AMX kernels for the quantized types died
# of SIGILL at a tilezero in their worker threads, where a one-thread probe
# of the same instructions ran, so that a Q8_0, K-quant or MXFP4 model
# crashed llama.cpp. The flags a build used are kept beside it (FLAGS); a
# cached build made with others is built again.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "build-llama: $*" >&2; exit 1; }
say() { echo "build-llama: $*" >&2; }

llama_dir=testdata/llm/node_modules/node-llama-cpp/llama
bundle=$llama_dir/gitRelease.bundle
info=$llama_dir/llama.cpp.info.json
[ -f "$bundle" ] || die "no $bundle (run testdata/llm/setup.sh first)"
[ -f "$info" ] || die "no $info beside the bundle"
for cmd in git cmake g++ make sha256sum flock; do
	command -v "$cmd" >/dev/null 2>&1 || die "$cmd not found (scripts/setup.sh installs it)"
done

cache=${IOCORR_LLAMA_CACHE:-/var/cache/iocorr/llama.cpp}
key=$(sha256sum "$bundle" | cut -c1-16)
dest=$cache/$key
tools_static=(llama-completion llama-bench)
tools_shared=(llama-cli "${tools_static[@]}" llama-server llama-quantize)

# tools_of VARIANT names the tools a variant builds.
tools_of() {
	local -n list=tools_$1
	echo "${list[@]}"
}

cflags=
if [ "$(uname -m)" = x86_64 ]; then
	cflags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi

done_variant() {
	local t
	for t in $(tools_of "$1"); do
		[ -x "$dest/$1/bin/$t" ] || return 1
	done
	[ "$(cat "$dest/$1/FLAGS" 2>/dev/null)" = "$cflags" ] || return 1
	[ "$1" = static ] || [ -f "$dest/$1/include/llama.h" ]
}
if done_variant shared && done_variant static; then
	exit 0
fi

mkdir -p "$dest" 2>/dev/null || die "cannot create $dest"
# Two setups at once (helpers sharing a machine) build once; the second
# finds the finished directories after the lock.
exec 9>"$dest/.lock"
flock 9

work=$(mktemp -d "$dest/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The bundle's HEAD is the commit node-llama-cpp built its binaries from;
# info.json names its release ("tag"), not llama.cpp's build number.
commit=$(git bundle list-heads "$bundle" | awk '$2 == "HEAD" { print $1 }')
[ -n "$commit" ] || die "no HEAD in $bundle"
tag=$(sed -n 's/.*"tag": *"\([^"]*\)".*/\1/p' "$info")

build() {
	local variant=$1 shared=$2
	done_variant "$variant" && return 0
	if [ ! -d "$work/src" ]; then
		say "unpacking llama.cpp $commit (node-llama-cpp release ${tag:-?}) from the bundle"
		git clone -q "$bundle" "$work/src" >"$work/clone.log" 2>&1 ||
			die "git clone of $bundle failed: $(tail -1 "$work/clone.log")"
		git -C "$work/src" checkout -q --detach "$commit" 2>>"$work/clone.log" ||
			die "checking out $commit failed: $(tail -1 "$work/clone.log")"
	fi
	local b=$work/build-$variant log=$work/$variant.log start=$SECONDS
	local tools
	read -ra tools <<<"$(tools_of "$variant")"
	say "building $variant (${tools[*]}) into $dest/$variant; log in $log while it runs"
	# Off: what needs the network or packages setup.sh does not install.
	# LLAMA_OPENSSL is HTTPS for -hf downloads (libssl-dev), the prebuilt
	# server UI is fetched from Hugging Face at build time; tests and
	# examples are not needed. The server stays configured because
	# llama-cli is built on its code. BUILD_RPATH_USE_ORIGIN makes the
	# shared build's RUNPATH $ORIGIN instead of the temporary build
	# directory, so the binaries find their libraries after the rename.
	cmake -S "$work/src" -B "$b" \
		-DCMAKE_BUILD_TYPE=Release \
		-DBUILD_SHARED_LIBS="$shared" \
		-DCMAKE_BUILD_RPATH_USE_ORIGIN=ON \
		-DCMAKE_C_FLAGS="$cflags" \
		-DCMAKE_CXX_FLAGS="$cflags" \
		-DLLAMA_BUILD_TESTS=OFF \
		-DLLAMA_BUILD_EXAMPLES=OFF \
		-DLLAMA_OPENSSL=OFF \
		-DLLAMA_USE_PREBUILT_UI=OFF \
		-DLLAMA_BUILD_UI=OFF >"$log" 2>&1 ||
		die "cmake configure of $variant failed ($(grep -m1 'Error' "$log" || tail -1 "$log"))"
	cmake --build "$b" --target "${tools[@]}" -j "$(nproc)" >>"$log" 2>&1 ||
		die "building $variant failed ($(grep -m1 -E 'error|Error' "$log" || tail -1 "$log"))"
	# bin/ holds the executables and, in the shared build, every library
	# they load (CMake puts both there).
	mkdir -p "$work/out-$variant"
	cp -a "$b/bin" "$work/out-$variant/bin"
	if [ "$variant" = shared ]; then
		mkdir -p "$work/out-$variant/include"
		cp "$work/src/include/"*.h "$work/src/ggml/include/"*.h "$work/out-$variant/include/"
	fi
	cp "$log" "$work/out-$variant/build.log"
	printf '%s' "$cflags" >"$work/out-$variant/FLAGS"
	printf 'commit %s\nrelease %s\nbundle-sha256 %s\n' "$commit" "${tag:-?}" "$(sha256sum "$bundle" | cut -d' ' -f1)" \
		>"$work/out-$variant/SOURCE"
	rm -rf "$dest/$variant"
	mv -T "$work/out-$variant" "$dest/$variant"
	say "built $variant in $((SECONDS - start)) s"
}

build shared ON
build static OFF
