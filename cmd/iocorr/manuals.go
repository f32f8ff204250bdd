package main

// The commands' manual pages beyond their flags (help.go): each command's
// registration names its own. The docs test parses every example with the
// command's FlagSet, and runs those that read a run.

const (
	runFiles   = "DIR/meta.json  the run's metadata: command, host, probes, models and their tensors, limits, counts, warnings"
	storeFiles = "DIR/db/  the run's query store (iocorr ingest builds it)"
)

var recordManual = manual{
	description: `Runs CMD (or attaches to the running process PID) and traces with eBPF, per token, layer, MoE expert and op, which tensors of the models it maps cause its page faults, page-cache fills and evictions, read calls and block requests, with their stall. A model is any GGUF file the command maps or names on its command line; --model names one it only reads.

The child is traced from its first instruction, with everything it starts: a shell, a driver in Python or Node, llama-server and its children. The recording lasts while any traced process lives, and is ingested into the run's query store at its end.

--cold evicts the model files from the page cache first, and --mem-limit runs the command in a memory cgroup of its own (v1 or v2), so that the kernel reclaims the model's pages and llama.cpp reads them again from the disk, as on a machine smaller than the model.

--probe picks the probe sets. A counter the chosen sets do not measure is NA in every output, with the reason; so is what this kernel cannot give (iocorr doctor says what it can). Needs root, or CAP_BPF and CAP_PERFMON, on Linux with kernel BTF.`,
	examples: []example{
		{"Record llama-cli from a cold page cache under a 96 MiB memory limit, into iocorr.data:", `iocorr record --cold --mem-limit 96MiB -- llama-cli -m model.gguf -p "..." -n 32`},
		{"The pagecache tier too (every page-cache add and eviction of the model), into run-160MiB:", `iocorr record -o run-160MiB --probe graph,pagecache --cold --mem-limit 160MiB -- llama-completion -m model.gguf -p "..." -n 32`},
		{"Attach to a running llama-server for a minute:", "iocorr record -o server.data -p 4242 --duration 60s"},
	},
	exit:    "When CMD exits with a non-zero status, record exits with that status once the run is written.",
	files:   []string{"DIR/events.spool  the raw records, written while the command runs", runFiles, "DIR/residency.jsonl  the model's page-cache residency at token starts", storeFiles},
	seeAlso: []string{"doctor", "query", "stats", "report", "sweep", "docs/recording.md"},
}

var queryManual = manual{
	description: `Sums a run's counters (faults, major and minor faults, fault stall, page-cache adds and evictions, device bytes read, block requests, bytes requested by read calls) per token, or per tensor, layer, expert, op, phase, request or device with --by, over the events the filters keep.

Every counter adds up over any grouping: the rows of --by layer sum to those of --by token, and to the disk's. A table leaves out the counters the run's tier did not measure, and says so on stderr (--all-columns keeps them, NA in every row); a figure not measured is NA with its reason, never 0. --by expert has the router's picks (SELECTED) beside the bytes each expert's slices read.`,
	examples: []example{
		{"Bytes read and faults per layer of the run in iocorr.data:", "iocorr query --by layer"},
		{"The experts of every ffn_down_exps tensor:", "iocorr query -i demo/iocorr.data --tensor 'blk.*.ffn_down_exps.weight' --by expert"},
		{"The five decode tokens that read the most, as CSV:", "iocorr query --phase decode --sort bytes_read --top 5 --format csv"},
	},
	files:   []string{runFiles, storeFiles},
	seeAlso: []string{"stats", "export", "diff", "report", "docs/report.md"},
}

