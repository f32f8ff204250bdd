// generate.mjs drives llama.cpp (the prebuilt libraries of node-llama-cpp)
// for iocorr's tests, benchmarks and demo: it loads a GGUF model through
// mmap and generates exactly --tokens tokens, greedily, then reports what
// it did as one JSON object (--json) or one line.
//
// It generates exactly N tokens even when a random-weight model samples
// end-of-sequence, by driving the context sequence's evaluate() generator
// with yieldEogToken (a chat or completion session would stop there, and
// so would evaluate() without it): an end-of-generation token is counted
// and fed back like any other.
//
//   node generate.mjs --model M.gguf [--tokens N] [--threads T] [--prompt "..."]
//       [--ctx N] [--batch N] [--seed S [--temperature T]] [--only-eog] [--json]
//       [--llama-version V]
//
// --llama-version V runs node-llama-cpp V, installed by setup.sh under
// versions/V/ with its own prebuilt llama.cpp (each node-llama-cpp only
// loads the addon it was built with), instead of the one beside this file.
//
// Sampling is greedy unless --seed is given: then it samples at
// --temperature (default 0.8) from llama.cpp's RNG seeded with S, so a run
// is reproducible. --only-eog forbids every token but the end-of-generation
// ones, so that each token sampled ends the sequence: it exists to test that
// the token count and the llama_decode count still hold then.
import {readFileSync, statSync} from "node:fs";
import {basename, dirname, join, resolve} from "node:path";
import {fileURLToPath, pathToFileURL} from "node:url";
import {parseArgs} from "node:util";

// llama.cpp's own error logs, kept back so that a failure is one line
// that says why (e.g. "failed to read key-value pairs") rather than
// node-llama-cpp's bare "Failed to load model" after five log lines.
const nativeErrors = [];

function fail(msg) {
	const why = nativeErrors.length > 0 ? ` (llama.cpp: ${nativeErrors.join("; ")})` : "";
	process.stderr.write(`generate.mjs: ${msg}${why}\n`.replace(/\n(?!$)/g, " "));
	process.exit(1);
}

let opts;
try {
	({values: opts} = parseArgs({
		options: {
			model: {type: "string"},
			tokens: {type: "string", default: "16"},
			threads: {type: "string", default: "2"},
			prompt: {type: "string", default: "The quick brown fox jumps over the lazy dog"},
			ctx: {type: "string", default: "512"},
			batch: {type: "string", default: "512"},
			seed: {type: "string"},
			temperature: {type: "string"},
			"only-eog": {type: "boolean", default: false},
			json: {type: "boolean", default: false},
			"llama-version": {type: "string"},
		},
	}));
} catch (e) {
	fail(e.message);
}
function positive(name, min) {
	const v = Number(opts[name]);
	if (!Number.isInteger(v) || v < min) fail(`--${name} must be an integer of at least ${min}, not ${JSON.stringify(opts[name])}`);
	return v;
}
if (!opts.model) fail("--model is required");
const n = positive("tokens", 1), threads = positive("threads", 1), ctxSize = positive("ctx", 8), batch = positive("batch", 1);
// llama.cpp takes a uint32 seed; its "default seed" 0xFFFFFFFF means a random one.
const seed = opts.seed === undefined ? undefined : positive("seed", 0);
if (seed !== undefined && seed >= 0xFFFFFFFF) fail(`--seed must be below ${0xFFFFFFFF}`);
let temperature = 0;
if (opts.temperature !== undefined) {
	temperature = Number(opts.temperature);
	if (!Number.isFinite(temperature) || temperature < 0) fail(`--temperature must be a number of at least 0, not ${JSON.stringify(opts.temperature)}`);
	if (temperature > 0 && seed === undefined) fail("--temperature needs --seed: an unseeded run could not be repeated");
} else if (seed !== undefined) {
	temperature = 0.8;
}
// A missing file would otherwise surface as a long native error.
try {
	statSync(opts.model);
} catch (e) {
	fail(`${opts.model}: ${e.code === "ENOENT" ? "no such file" : e.message}`);
}

// The version is a directory name: nothing but digits and dots, so that it
// cannot point outside versions/.
let pkg = "node-llama-cpp";
if (opts["llama-version"] !== undefined) {
	const v = opts["llama-version"];
	if (!/^[0-9]+(\.[0-9]+)*$/.test(v)) fail(`--llama-version must be a version such as 3.6.0, not ${JSON.stringify(v)}`);
	const entry = join(dirname(fileURLToPath(import.meta.url)), "versions", v, "node_modules", "node-llama-cpp", "dist", "index.js");
	try {
		statSync(entry);
	} catch {
		fail(`node-llama-cpp ${v} is not installed (no ${entry}; run testdata/llm/setup.sh)`);
	}
	pkg = pathToFileURL(entry).href;
}
const {getLlama, LlamaLogLevel, TokenBias} = await import(pkg);

// Which llama.cpp libraries this process really loaded.
function loadedLibs() {
	const maps = readFileSync("/proc/self/maps", "utf8");
	const libs = new Set();
	for (const line of maps.split("\n")) {
		const path = line.split(/\s+/).slice(5).join(" ");
		if (/\/lib(llama|ggml)[^/]*\.so/.test(path)) libs.add(path);
	}
	return [...libs].sort();
}

