# sandbox-fence — admission policies and a webhook that make the cluster
# enforce what agent-sandbox hosts fence client-side. `make` lists targets.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
MAKEFLAGS += --warn-undefined-variables --no-builtin-rules
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
.SUFFIXES:

GO ?= go
BIN := $(CURDIR)/bin
DEV := $(CURDIR)/.dev
# Control-plane binaries built from the Go module proxy by hack/tools.
KUBECTL := $(BIN)/kubectl
export PATH := $(BIN):$(PATH)

IMG ?= sandbox-fence/webhook:dev
IMAGE_TAR := $(BIN)/webhook-image.tar
KIND_CLUSTER ?= sandbox-fence
E2E_TIMEOUT ?= 25m
KIND_E2E_TIMEOUT ?= 40m
SOAK_TIMEOUT ?= 15m
FUZZTIME ?= 1h

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} \
	  /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Test

.PHONY: test
test: test-unit test-cilium e2e ## Everything: unit, policy, Cilium property and end-to-end tests (the CI command).

.PHONY: test-unit
test-unit: ## Unit and offline policy tests: go test ./... (no cluster needed).
	$(GO) test -count=1 ./...

# CILIUMPROOF_BODIES sets the size of the generated run (default 20000).
.PHONY: test-cilium
test-cilium: ## What admitted egress policies mean to Cilium itself: the property test of e2e/ciliumproof (its own module).
	cd e2e/ciliumproof && $(GO) test -count=1 -timeout 20m ./...

.PHONY: fuzz-cilium
fuzz-cilium: ## Long run of the Cilium property test as a Go fuzz target (FUZZTIME, default 1h).
	cd e2e/ciliumproof && $(GO) test -run '^$$' -fuzz FuzzAdmittedBodies -fuzztime $(FUZZTIME) .

.PHONY: lint
lint: ## gofmt (fails on any unformatted file) and go vet, all build tags.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/...
	$(GO) vet -tags soak ./e2e/soak/...
	cd e2e/ciliumproof && $(GO) vet ./...

.PHONY: verify
verify: lint ## Lint, then check that generated and rendered things are current.
	$(KUBECTL) kustomize config/vap >/dev/null
	$(KUBECTL) kustomize config/default >/dev/null

##@ Local control plane

.PHONY: tools
tools: ## Build etcd, kube-apiserver, kube-controller-manager and kubectl into bin/ (cached).
	hack/tools/build.sh

.PHONY: e2e
e2e: tools ## End-to-end suite on a local control plane (E2E_PROVIDER=kubeconfig|kind: elsewhere; docs/e2e.md).
	$(GO) test -count=1 -tags e2e -timeout $(E2E_TIMEOUT) ./e2e/...

.PHONY: dev-up
dev-up: tools ## Start the local control plane with the bundle installed; writes .dev/kubeconfig.
	$(GO) run ./e2e/cmd/devcluster up

.PHONY: dev-down
dev-down: ## Stop the local control plane started by dev-up.
	$(GO) run ./e2e/cmd/devcluster down

.PHONY: run
run: tools ## Start everything, print what to try, tear down on Ctrl-C.
	$(GO) run ./e2e/cmd/devcluster run

.PHONY: demo
demo: tools ## Scripted walk-through: each step and its verdict; fails on a wrong verdict.
	$(GO) run ./e2e/cmd/devcluster demo

##@ Benchmarks

# Benches write their tables and charts into the ignored bin/bench; PUBLISH=1
# writes them into docs/bench, which BENCHMARKS.md quotes.
PUBLISH ?=
BENCH_OUT := $(if $(filter 1,$(PUBLISH)),docs/bench,$(BIN)/bench)
BENCH_FLAGS ?= -rounds 5 -window 2s
PEERS_BENCH_FLAGS ?= -rounds 3 -window 1500ms -warmup 300ms -apiserver-profile $(BIN)/bench/profiles
PEERS_TIMEOUT ?= 15m

.PHONY: bench
bench: tools ## What the fence costs a cluster: interleaved configurations on a local control plane, then the webhook server alone (BENCHMARKS.md; PUBLISH=1 writes docs/bench).
	$(GO) run ./e2e/bench $(BENCH_FLAGS) -out $(BENCH_OUT)
	$(GO) run ./hack/loadgen -out $(BENCH_OUT)

.PHONY: peers
peers: ## Build Kyverno and Gatekeeper from the Go module proxy into bin/peers (cached; slow when cold, never part of make test).
	hack/peers/build.sh

.PHONY: bench-peers
bench-peers: tools peers ## Sandbox-fence against Kyverno and Gatekeeper: the e2e cases per enforcer, then the interleaved bench with both (bounded by PEERS_TIMEOUT; PUBLISH=1 writes docs/bench).
	@echo "load before: $$(cut -d' ' -f1-3 /proc/loadavg)"
	timeout --foreground $(PEERS_TIMEOUT) bash -c '$(GO) run ./e2e/bench/cases -out $(BENCH_OUT)/peers && $(GO) run ./e2e/bench -peers $(PEERS_BENCH_FLAGS) -out $(BENCH_OUT)/peers'
	@echo "load after: $$(cut -d' ' -f1-3 /proc/loadavg)"

.PHONY: bench-micro
bench-micro: ## Hot-path micro benchmarks: handler, validators, patch builder, hash, VAPs in process (ns/op, allocs/op, CEL cost).
	@echo "load before: $$(cut -d' ' -f1-3 /proc/loadavg)"
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./pkg/fence/ ./internal/admit/ ./internal/webhook/ ./policies/
	@echo "load after: $$(cut -d' ' -f1-3 /proc/loadavg)"

##@ Reliability

.PHONY: soak
soak: tools ## Reliability run on a local control plane (about 7 min, bounded by 15): load, faults, hostile input; prints the figure table.
	status=0; SOAK_FIGURES=$(BIN)/soak-figures.md $(GO) test -count=1 -v -tags soak -timeout $(SOAK_TIMEOUT) ./e2e/soak/ || status=$$?; \
	  echo; cat $(BIN)/soak-figures.md 2>/dev/null || true; exit $$status

##@ Build

.PHONY: build
build: ## Build the webhook binary into bin/.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/webhook ./cmd/webhook

.PHONY: image
image: ## Build the webhook OCI image tarball (no Docker daemon needed) into bin/.
	$(GO) run ./hack/image -tag $(IMG) -out $(IMAGE_TAR)

.PHONY: kind-load
kind-load: image ## Load the webhook image into the kind cluster $(KIND_CLUSTER).
	kind load image-archive $(IMAGE_TAR) --name $(KIND_CLUSTER)

.PHONY: e2e-kind
e2e-kind: tools image ## kind cluster from kind.yaml (3 nodes), config/default deployed, the suite with the in-cluster cases; starts its own engine when none answers (docs/e2e.md).
	E2E_IMAGE_ARCHIVE=$(IMAGE_TAR) KIND_CLUSTER=$(KIND_CLUSTER) E2E_TIMEOUT=$(KIND_E2E_TIMEOUT) hack/kind/e2e.sh

.PHONY: kind-node-image
kind-node-image: tools ## The offline kind node image for the pinned Kubernetes, from Debian packages and Go modules into bin/ (cached).
	hack/kind/e2e.sh node-image

.PHONY: clean
clean: ## Remove build outputs (keeps the cached control-plane binaries).
	rm -f $(BIN)/webhook $(IMAGE_TAR)
