# iocorr — see README.md. Every target works on a fresh Debian 12 machine
# as root: `make demo` runs `setup-demo` first (what the demo needs, a few
# minutes), `make test` and `make bench` run `setup` (everything the tests
# need: toolchains, older llama.cpp releases, llama.cpp built from source).

GO        ?= go
BIN       := bin/iocorr
VERSION   := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.stamped=$(VERSION)
DEMO_DIR  ?= demo
DEMO_TOKENS ?= 16
SETUP_OK  := .setup-done
SETUP_DEMO_OK := .setup-demo-done

.PHONY: help build man release version test lint arm64 cross generate setup setup-demo demo bench bench-go fuzz clean FORCE

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build bin/iocorr (no clang needed: the BPF objects are committed)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/iocorr

# The manual pages: iocorr.1 and iocorr-COMMAND.1, what `iocorr help
# COMMAND` prints, in roff, written by the binary from the flags each
# command parses.
MAN_DIR := bin/man

man: build ## write the manual pages (roff: iocorr help COMMAND's pages) to bin/man/
	rm -rf $(MAN_DIR)
	$(BIN) help --man $(MAN_DIR)

# A release: for each of RELEASE_ARCHS a static (CGO_ENABLED=0: DuckDB's
# cgo is the tests' only), stripped binary, a tarball of it with the README
# and the manual pages (man/), and SHA256SUMS of them all, in dist/. scripts/oldkernel.sh boots these
# very binaries in Debian 12's kernel (x86-64 and arm64).
DIST          := dist
RELEASE_ARCHS := amd64 arm64
RELEASE       := $(DIST)/iocorr-$(VERSION)-linux

# dist/ holds one release, the current: the artifacts of other versions
# are removed rather than listed, so that SHA256SUMS names every file there
# and `sha256sum -c SHA256SUMS` or an upload of dist/* ships one version
# (an older one is rebuilt from its commit, `make release` there).
release: $(foreach a,$(RELEASE_ARCHS),$(RELEASE)-$(a).tar.gz) ## static, stripped linux/amd64 and linux/arm64 binaries, tarballs and SHA256SUMS in dist/
	find $(DIST) -maxdepth 1 -name 'iocorr-*' ! -name '$(notdir $(RELEASE))-*' -print -delete
	cd $(DIST) && sha256sum $(foreach a,$(RELEASE_ARCHS),$(notdir $(RELEASE))-$(a) $(notdir $(RELEASE))-$(a).tar.gz) >SHA256SUMS
	@ls -l $(DIST)

# The binary is rebuilt each time (go's cache makes that quick), so that
# it never lags the source.
$(RELEASE_ARCHS:%=$(RELEASE)-%): $(RELEASE)-%: FORCE
	@mkdir -p $(DIST)
	@! $(GO) list -deps ./cmd/iocorr | grep duckdb || { echo "make release: cmd/iocorr links DuckDB (its cgo is the tests' only)" >&2; exit 1; }
	CGO_ENABLED=0 GOOS=linux GOARCH=$* $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $@ ./cmd/iocorr

$(RELEASE_ARCHS:%=$(RELEASE)-%.tar.gz): $(RELEASE)-%.tar.gz: $(RELEASE)-% man
	rm -rf $(DIST)/stage-$* && mkdir -p $(DIST)/stage-$*/$(notdir $<)
	cp $< $(DIST)/stage-$*/$(notdir $<)/iocorr && cp README.md $(DIST)/stage-$*/$(notdir $<)/
	cp -R $(MAN_DIR) $(DIST)/stage-$*/$(notdir $<)/man
	tar -C $(DIST)/stage-$* --owner=0 --group=0 -czf $@ $(notdir $<)
	rm -rf $(DIST)/stage-$*

version: ## print the version the binaries are built as
	@echo $(VERSION)

FORCE:

setup-demo: $(SETUP_DEMO_OK) ## install what the build and the demo need

$(SETUP_DEMO_OK): testdata/llm/package-lock.json testdata/llm/setup.sh scripts/setup-demo.sh go.sum
	./scripts/setup-demo.sh
	@touch $@

setup: $(SETUP_OK) ## install what the tests and the benchmarks need too

