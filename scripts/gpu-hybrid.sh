#!/usr/bin/env bash
# gpu-hybrid.sh: record a hybrid GPU + CPU run of llama.cpp's routing oracle
# (testdata/routeoracle) and hold iocorr to it: picks per phase, layer and
# expert against llama.cpp's own cb_eval, the device of every layer, the
# bytes read, lost events. What docs/gpu.md's "On a GPU box" runs.
#
#   scripts/gpu-hybrid.sh [DIR]        results in DIR (default ./gpu-hybrid.out)
#
# Environment (defaults in brackets):
#   IOCORR        the iocorr binary [iocorr on PATH, else bin/iocorr]
#   LLAMA_DIR     llama.cpp tools and libraries: llama-completion, and the
#                 ggml backends (libggml-vulkan.so / libggml-cuda.so) for
#                 --backends [the Vulkan build `make test` links, on this machine]
#   ORACLE        the routeoracle binary [built here against LLAMA_INCLUDE]
#   LLAMA_INCLUDE llama.cpp's public headers, to build the oracle
#   GPU_DEVICE    the device llama.cpp must list: Vulkan0, CUDA0 [Vulkan0]
#   MEM_LIMIT     the run's memory limit [3GiB]; TOKENS [8]; THREADS [nproc]
#   SYNTH_ARGS    the model `iocorr synth` makes [the study's qwen3moe shape:
#                 16 layers, 64 experts, 8 used, Q8_0, 4.8 GiB]
#   MODEL         a GGUF to use instead of synthesizing one
# Exit: 0 when decode and prefill picks equal the oracle's on every (layer,
# expert) cell and no event was lost; 1 otherwise; 2 when llama.cpp lists
# no GPU device (a "hybrid" run would be the CPU's alone).
set -euo pipefail
out=${1:-gpu-hybrid.out}
mkdir -p "$out"
say() { printf '== %s\n' "$*"; }
die() { printf 'gpu-hybrid: %s\n' "$*" >&2; exit "${2:-1}"; }
root=$(cd "$(dirname "$0")/.." && pwd)

iocorr=${IOCORR:-$(command -v iocorr || echo "$root/bin/iocorr")}
[ -x "$iocorr" ] || die "no iocorr ($iocorr): make build, or set IOCORR"
if [ -z "${LLAMA_DIR:-}" ]; then
	LLAMA_DIR=$(ls -d /var/cache/iocorr/llama.cpp/*/vulkan-*/bin 2>/dev/null | head -1 || true)
fi
[ -x "${LLAMA_DIR:-}/llama-completion" ] || die "set LLAMA_DIR to a directory with llama-completion and the ggml backends"
export LD_LIBRARY_PATH="$LLAMA_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

oracle=${ORACLE:-}
if [ -z "$oracle" ]; then
	[ -f "${LLAMA_INCLUDE:-}/llama.h" ] || die "set ORACLE to a routeoracle binary, or LLAMA_INCLUDE to llama.cpp's headers to build one"
	oracle=$out/routeoracle
	cc -O2 -o "$oracle" "$root/testdata/routeoracle/routeoracle.c" -I"$LLAMA_INCLUDE" -L"$LLAMA_DIR" \
		-l:libllama.so.0 -l:libggml.so.0 -l:libggml-base.so.0 -Wl,-rpath,"$LLAMA_DIR"
fi

say "doctor: the GPU, its drivers, the devices llama.cpp lists"
"$iocorr" doctor -- "$LLAMA_DIR/llama-completion" | tee "$out/doctor.txt" || true
device=${GPU_DEVICE:-Vulkan0}
grep -q "devices llama.cpp sees.*$device:" "$out/doctor.txt" ||
	die "llama.cpp lists no $device: check the driver, VK_DRIVER_FILES (docs/gpu.md) or the backend library in LLAMA_DIR" 2

model=${MODEL:-$out/model.gguf}
if [ -z "${MODEL:-}" ] && [ ! -s "$model" ]; then
	say "synth: the model"
	# shellcheck disable=SC2086 # SYNTH_ARGS is a list of flags
	"$iocorr" synth -o "$model" ${SYNTH_ARGS:---arch qwen3moe --layers 16 --embd 1024 --ff 1536 --heads 16 --kv-heads 4 --experts 64 --experts-used 8 --type q8_0}