var statsManual = manual{
	description: `Sums a run up the way offloading studies do, by phase: bytes read, major faults, stall and stall share per token (mean, p50, p90, p99, max), time to first token and per output token split into compute and I/O stall, the I/O shape of each token and phase (the device's busy share, requests and faults in flight, bandwidth against the disk's profile from doctor --disk, and whether it waited on latency, on bandwidth or on neither), readahead and re-read amplification per tensor and layer, device request sizes, page-cache residency per tensor at each token and refaults; for an MoE model, the router's activation matrix, routing entropy, token-to-token overlap, reuse distances, and LRU, LFU and Belady expert-cache simulations beside the run's real hit rate.

A figure not measured is NA in the tables, with its reason once on stderr; in JSON it is null with a <column>_na_reason beside it.`,
	examples: []example{
		{"Every table of the run in iocorr.data:", "iocorr stats"},
		{"Expert caches of 1 and 2 experts per layer, every table as JSON:", "iocorr stats --cache 1,2 --format json"},
	},
	files:   []string{runFiles, storeFiles},
	seeAlso: []string{"query", "report", "export", "docs/report.md"},
}

var reportManual = manual{
	description: `Draws a run as one HTML file that opens from disk and fetches nothing: its header (command, host, model, probes, limits, warnings), heatmaps of where in the model file each token read, bytes read and stall per token, layer and tensor role, for an MoE model the router's picks and the bytes of each expert, the expert-cache simulations, and the tables of iocorr stats. NA cells give their reason on hover.

Given a sweep directory, it adds tokens/s and bytes per token against the memory budget. Given two runs, A B, it draws them side by side with the diff tables.`,
	examples: []example{
		{"The report of the run in iocorr.data, each chart also as a PNG:", "iocorr report -o report.html --png charts"},
		{"Two runs side by side:", "iocorr report -o diff.html run-96MiB run-160MiB"},
	},
	files:   []string{runFiles, storeFiles, "DIR/sweep.json  a sweep's summary (iocorr sweep)"},
	seeAlso: []string{"stats", "diff", "sweep", "docs/report.md"},
}

var exportManual = manual{
	description: `Writes a run's data for other tools: faults-per-token (a row per token), faults-per-token-tensor (token × tensor × expert), events (every event, filtered by --tensor, --token, --layer, --expert, --op), stats (the tables of iocorr stats), sweep (a sweep's summary), perfetto (a Perfetto trace, for ui.perfetto.dev), or dataset (the run added to a study's hive-partitioned Parquet dataset in the directory -o).

CSV is RFC 4180 with its header first; NA is an empty cell, null in JSON and Parquet. For a file written with -o NAME.csv, NAME.na.json beside it says which columns are NA and why, and the run's status.`,
	examples: []example{
		{"A row per token, as CSV:", "iocorr export faults-per-token -o faults-per-token.csv"},
		{"Every event of one layer's tensors, as Parquet:", "iocorr export events --layer 1 --format parquet -o events.parquet"},
		{"The run as a Perfetto trace:", "iocorr export perfetto -o trace.pftrace"},
		{"Add a run to a study's dataset:", "iocorr export -i run-96MiB dataset -o study/"},
	},
	files:   []string{runFiles, storeFiles, "NAME.na.json  beside an exported file: its NA columns and why"},
	seeAlso: []string{"query", "stats", "sweep", "docs/studies.md"},
}

var diffManual = manual{
	description: `Compares two runs in the manner of perf diff: query's grouping (by tensor unless --by says otherwise) over both, a row per group and counter with its value in A (the baseline) and B, the change B − A and the ratio B / A. Tensors go by name, so runs of different models compare. A group only one run has, a counter a run did not measure and a ratio over a zero baseline are NA with the reason, never 0.`,
	examples: []example{
		{"Two runs by tensor:", "iocorr diff run-96MiB run-160MiB"},
		{"The five layers whose bytes read changed most:", "iocorr diff --by layer --sort bytes_read --top 5 run-96MiB run-160MiB"},
	},
	files:   []string{runFiles, storeFiles},
	seeAlso: []string{"query", "report", "docs/studies.md"},
}

