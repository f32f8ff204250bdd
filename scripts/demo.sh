#!/usr/bin/env bash
# The main job end to end on a built-in default: a generated MoE model,
# recorded from a cold page cache under a memory limit smaller than the
# model (so llama.cpp re-reads weights from disk every token), then
# queried. Run by `make demo` (as root): demo.sh DIR [TOKENS].
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-demo}
tokens=${2:-16}
iocorr=./bin/iocorr
mkdir -p "$dir"

step() { printf '\n== %s\n' "$*" >&2; }

step "synthesize an 8-layer MoE model (8 experts, 2 used), BF16"
"$iocorr" synth -o "$dir/model.gguf" --layers 8 --embd 768 --ff 1024 --heads 12 \
	--experts 8 --experts-used 2 --type bf16
# Not piped into head: under pipefail, head leaving early is a failure.
"$iocorr" inspect "$dir/model.gguf" >"$dir/inspect.txt"
head -n 20 "$dir/inspect.txt"

step "record $tokens tokens from a cold cache under a 96 MiB memory limit"
"$iocorr" record -f -o "$dir/iocorr.data" --cold --mem-limit 96MiB -- \
	node testdata/llm/generate.mjs --model "$dir/model.gguf" --tokens "$tokens" --threads 2

step "bytes read and faults per layer"
"$iocorr" query -i "$dir/iocorr.data" --by layer

step "the experts of every ffn_down_exps tensor"
"$iocorr" query -i "$dir/iocorr.data" --tensor 'blk.*.ffn_down_exps.weight' --by expert

step "per-token CSV: $dir/faults-per-token.csv (why a column is left out: $dir/faults-per-token.na.json)"
"$iocorr" export -i "$dir/iocorr.data" faults-per-token -o "$dir/faults-per-token.csv"
head -n 5 "$dir/faults-per-token.csv"

step "the run in a study dataset: $dir/study (hive-partitioned Parquet; sweep writes one too)"
"$iocorr" export -i "$dir/iocorr.data" dataset -o "$dir/study"

step "the report: $dir/report.html (one file; each chart also as $dir/charts/NAME.png)"
"$iocorr" report -i "$dir/iocorr.data" -o "$dir/report.html" --png "$dir/charts"
if command -v chromium >/dev/null 2>&1; then
	# What docs/report.png shows: the top of the page in a 1200×1600 window.
	chromium --headless --no-sandbox --disable-gpu --disable-background-networking --hide-scrollbars \
		--window-size=1200,1600 --screenshot="$(realpath "$dir")/report.png" "file://$(realpath "$dir/report.html")" >/dev/null 2>&1 &&
		echo "screenshot: $dir/report.png" >&2 ||
		echo "demo: chromium could not take a screenshot of the report" >&2
fi