fi
layers=$("$iocorr" inspect --format jsonl "$model" | awk -F'"layer":' 'NF > 1 { split($2, a, /[,}]/); if (a[1] + 1 > n) n = a[1] + 1 } END { print n + 0 }')

# A GPU driver (lavapipe's LLVM, NVIDIA's compiler) compiles its shaders
# at a command's first run: once untraced first, so that neither the
# recorded run's time nor its memory limit pays for that.
say "warm-up: the oracle once, untraced"
"$oracle" -m "$model" -p "the quick brown fox" -n 1 -t "${THREADS:-$(nproc)}" --no-repack \
	--backends "$LLAMA_DIR" -ngl 99 --cpu-moe --no-op-offload >/dev/null 2>"$out/warmup.txt" ||
	die "the oracle's untraced warm-up failed: $(tail -3 "$out/warmup.txt")"

# --no-op-offload: a prompt of 32 tokens or more would otherwise have its
# prefill's MUL_MAT_ID of the CPU's experts run on the GPU, where no CPU
# probe sees its ids (those picks are NA, and say so).
say "record: the oracle, -ngl 99 --cpu-moe --no-op-offload, cold under ${MEM_LIMIT:-3GiB}"
run=$out/run
"$iocorr" record -o "$run" -f --cold --mem-limit "${MEM_LIMIT:-3GiB}" -- \
	"$oracle" -m "$model" -p "the quick brown fox jumps over the lazy dog and the cat sat on the mat" \
	-n "${TOKENS:-8}" -t "${THREADS:-$(nproc)}" --no-repack --backends "$LLAMA_DIR" -ngl 99 --cpu-moe --no-op-offload \
	>"$out/oracle.txt" 2>"$out/record.txt" || die "record failed: $(tail -3 "$out/record.txt")"
grep -E "model buffer size|warning" "$out/record.txt" || true

say "picks: iocorr against llama.cpp's cb_eval, per phase, layer and expert"
# Both as "phase layer expert count", summed; then every cell compared.
awk '$1 == "topk" { ph = ($2 == 1) ? "prefill" : "decode"; for (i = 5; i <= NF; i++) n[ph " " $3 " " $i]++ }
	END { for (k in n) print k, n[k] }' "$out/oracle.txt" | sort >"$out/picks.oracle"
: >"$out/picks.iocorr"
for ph in prefill decode; do
	for ((l = 0; l < layers; l++)); do
		"$iocorr" query -i "$run" --by expert --phase "$ph" --layer "$l" --format csv 2>/dev/null |
			awk -F, -v ph="$ph" -v l="$l" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
				{ e = $c["expert"]; s = $c["selected"]; if (e == "") next
				  if (s == "") print "NA", ph, l, e >"/dev/stderr"; else if (s + 0 > 0) print ph, l, e, s + 0 }'
	done
done 2>"$out/picks.na" | sort >"$out/picks.iocorr"
status=0
for ph in prefill decode; do
	o=$(awk -v ph="$ph" '$1 == ph { n += $4 } END { print n + 0 }' "$out/picks.oracle")
	i=$(awk -v ph="$ph" '$1 == ph { n += $4 } END { print n + 0 }' "$out/picks.iocorr")
	d=$(diff <(grep "^$ph " "$out/picks.oracle") <(grep "^$ph " "$out/picks.iocorr") | grep -c '^[<>]' || true)
	na=$(grep -c " $ph " "$out/picks.na" || true)
	printf '%s: oracle %d picks, iocorr %d, differing cell lines %d, NA cells %d\n' "$ph" "$o" "$i" "$d" "$na"
	[ "$o" -gt 0 ] && [ "$d" -eq 0 ] && [ "$na" -eq 0 ] || status=1
done

say "devices and bytes"
"$iocorr" query -i "$run" --by device
"$iocorr" query -i "$run" --by layer
"$iocorr" query -i "$run" --by phase
# record's summary: "events  N recorded, M lost".
lost=$(awk '$1 == "events" { print $4 }' "$out/record.txt" | tail -1)
printf 'events lost: %s\n' "${lost:-unknown}"
[ "${lost:-x}" = 0 ] || status=1
"$iocorr" report -i "$run" -o "$out/report.html" >/dev/null 2>&1 || true
say "done: $(if [ $status -eq 0 ]; then echo "picks equal the oracle's"; else echo "DIFFERENCES (see $out)"; fi)"
exit $status