var predictManual = manual{
	description: `Predicts, from one run recorded under a memory limit, what other budgets would cost per llama_decode call, for the prefill and the decode: bytes read, major faults, stall and tokens/s, per policy. kernel is a model of Linux's page cache (its LRU lists, refaults, mmap read-around) fed with the run's own access stream; plan (with --plan) is the same with the plan's pages pinned; belady is the offline optimum, which no policy beats; run is what the run measured at its own budget; prefetch-experts, prefetch-layers and prefetch-both (with --prefetch) are the kernel's with a prefetcher's requests: the picked experts' slices at the router's pick, the next layer's dense weights at a layer's start (prefetch-both: at the pick, after the picked slices, as iocorr prefetch --layers asks), timed by the trace's own lead times and the device's rate. With --release the prefetcher's rows are predicted as iocorr prefetch --release runs: the pages a layer's requests brought in released once it used them.

Where the run's decode calls faulted from more than one thread, runs of the command fall in two modes (the threads' read-arounds race), and each row comes in both (mode one-reader and racing-readers); a note on stderr says which the run itself is nearest.

A figure the run cannot give (no memory limit, no residency snapshots, calls without the router's picks) is NA with its reason.`,
	examples: []example{
		{"Three budgets from the run in run-96MiB:", "iocorr predict -i run-96MiB --mem-limit 96MiB,128MiB,160MiB"},
		{"With a plan's ranges pinned:", "iocorr predict -i run-96MiB --mem-limit 160MiB --plan plan.json"},
		{"With the picked experts and the next layer prefetched:", "iocorr predict -i run-96MiB --mem-limit 128MiB,160MiB --prefetch both"},
	},
	files:   []string{runFiles, storeFiles, "DIR/residency.jsonl  the residency snapshots the non-file memory is measured from"},
	seeAlso: []string{"plan", "pin", "docs/memory.md"},
}

var planManual = manual{
	description: `Chooses, from one run recorded under a memory limit, which whole tensors and expert slices to lock in RAM under a budget: ranked by stall saved per byte, the best prefix as predict's kernel model says, leaving the cache room for two read-around windows (in less, a fault's read-around evicts the page it was for). It recommends pinning only where that beats the kernel's own policy by 5% of the decode bytes; otherwise the plan pins nothing and says why; where the run has two modes (predict), the pin must win in both. It then says whether a prefetcher pays at the budget (predicted at 1.1× the tokens/s and at most 1.05× the bytes in every mode; none where stats calls the decode compute-bound or cannot tell; where it calls it bandwidth-bound, only at most 0.8× the bytes, credited no more speed than the bytes saved), and the command that runs it: iocorr prefetch --window W --mem-limit L -- CMD, with --release where that is predicted faster in every mode and the model, without it, keeps under 5% of the asked bytes from an earlier token; the plan file keeps the advice too (prefetch: policy, layers, window_bytes, release, command, reason). Last it says whether another read_ahead_kb of the model's disk pays: the kernel's policy predicted with the fault read-around of each read_ahead_kb from 32 KiB to 4 MiB (twice it, as llama.cpp advises the file POSIX_FADV_SEQUENTIAL), each read its faults make paying at least the disk's latency at depth 1 as its profile measured it, advised where it gives 1.25× the decode tokens/s of the disk's own in every mode (none without the disk's profile or its recorded read_ahead_kb), with the command that sets it before the command opens the model: blockdev --setra SECTORS /dev/DISK, and whether a prefetcher still pays at it, judged there as on a bandwidth-bound decode unless the run was latency-bound (a smaller window keeps it so; the run's verdict is its own window's) (the plan file's readahead, readahead.prefetch). A plan's advice is a prediction: check it with one pinned run (record --pin).`,
	examples: []example{
		{"A plan for 160 MiB from the run in run-96MiB:", "iocorr plan -i run-96MiB --mem-limit 160MiB -o plan.json"},
	},
	files:   []string{runFiles, storeFiles, "plan.json  the plan: the model, the budget, the ranges and the figures it expects"},
	seeAlso: []string{"predict", "pin", "record", "docs/memory.md"},
}