$(SETUP_OK): $(SETUP_DEMO_OK) $(wildcard testdata/llm/versions/*/package-lock.json) testdata/llm/vulkan/package-lock.json scripts/setup.sh scripts/build-llama.sh
	./scripts/setup.sh
	@touch $@

lint: ## gofmt, go vet and staticcheck (pinned in go.mod's tool block) over every package
	@unformatted=$$("$$($(GO) env GOROOT)/bin/gofmt" -l $$(git ls-files '*.go' | grep -v '_bpfel\.go$$')); \
	if [ -n "$$unformatted" ]; then echo "gofmt -w these files:" $$unformatted >&2; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

# Packages whose tests need no BPF, no llama.cpp and no host binary: they run
# on arm64 under qemu-user (bpf, ingest and the recorder need the kernel's
# bpf(2), which qemu-user does not emulate; output's tests need DuckDB's cgo).
# gguf's test that runs the synthesized models in llama.cpp is skipped: the
# llama.cpp here is x86-64's. The end-to-end tests of these packages that
# record (stats', perfetto's) skip there: qemu-user has no bpf(2), and
# `make test` runs them natively.
ARM64_SKIP  := TestSynthModelsRunInLlamaCpp
ARM64_TESTS := ./event ./wire ./ingest ./gguf ./ggml ./rundir ./internal/units ./internal/atomicfile ./internal/procmaps ./internal/elfinfo ./stats ./sweep ./perfetto

# The packages that build on any OS, their tests included: the ingest, the
# read side, the pure internal packages and the test kit their tests use.
# A test that records (BPF, the page cache, /proc) is in a file tagged
# linux; internal/layers' test holds this list to its read side. The CLI's
# test binary, whose tests ingest, query and report runs written without a
# tracer (testkit/runtest, testkit/storetest), is linked for both too.
CROSS_PKGS := ./wire ./ingest ./correlate ./pipeline ./event ./gguf ./ggml ./rundir ./store \
	./stats ./perfetto ./sweep ./diff ./predict ./output ./report ./dataset ./cmd/iocorr \
	./internal/kernel ./internal/units ./internal/atomicfile ./internal/procmaps \
	./internal/elfinfo ./internal/extsort ./internal/varint ./internal/protowalk \
	./testkit/testenv ./testkit/llmtest ./testkit/spooltest ./testkit/storetest \
	./testkit/runtest ./testkit/perfettotest ./testkit/ducktest ./testkit/browsertest

cross: ## build iocorr for macOS (arm64) and Windows, and vet the packages that must build there with their tests: the read side (ingest, query, report, export, stats, diff) without the BPF loader; record, sweep, doctor, pin and prefetch say "Linux only" there
	GOOS=darwin GOARCH=arm64 $(GO) build -o /dev/null ./cmd/iocorr
	GOOS=windows GOARCH=amd64 $(GO) build -o /dev/null ./cmd/iocorr
	GOOS=darwin GOARCH=arm64 $(GO) vet $(CROSS_PKGS)
	GOOS=windows GOARCH=amd64 $(GO) vet $(CROSS_PKGS)
	GOOS=darwin GOARCH=arm64 $(GO) test -c -o /dev/null ./cmd/iocorr
	GOOS=windows GOARCH=amd64 $(GO) test -c -o /dev/null ./cmd/iocorr

arm64: ## cross-build for linux/arm64 (no clang: the arm64 BPF object is committed) and run the pure packages' tests under qemu-user
	GOARCH=arm64 $(GO) build ./...
	IOCORR_REQUIRE_BPF= IOCORR_REQUIRE_LLAMA= GOARCH=arm64 $(GO) test -count=1 -exec qemu-aarch64-static -skip '$(ARM64_SKIP)' $(ARM64_TESTS)

test: setup ## run every test, BPF and real llama.cpp included (as root)
	IOCORR_REQUIRE_BPF=1 IOCORR_REQUIRE_LLAMA=1 $(GO) test -p 1 -count=1 -timeout 40m ./...

generate: ## regenerate the BPF objects with the toolchain in bpf/TOOLCHAIN (FORCE=1: any)
	FORCE=$(FORCE) $(GO) generate ./bpf

BENCH_SHORT ?=
BENCH_OUT   ?= bench.json

bench: setup build ## overhead, scale, sweep, recorder, store and fidelity table (BENCH_SHORT=1: quick; BENCH_SECTION=sweep,...: only those; BENCH_ARM=a,c: only those overhead arms; BENCH_A3B_RUN=DIR: a3b on a recorded run; BENCH_PREFETCH_CASE=slow,...: only those prefetch cases)
	$(GO) build -trimpath -o bin/iocorr-bench ./cmd/iocorr-bench
	./bin/iocorr-bench $(if $(BENCH_SHORT),--short) $(if $(BENCH_SECTION),--section $(BENCH_SECTION)) $(if $(BENCH_ARM),--arm $(BENCH_ARM)) $(if $(BENCH_A3B_RUN),--a3b-run $(BENCH_A3B_RUN)) $(if $(BENCH_PREFETCH_CASE),--prefetch-case '$(BENCH_PREFETCH_CASE)') -o $(BENCH_OUT)

bench-go: setup ## the Go micro-benchmarks of every package
	$(GO) test -run '^$$' -bench . -benchtime 3x -timeout 60m ./...

fuzz: ## fuzz the GGUF parser for FUZZTIME (default 10m)
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime $${FUZZTIME:-10m} ./gguf

demo: setup-demo build ## synthesize a model, record llama.cpp under memory pressure, query it
	./scripts/demo.sh $(DEMO_DIR) $(DEMO_TOKENS)

clean:
	rm -rf bin $(DIST) $(DEMO_DIR) $(SETUP_OK) $(SETUP_DEMO_OK) .testmodels