try {
	const t0 = performance.now();
	const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, logLevel: LlamaLogLevel.error,
		logger: (level, message) => {
			const m = String(message).trim();
			if (m !== "" && !nativeErrors.includes(m)) nativeErrors.push(m);
		}});
	const model = await llama.loadModel({modelPath: opts.model, gpuLayers: 0, useMmap: true});
	const context = await model.createContext({contextSize: ctxSize, batchSize: batch, threads, sequences: 1});
	const loadMs = performance.now() - t0;
	const prompt = model.tokenize(opts.prompt);
	if (prompt.length === 0) fail("the prompt has no tokens");
	if (prompt.length + n > ctxSize) fail(`prompt (${prompt.length} tokens) + ${n} tokens exceed the context (${ctxSize})`);
	const sequence = context.getSequence();

	// llama_decode calls: node-llama-cpp splits the prompt into batches of
	// at most --batch tokens, one llama_decode each; the first token is
	// sampled from the last prompt batch's logits, and each later token
	// after one llama_decode of the token before it. Stopping after the
	// Nth means the Nth is never decoded, so a run makes
	//   ceil(prompt_tokens / batch) + N - 1
	// calls (no llama_encode). Checked with a bpftrace count of uprobe
	// llama_decode: 33-token prompt, N=8 → 8; N=1 → 1; batch 4, N=5 → 13;
	// batch 3, N=4 → 14; 1-token prompt, N=3 → 3; --only-eog N=6 → 6;
	// --seed 42 N=4 → 4 (testkit/llmtest's TestDriverPredicts... reruns these).
	// An end-of-generation token changes none of this: it is decoded
	// like any other (verified with --only-eog).
	const promptBatches = Math.ceil(prompt.length / batch);
	const evalOpts = {temperature, yieldEogToken: true};
	if (seed !== undefined) evalOpts.seed = seed;
	if (opts["only-eog"]) {
		// TokenBias ignores biases on end-of-generation tokens, so the
		// others are all forbidden instead.
		const vocab = model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length ?? 0;
		if (vocab === 0 || model.tokens.eos == null) fail("--only-eog: the model has no vocabulary with an end-of-sequence token");
		evalOpts.tokenBias = TokenBias.for(model).set(Array.from({length: vocab}, (_, i) => i), "never");
	}
	const tokens = [];
	let generated = 0, eog = 0, tFirst = 0, tLast = 0;
	const tEval = performance.now();
	for await (const token of sequence.evaluate(prompt, evalOpts)) {
		generated++;
		tokens.push(token);
		if (model.isEogToken(token)) eog++;
		tLast = performance.now();
		if (generated === 1) tFirst = tLast;
		if (generated >= n) break;
	}
	const evalMs = tLast - tEval;
	const report = {
		pid: process.pid,
		model: resolve(opts.model),
		load_ms: Math.round(loadMs),
		prompt_tokens: prompt.length,
		batch_size: batch,
		prompt_batches: promptBatches,
		generated,
		eog_tokens: eog,
		tokens,
		temperature,
		seed: seed ?? null,
		decode_calls_expected: promptBatches + generated - 1,
		eval_ms: Math.round(evalMs),
		prompt_ms: Math.round(tFirst - tEval),
		// Decode speed: tokens after the first, over the time they took.
		tokens_per_s: generated > 1 ? (generated - 1) / ((tLast - tFirst) / 1000) : generated / (evalMs / 1000),
		threads,
		libs: loadedLibs(),
	};
	// The older releases setup.sh installs under versions/ (3.3.0, 3.6.0,
	// 3.10.0) free a context on a libuv worker thread that also drops the
	// context's reference to the model (AddonContextUnloadContextWorker::
	// Execute calls AddonContext::dispose, which calls model->Unref(): a
	// Node-API call off the JS thread). It races V8's young-generation GC
	// on the main thread, which then aborts on a corrupt weak handle
	// ("Check failed: Heap::InFromPage", in GlobalHandles::
	// ProcessWeakYoungObjects; SIGILL): on this VM about 1 run in 60 to
	// 400 of 3.3.0, always between the last token and the end of the
	// context's dispose. 3.22.1 disposes on the JS thread. A driver's run
	// needs no dispose, so with those releases it writes its report and
	// exits, and the kernel unmaps the model.
	const older = opts["llama-version"] !== undefined;
	if (!older) {
		await context.dispose();
		await model.dispose();
	}
	if (opts.json) {
		process.stdout.write(JSON.stringify(report) + "\n");
	} else {
		const r = report, dirs = [...new Set(r.libs.map(dirname))];
		process.stdout.write(`pid ${r.pid} ${r.model}: loaded in ${r.load_ms} ms; prompt ${r.prompt_tokens} tokens in ${r.prompt_batches} batch(es) of up to ${r.batch_size}; ` +
			`generated ${r.generated} tokens (${r.eog_tokens} end-of-generation) in ${r.eval_ms} ms, ${r.tokens_per_s.toFixed(1)} tok/s after the first; ` +
			`${r.decode_calls_expected} llama_decode calls; ${r.threads} threads; libs ${r.libs.map((l) => basename(l)).join(", ")} in ${dirs.join(", ")}\n`);
	}
	// Writes to a pipe or a file are synchronous on Linux: nothing is
	// lost to the exit.
	if (older) process.exit(0);
} catch (e) {
	fail(String(e && e.message ? e.message : e).split("\n")[0]);
}