var pinManual = manual{
	description: `Runs CMD, untraced, in a memory cgroup of its own with a plan's file ranges read and locked in RAM by a holder process inside that cgroup, so that they count against the command's budget as llama.cpp's --mlock would. The ranges are held while the command runs and released after. A plan for another model file, one larger than the budget, or one that cannot be locked is refused in one line and nothing starts. record --pin and sweep --pin do the same in a traced run.`,
	examples: []example{
		{"Run llama-cli under 160 MiB with the plan pinned:", `iocorr pin --plan plan.json --mem-limit 160MiB -- llama-cli -m model.gguf -p "..." -n 32`},
	},
	exit:    "When CMD exits with a non-zero status, pin exits with that status.",
	files:   []string{"plan.json  the plan (iocorr plan -o)"},
	seeAlso: []string{"plan", "predict", "record", "docs/memory.md"},
}

var prefetchManual = manual{
	description: `Runs CMD with a prefetcher that needs no patch of llama.cpp: at each MoE layer's router pick (the probe record reads), it asks the kernel (posix_fadvise WILLNEED on the model file) for the pages of the picked experts' slices that are not in the page cache, and with --layers for the next layer's dense weights after them (after the last layer, the output head), so that they are read together while the layer computes rather than one read-around at a time as its matmuls fault them in.

The calls come from a helper process in the command's memory cgroup: pages are charged to the cgroup of whoever reads them in, so they count against --mem-limit as the command's own reads do. One layer's picks bring in at most --window bytes. With --release, at each layer's first pick the pages brought in for the layer before, which has used them, are advised MADV_COLD (process_madvise on the command's mapping): reclaim takes them before the slices asked for and not used yet, which under a tight budget it would otherwise evict first; a page the cache kept from an earlier token is not released. Only what the prefetcher acts on is attached: the traced processes, their mappings, the graph probes and the command's faults in the model (to tell what arrived before use); no recording is kept. record --prefetch does the same beside a recording.

On stderr, and as JSON with --report: the picks acted on, the slices and their bytes, what was cached already, what was asked and what the window held back; of what was asked, what arrived before use (no major fault on it), what came late (faulted before the kernel had the request) and what was evicted unused (faulted after it); with --release, the bytes released; the prefetcher's own CPU.`,
	examples: []example{
		{"Run llama-cli cold under 96 MiB with the prefetcher, a 24 MiB window:", `iocorr prefetch --cold --window 24MiB --mem-limit 96MiB -- llama-cli -m model.gguf -p "..." -n 32`},
		{"The same beside a recording, its report in meta.json:", `iocorr record --prefetch --cold --mem-limit 96MiB -- llama-cli -m model.gguf -p "..." -n 32`},
	},
	exit:    "When CMD exits with a non-zero status, prefetch exits with that status.",
	files:   []string{"FILE  the report, with --report"},
	seeAlso: []string{"record", "predict", "plan", "docs/memory.md"},
}

var sweepManual = manual{
	description: `Records CMD once per memory budget, each run into DIR/<budget>/ as record would (with --cold, each from a cold cache), then runs it again untraced under the same budget for the tokens/s a study publishes. It prints, and writes to DIR/sweep.json, per budget: tokens/s, bytes read and major faults per decode token, stall share and the expert hit rate. A run that failed (killed for memory, a non-zero exit) is a row with its status. Each run is added to the study dataset DIR/dataset, or to --dataset, as it ends.`,
	examples: []example{
		{"Three budgets, each from a cold cache:", `iocorr sweep --mem-limit 64MiB,96MiB,128MiB -o sweep --cold -- llama-cli -m model.gguf -p "..." -n 32`},
		{"A second model into the same study dataset:", `iocorr sweep --mem-limit 64MiB,96MiB,128MiB -o sweep-q4 --dataset study --cold -- llama-cli -m model-q4.gguf -p "..." -n 32`},
	},
	files:   []string{"DIR/<budget>/  each budget's run directory", "DIR/sweep.json  the sweep's summary", "DIR/dataset/  the study dataset, unless --dataset names another"},
	seeAlso: []string{"record", "report", "export", "docs/studies.md"},
}

var doctorManual = manual{
	description: `Checks that this machine can record: the kernel, its BTF, the privileges, tracefs, memory cgroups, and for each capability record uses (faults, page cache, block I/O, read calls, loops, ...) the path this kernel offers, the kernel it needs, and what a fallback loses. With -- CMD it also says, for each probe point (llama_decode, ggml_graph_compute, the router's get_rows, the op functions), in which file the command's llama.cpp build has it and how it is bound, or what a run loses without it, and which devices a GPU build lists.

--disk FILE measures the disk that holds FILE instead (random O_DIRECT reads at queue depths 1 to 32, of 128 KiB and 1 MiB; FILE at least 256 MiB, on the disk and not in the page cache) and keeps its profile, which record copies into a run on that disk: stats' I/O shape holds a token's reads to it. The profile also keeps the machine's prefetch cost: in a memory cgroup smaller than 256 MiB of FILE mapped, the user time a thread summing it gains beside a thread asking the kernel for the region ahead of it, per byte asked (about 10 s more; root, for the cgroup): predict --prefetch charges a prefetcher's bytes that much of the command's compute. Where it cannot be measured the profile is kept without it and says why.`,
	examples: []example{
		{"The machine's checks:", "iocorr doctor"},
		{"And what a llama.cpp build offers to probe:", "iocorr doctor -- llama-cli -m model.gguf"},
		{"The bandwidth of the disk that holds /data/ioprobe, a file of 1 GiB written with O_DIRECT:", "iocorr doctor --disk /data/ioprobe"},
	},
	exit:    "1 when a check that record needs failed.",
	files:   []string{"/var/lib/iocorr/disks/MAJOR:MINOR.json  a disk's profile (--disk); $IOCORR_DISK_PROFILES moves them"},
	seeAlso: []string{"record", "stats", "docs/kernels.md", "docs/gpu.md"},
}

var ingestManual = manual{
	description: `Attributes a recorded run's events to tensors, expert slices, tokens and ops, and builds its query store, DIR/db. record does it at the run's end unless --no-ingest; a run whose recorder was killed is ingested as far as its spool goes, and says so. A complete store is left as it is unless --force.`,
	examples: []example{
		{"Rebuild the store of the run in iocorr.data:", "iocorr ingest --force iocorr.data"},
	},
	files:   []string{"DIR/events.spool  the raw records", runFiles, storeFiles},
	seeAlso: []string{"record", "query"},
}

var inspectManual = manual{
	description: `Shows a GGUF model's architecture and hyperparameters, its bytes by type, and each tensor's type, shape, offset and size in the file, layer, role and, for an MoE expert tensor, its number of experts: where in the file each tensor lies, as record maps a file offset to a tensor.`,
	examples: []example{
		{"The tensors of a model:", "iocorr inspect model.gguf"},
		{"With every metadata key:", "iocorr inspect --metadata model.gguf"},
	},
	seeAlso: []string{"synth", "docs/recording.md"},
}

var synthManual = manual{
	description: `Writes a model of random weights that llama.cpp loads and runs: llama (dense, or MoE as Mixtral lays it out), qwen3moe, qwen2moe (with a shared expert) or gpt-oss, of any size, or of a released model's shape (--like). --type writes the weights directly in that type, in bounded memory; --router-skew makes a few experts hot, as real routers do. The same flags and seed give the same file.`,
	examples: []example{
		{"The demo's model: 8 layers, 8 experts of which 2 used, BF16:", "iocorr synth -o model.gguf --layers 8 --embd 768 --ff 1024 --heads 12 --experts 8 --experts-used 2 --type bf16"},
		{"Qwen3-30B-A3B's shape in Q4_K (16 GiB):", "iocorr synth -o a3b.gguf --like qwen3-30b-a3b --type q4_k"},
	},
	files:   []string{"MODEL.gguf  the model, written aside, synced and renamed"},
	seeAlso: []string{"inspect", "record", "docs/recording.md"},
}
