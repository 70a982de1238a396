# sandbox-fence — admission policies and a webhook that make the cluster
# enforce what agent-sandbox hosts fence client-side. `make` lists targets.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
MAKEFLAGS += --warn-undefined-variables --no-builtin-rules
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
.SUFFIXES:

GO ?= go
# One build configuration for every go command make runs, the one the
# control plane, the kind node image and the webhook image are built with
# (static, no build paths): a package compiled for the unit tests is then the
# same build action as the one kube-apiserver or the image needs, and a cold
# machine compiles it once. hack/tools/modules_test.go checks this export and
# keeps the modules on the versions that make it true. Nothing here needs cgo
# (no -race).
export CGO_ENABLED := 0
GOFLAGS ?=
export GOFLAGS := $(strip $(filter-out -trimpath,$(GOFLAGS)) -trimpath)
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
# make e2e-cilium: a Cilium image the nodes pull instead of one built from the module (hack/kind/cilium.sh).
CILIUM_IMAGE ?=
AGENT_SANDBOX_VERSION := v1.0.1
# Tools built by go install <package>@<version> from the Go module proxy,
# each with its own go.mod and go.sum (docs/modules.md).
CONTROLLER_TOOLS_VERSION := v0.23.0
PROMETHEUS_VERSION := v0.316.0
KREW_VERSION := v0.4.3
COSIGN_VERSION := v3.1.3
SOAK_TIMEOUT ?= 15m
CILIUM_FUZZ_TIME ?= 1h
# The Kubernetes release the suite's control plane runs: the pinned one
# (hack/tools/kubernetes) unless set, e.g. make e2e KUBERNETES_VERSION=v1.33.13
# (built into bin/k8s/<version>/ by hack/tools/build.sh, docs/testing.md).
KUBERNETES_VERSION ?=
export KUBERNETES_VERSION
# The oldest release CI runs the suite on: internal/kubeversion.OldestTested.
KUBERNETES_OLDEST := $(shell sed -n 's/^const OldestTested = "\(v[0-9.]*\)"$$/\1/p' internal/kubeversion/kubeversion.go)
FUZZ_TIME ?= 15s
# The e2e provider (docs/e2e.md); the skip allowlist names its run e2e
# (local) or e2e-<provider>.
E2E_PROVIDER ?= local
export E2E_PROVIDER
E2E_RUN = $(if $(filter local,$(E2E_PROVIDER)),e2e,e2e-$(E2E_PROVIDER))

# The repository's modules (docs/modules.md): the product (the root: api/,
# internal/, cmd/, policies/, config/; and pkg/fence, the host library, a
# module of its own) and the harness, e2e/ and hack/, each a module of its
# own so that a host importing pkg/fence takes only client-go and
# apimachinery (hack/consumer checks it). A go command for a
# harness package runs in its module's directory (go -C).
HARNESS := e2e hack

# go test -json through hack/testreport: prints what go test prints, lists
# every skipped test, and fails on a skip that hack/testreport/allowed-skips.yaml
# does not list for the run, or on a listed one that no longer skips. After
# the run it lists the tests from the source of the same packages under the
# same -tags (-run and -skip narrow what is expected) and fails on a listed
# test that never ran, unless that file lists it as notRun.
# $(1): the run's name in that file; $(2): go test's arguments; $(3): the
# modules' directories to run them in (default: the root). Each module's go
# test runs even when an earlier one failed, and any failure fails the step.
# The raw events stay in bin/<run>[-<version>].json, the failed tests in
# .failures.
gotest = { s=0; for m in $(or $(3),.); do $(GO) -C $$m test -json $(2) || s=$$?; done; exit $$s; } 2>&1 | \
  $(BIN)/testreport -run $(1) -allow $(CURDIR)/hack/testreport/allowed-skips.yaml \
  -json $(BIN)/$(1)$(KUBERNETES_VERSION:%=-%).json -failures $(BIN)/$(1)$(KUBERNETES_VERSION:%=-%).failures \
  -go $(GO) -modules '$(or $(3),.)' -- $(2)

# Runs a harness program from the repository's root, where it expects to
# run: $(call harness,<module dir>,<package>) <args>. It is built into
# bin/harness/ first (go build's cache makes that cheap when nothing changed).
harness = $(GO) -C $(1) build -o $(BIN)/harness/$(notdir $(2)) $(2) && $(BIN)/harness/$(notdir $(2))

##@ General

.PHONY: help
help: ## Show this help.
	@awk -v kind_cluster='$(KIND_CLUSTER)' 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} \
	  /^[a-zA-Z_0-9-]+:.*?##/ { gsub(/\$$\(KIND_CLUSTER\)/, kind_cluster, $$2); printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Test

.PHONY: test
test: test-env test-unit test-cilium fuzz e2e ## Everything: unit, policy, Cilium property, fuzz and end-to-end tests (the CI command).

.PHONY: test-env
test-env: ## Refuse what would make make test check less than everything.
	@if [ -n "$${E2E_ALLOW_PARTIAL:-}" ]; then \
	  echo "make test: E2E_ALLOW_PARTIAL=$$E2E_ALLOW_PARTIAL is refused: make test checks the whole bundle (unset it; docs/e2e.md)" >&2; exit 2; fi
	@case "$${E2E_PROVIDER:-local}" in local) ;; *) \
	  echo "make test: E2E_PROVIDER=$$E2E_PROVIDER is refused: make test runs the local control plane (use make e2e for another provider; docs/e2e.md)" >&2; exit 2;; esac
	@case "$${E2E_ENFORCER:-sandbox-fence}" in sandbox-fence) ;; *) \
	  echo "make test: E2E_ENFORCER=$$E2E_ENFORCER is refused: make test checks the shipped bundle (make bench-peers runs the peers; docs/e2e.md)" >&2; exit 2;; esac

.PHONY: testreport
testreport: ## Build hack/testreport, which checks every go test run for skips and for listed tests that never ran.
	@mkdir -p $(BIN)
	@$(GO) -C hack build -o $(BIN)/testreport ./testreport

.PHONY: upstream-crds
upstream-crds: ## Download the Cilium module whose CiliumNetworkPolicy CRD the tests check against (the version pinned in e2e/go.mod; once, into the Go module cache).
	cd e2e && $(GO) mod download github.com/cilium/cilium

# -timeout 30m: with an empty build cache TestReleaseIsReproducible
# (hack/release) cross-compiles the webhook for arm64 and builds the Helm
# chart module while every other package compiles beside it; on this 2-core
# machine that outlasted go test's default 10 minutes (2026-12-01).
.PHONY: test-unit
# tools: the tests render config/ with bin/kubectl's kustomize
# (internal/testing.Kustomize); promtool runs the alerts' rule tests; krew
# installs kubectl fence from a release (hack/release).
test-unit: testreport upstream-crds tools promtool krew cosign ## Unit and offline policy tests: go test ./... in the product's modules (the root, pkg/fence) and the harness's (no cluster needed).
	$(call gotest,test-unit,-count=1 -timeout 30m ./...,. pkg/fence $(HARNESS))

.PHONY: fuzz
fuzz: ## Every fuzz target for FUZZ_TIME (15s) each, from its committed corpus (testdata/fuzz/).
	hack/fuzz.sh $(FUZZ_TIME)

# CILIUMPROOF_BODIES sets the size of the generated run (default 5000; the
# weekly workflow runs 20000).
# ciliumreach is compiled first, outside go test's -timeout: the tests only
# link it then, and a cold compile of Cilium's repository takes minutes.
.PHONY: test-cilium
test-cilium: testreport upstream-crds ## What a sandbox reaches under admitted egress policies, by Cilium's own code: the property test of e2e/ciliumproof (build tag cilium) and its policy-repository program e2e/ciliumproof/reach (a module of its own).
	$(GO) -C e2e/ciliumproof/reach build -o /dev/null .
	$(call gotest,test-cilium,-count=1 -timeout 20m -tags cilium ./...,e2e/ciliumproof e2e/ciliumproof/reach)

.PHONY: fuzz-cilium
fuzz-cilium: ## Long run of the Cilium property test as a Go fuzz target (CILIUM_FUZZ_TIME, default 1h).
	cd e2e/ciliumproof && $(GO) test -tags cilium -run '^$$' -fuzz FuzzAdmittedBodies -fuzztime $(CILIUM_FUZZ_TIME) .

# Not part of make test: it runs the suites once per rule (docs/testing.md);
# a scheduled workflow runs it weekly (.github/workflows/weekly.yml).
MUTANTS_FLAGS ?=
.PHONY: mutants
mutants: upstream-crds ## Mutation check: weaken each shipped rule in turn (policies, bindings, the webhook configuration, the webhook's checks and early branches) and fail on one no test catches; table in bin/mutants.md.
	$(call harness,hack,./mutants) -out $(BIN)/mutants.md $(MUTANTS_FLAGS)

# The sample for CI: the same commit draws the same mutants, the next commit
# others. Offline suites only, so a mutant they leave alive is reported, not
# failed (the weekly run takes it to the e2e suite).
MUTANTS_SAMPLE ?= 8
MUTANTS_SEED ?= $(shell git rev-parse HEAD 2>/dev/null || echo 0)
.PHONY: mutants-sample
mutants-sample: upstream-crds ## A bounded sample of make mutants: MUTANTS_SAMPLE (8) mutants drawn by MUTANTS_SEED (the commit), offline suites only; table in bin/mutants-sample.md.
	$(call harness,hack,./mutants) -sample $(MUTANTS_SAMPLE) -seed $(MUTANTS_SEED) -e2e off -out $(BIN)/mutants-sample.md

.PHONY: lint
lint: ## gofmt (fails on any unformatted file) and go vet, all build tags.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) -C pkg/fence vet ./...
	$(GO) -C e2e vet -tags e2e ./...
	$(GO) -C e2e vet -tags e2e,cilium ./...
	$(GO) -C e2e vet -tags soak ./soak/...
	$(GO) -C hack vet ./...
	$(GO) -C e2e/ciliumproof/reach vet ./...

# The modules make test builds (the peers' modules, hack/peers, only make
# peers builds: tidying them downloads Kyverno's and Gatekeeper's graphs).
TIDY_MODULES := . pkg/fence $(HARNESS) e2e/ciliumproof/reach hack/tools/kubernetes

# controller-gen's generators: FenceConfig's deep copy and CRD, from the
# markers on api/v1alpha1.
CONTROLLER_GEN_ARGS := object paths=./api/... crd:crdVersions=v1

.PHONY: controller-gen
controller-gen:
	@mkdir -p $(BIN)
	@GOBIN=$(BIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

.PHONY: generate
generate: controller-gen ## Regenerate FenceConfig's CRD (config/crd/bases) and deep copy (api/v1alpha1) from the markers on api/v1alpha1, with controller-gen (CONTROLLER_TOOLS_VERSION).
	$(BIN)/controller-gen $(CONTROLLER_GEN_ARGS) output:crd:dir=config/crd/bases

.PHONY: verify
# Every generator writes into a temporary directory, which is compared with
# the tree: an uncommitted edit that the generator would write passes, a hand
# edit of a generated file or a stale one fails. The generated files: the
# CRD and deep copy (make generate), the chart (make chart; TestChartIsCurrent
# in make test-unit holds it too), the pod-template hash vectors (go generate
# in pkg/fence, from Node).
verify: lint tools controller-gen ## Lint, then fail on go.mod/go.sum that are not tidy, on generated files (CRD, deep copy, chart, hash vectors) that differ from what their generators write, or a kustomization that does not render.
	@for m in $(TIDY_MODULES); do \
	  (cd $$m && GOWORK=off $(GO) mod tidy -diff >/dev/null) || { echo "make verify: $$m: go.mod or go.sum is not tidy (go mod tidy -diff above; run go mod tidy in $$m)" >&2; exit 1; }; done
	@gen=$$(mktemp -d) && trap 'rm -rf "$$gen"' EXIT && \
	  $(BIN)/controller-gen $(CONTROLLER_GEN_ARGS) output:crd:dir=$$gen/crd output:object:dir=$$gen/api && \
	  { diff -ru config/crd/bases $$gen/crd && diff -u api/v1alpha1/zz_generated.deepcopy.go $$gen/api/zz_generated.deepcopy.go; } || { \
	  echo "make verify: the generated files above differ from what make generate writes: run make generate and commit the result (edit the markers on api/v1alpha1, never the output)" >&2; exit 1; }
	@gen=$$(mktemp -d) && trap 'rm -rf "$$gen"' EXIT && \
	  (cd hack/chart && $(GO) run . -root ../.. -out $$gen/chart) >/dev/null && diff -ru charts/sandbox-fence $$gen/chart || { \
	  echo "make verify: charts/sandbox-fence differs from what make chart writes from config/: run make chart and commit the result" >&2; exit 1; }
	@node pkg/fence/testdata/gen_podtemplatehash_vectors.js | diff -u pkg/fence/testdata/podtemplatehash_vectors.jsonl - || { \
	  echo "make verify: pkg/fence/testdata/podtemplatehash_vectors.jsonl differs from what Node computes: run go -C pkg/fence generate . and commit the result" >&2; exit 1; }
	$(KUBECTL) kustomize config/vap >/dev/null
	$(KUBECTL) kustomize config/default >/dev/null

##@ Local control plane

.PHONY: tools
tools: ## Build etcd, kube-apiserver, kube-controller-manager and kubectl into bin/ (KUBERNETES_VERSION set: that release's kube-apiserver and kube-controller-manager into bin/k8s/<version>/; cached).
	hack/tools/build.sh

.PHONY: e2e
e2e: tools testreport upstream-crds ## End-to-end suite on a local control plane (KUBERNETES_VERSION=vX.Y.Z: that release; E2E_PROVIDER=kubeconfig|kind: elsewhere; docs/e2e.md).
	$(call gotest,$(E2E_RUN),-count=1 -tags e2e -timeout $(E2E_TIMEOUT) ./...,e2e)

.PHONY: e2e-oldest
e2e-oldest: ## The end-to-end suite on the oldest Kubernetes release CI tests (internal/kubeversion.OldestTested: the first without kube-apiserver's CEL race).
	$(MAKE) e2e KUBERNETES_VERSION=$(KUBERNETES_OLDEST)

.PHONY: dev-up
dev-up: tools ## Start the local control plane with the bundle installed; writes .dev/kubeconfig.
	$(call harness,e2e,./cmd/devcluster) up

.PHONY: dev-down
dev-down: ## Stop the local control plane started by dev-up.
	$(call harness,e2e,./cmd/devcluster) down

.PHONY: run
run: tools ## Start everything, print what to try, tear down on Ctrl-C.
	$(call harness,e2e,./cmd/devcluster) run

##@ Benchmarks

# Benches write their tables and charts into the ignored bin/bench; PUBLISH=1
# writes them into docs/bench, which BENCHMARKS.md quotes.
PUBLISH ?=
BENCH_OUT := $(if $(filter 1,$(PUBLISH)),$(CURDIR)/docs/bench,$(BIN)/bench)
BENCH_FLAGS ?= -rounds 5 -window 2s
# The owner counts the scale run measures the webhook against (e2e/bench/scale.go).
SCALE_OWNERS ?= 100,1000,10000,100000
PEERS_BENCH_FLAGS ?= -rounds 10 -aa -open 0.5 -window 1s -warmup 300ms -apiserver-profile $(BIN)/bench/profiles
PEERS_TIMEOUT ?= 35m

.PHONY: bench
bench: tools ## What the fence costs a cluster: interleaved configurations on a local control plane, then the webhook against SCALE_OWNERS owners (BENCHMARKS.md; PUBLISH=1 writes docs/bench).
	$(call harness,e2e,./bench) $(BENCH_FLAGS) -out $(BENCH_OUT)
	$(call harness,e2e,./bench) -scale $(SCALE_OWNERS) -window 5s -warmup 1s -out $(BENCH_OUT)

.PHONY: peers
peers: ## Build Kyverno and Gatekeeper from the Go module proxy into bin/peers (cached; slow when cold, never part of make test).
	hack/peers/build.sh

.PHONY: bench-peers
bench-peers: tools peers ## Sandbox-fence against Kyverno and Gatekeeper: the e2e cases per enforcer, then the interleaved bench with both (bounded by PEERS_TIMEOUT; PUBLISH=1 writes docs/bench).
	@echo "load before: $$(cut -d' ' -f1-3 /proc/loadavg)"
	$(GO) -C e2e build -o $(BIN)/harness/ ./bench ./bench/cases
	timeout --foreground $(PEERS_TIMEOUT) bash -c '$(BIN)/harness/cases -out $(BENCH_OUT)/peers && $(BIN)/harness/bench -peers $(PEERS_BENCH_FLAGS) -out $(BENCH_OUT)/peers'
	@echo "load after: $$(cut -d' ' -f1-3 /proc/loadavg)"

.PHONY: bench-micro
bench-micro: ## Hot-path micro benchmarks: handler, validators, patch builder, hash, VAPs in process (ns/op, allocs/op, CEL cost).
	@echo "load before: $$(cut -d' ' -f1-3 /proc/loadavg)"
	$(GO) -C pkg/fence test -run '^$$' -bench . -benchmem -count 1 .
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./internal/admit/ ./internal/webhook/ ./policies/
	@echo "load after: $$(cut -d' ' -f1-3 /proc/loadavg)"

##@ Reliability

.PHONY: soak
soak: tools ## Reliability run on a local control plane (about 5 min, bounded by 15): load, faults, hostile input; prints the figure table.
	status=0; SOAK_FIGURES=$(BIN)/soak-figures.md $(GO) -C e2e test -count=1 -v -tags soak -timeout $(SOAK_TIMEOUT) ./soak/ || status=$$?; \
	  echo; cat $(BIN)/soak-figures.md 2>/dev/null || true; exit $$status

##@ Build

.PHONY: build
build: ## Build the webhook binary into bin/.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o $(BIN)/webhook ./cmd/webhook

.PHONY: image
image: ## Build the webhook OCI image tarball (no Docker daemon needed) into bin/.
	$(call harness,hack,./image) -tag $(IMG) -out $(IMAGE_TAR)

.PHONY: image-kubectl-fence
image-kubectl-fence: ## Build kubectl fence's OCI image tarball (the policy reports' CronJob, config/components/policy-reports) into bin/.
	$(call harness,hack,./image) -pkg ./cmd/kubectl-fence -entrypoint /kubectl-fence -title "kubectl fence" \
	  -tag sandbox-fence/kubectl-fence:dev -out $(BIN)/kubectl-fence-image.tar

# make release VERSION=vX.Y.Z: dist/ (docs/install.md, "Install from a release").
VERSION ?=
# Where the release's image indexes are pushed: the webhook's, which
# install.yaml pins by digest, and kubectl fence's, which policyreports.yaml
# and the chart pin.
RELEASE_IMAGE ?= ghcr.io/sandbox-fence/sandbox-fence-webhook
RELEASE_REPORTS_IMAGE ?= ghcr.io/sandbox-fence/kubectl-fence

.PHONY: release
release: ## dist/: install.yaml (image pinned by digest), the amd64+arm64 OCI indexes of the webhook and kubectl fence, policyreports.yaml, the Helm chart, an SPDX SBOM, kubectl fence archives and their krew manifest, SHA256SUMS, signed with COSIGN_KEY when set (VERSION=vX.Y.Z, RELEASE_IMAGE, RELEASE_REPORTS_IMAGE).
	@if [ -z "$(VERSION)" ]; then echo "make release: set VERSION=vX.Y.Z (the tag being released)" >&2; exit 2; fi
	$(call harness,hack,./release) -version $(VERSION) -image $(RELEASE_IMAGE) -reports-image $(RELEASE_REPORTS_IMAGE) -out $(DIST)
	$(if $(COSIGN_KEY),$(MAKE) release-sign)

# A local release's signature: SHA256SUMS, which names every file of the
# release (the image index's tarball, install.yaml that pins the index's
# digest, the SBOM, the provenance), signed with a cosign key pair into a
# Sigstore bundle, without a transparency log (nothing leaves the machine).
# The release workflow signs keyless instead (release.yml). Verify either
# as docs/install.md says; TestCosignVerifiesASignedRelease does.
COSIGN_KEY ?=
DIST ?= dist
.PHONY: release-sign
release-sign: cosign ## Sign DIST/SHA256SUMS (dist/) with COSIGN_KEY (cosign generate-key-pair; its password in COSIGN_PASSWORD) into DIST/SHA256SUMS.sigstore.json.
	@if [ -z "$(COSIGN_KEY)" ]; then echo "make release-sign: set COSIGN_KEY=<cosign.key> (cosign generate-key-pair writes one)" >&2; exit 2; fi
	$(BIN)/cosign sign-blob --yes --key $(COSIGN_KEY) --use-signing-config=false --tlog-upload=false \
	  --bundle $(DIST)/SHA256SUMS.sigstore.json $(DIST)/SHA256SUMS

# bin/cosign: Sigstore's cosign, compiled from COSIGN_VERSION's module (no
# binary is downloaded); it signs a local release and the release test
# verifies with it.
.PHONY: cosign
cosign: ## Build Sigstore's cosign from the Go module proxy (COSIGN_VERSION) into bin/cosign.
	GOBIN=$(BIN) $(GO) install github.com/sigstore/cosign/v3/cmd/cosign@$(COSIGN_VERSION)

.PHONY: chart
chart: ## Regenerate charts/sandbox-fence from config/ (hack/chart; TestChartIsCurrent fails on a stale chart).
	cd hack/chart && $(GO) run . -root ../..

.PHONY: kind-load
kind-load: image image-kubectl-fence ## Load the webhook's and kubectl fence's images into the kind cluster $(KIND_CLUSTER).
	kind load image-archive $(IMAGE_TAR) --name $(KIND_CLUSTER)
	kind load image-archive $(BIN)/kubectl-fence-image.tar --name $(KIND_CLUSTER)

# bin/promtool: Prometheus' promtool, compiled from PROMETHEUS_VERSION's
# module (no binary is downloaded), without the service
# discovery plugins a rule test never uses (remove_all_sd; cold, it then
# compiled in 2 min 44 s here, docs/e2e.md). TestAlertsPassPromtoolsRuleTests
# runs the alerts' rule tests with it.
.PHONY: promtool
promtool: ## Build Prometheus' promtool from the Go module proxy (PROMETHEUS_VERSION) into bin/promtool.
	GOBIN=$(BIN) $(GO) install -tags remove_all_sd github.com/prometheus/prometheus/cmd/promtool@$(PROMETHEUS_VERSION)

# bin/krew: kubectl's plugin manager, compiled from KREW_VERSION's module
# (its client-go v11.0.0+incompatible stays in its own graph); the release
# test installs kubectl fence with it.
.PHONY: krew
krew: ## Build krew from the Go module proxy (KREW_VERSION) into bin/krew.
	GOBIN=$(BIN) $(GO) install sigs.k8s.io/krew/cmd/krew@$(KREW_VERSION)

# bin/helm: Helm's own CLI, compiled from the helm.sh/helm/v3 version
# the hack module pins (no binary is downloaded); the lifecycle case installs,
# upgrades and uninstalls the release's chart with it.
.PHONY: helm
helm: ## Build Helm's CLI from the Go module proxy (the version hack/go.mod pins) into bin/helm.
	@mkdir -p $(BIN)
	$(GO) -C hack build -o $(BIN)/helm helm.sh/helm/v3/cmd/helm

.PHONY: e2e-kind
e2e-kind: tools image helm testreport upstream-crds ## kind cluster from kind.yaml (3 nodes), config/default deployed, the suite with the in-cluster cases; starts its own engine when none answers (docs/e2e.md).
	E2E_IMAGE_ARCHIVE=$(IMAGE_TAR) KIND_CLUSTER=$(KIND_CLUSTER) E2E_TIMEOUT=$(KIND_E2E_TIMEOUT) hack/kind/e2e.sh

# The datapath suite: kind with Cilium as the CNI, built from the Go module
# by hack/kind/cilium.sh (CILIUM_IMAGE=<image>: that image, pulled), and
# e2e/datapath_test.go, which measures what sandbox pods reach and compares
# it with the contract and with ciliumreach's prediction (docs/e2e.md).
# agent-sandbox's controller (AGENT_SANDBOX_VERSION, built as its release's
# go.mod says, by go install) makes the pods from Sandboxes, and the cluster
# gets that release's own CRDs.
.PHONY: e2e-cilium
e2e-cilium: tools image helm testreport upstream-crds ## kind with Cilium from the Go module as the CNI; sandbox pods' reach measured on the wire against Cilium's prediction (docs/e2e.md).
	CILIUM_IMAGE=$(CILIUM_IMAGE) hack/kind/cilium.sh
	cd e2e && $(BIN)/harness/image -pkg ./cmd/netfixture -entrypoint /netfixture -user "" -title netfixture \
	  -tag sandbox-fence.local/netfixture:dev -out $(BIN)/netfixture-image.tar
	GOBIN=$(BIN) $(GO) install sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller@$(AGENT_SANDBOX_VERSION)
	SANDBOX_FENCE_UPSTREAM_CRDS=$$($(GO) mod download -json sigs.k8s.io/agent-sandbox@$(AGENT_SANDBOX_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p')/k8s/crds \
	  KIND_CNI=cilium E2E_TAGS=e2e,cilium E2E_REPORT=e2e-cilium E2E_GO_RUN='^TestDatapath' \
	  E2E_IMAGE_ARCHIVE=$(IMAGE_TAR) KIND_CLUSTER=$(KIND_CLUSTER) E2E_TIMEOUT=$(KIND_E2E_TIMEOUT) hack/kind/e2e.sh

# .ci/run starts it in the background after make lint verify (so make tools
# has built the pinned control plane) and waits for it before e2e-oldest.
.PHONY: ahead
ahead: ## Build ahead what make e2e-oldest and make e2e-kind need: the oldest tested control plane and the kind node image (both cached in bin/).
	$(MAKE) tools KUBERNETES_VERSION=$(KUBERNETES_OLDEST)
	$(MAKE) kind-node-image

.PHONY: kind-node-image
kind-node-image: tools ## The offline kind node image for the pinned Kubernetes, from Debian packages and Go modules into bin/ (cached).
	hack/kind/e2e.sh node-image

.PHONY: clean
clean: ## Remove build outputs (keeps the cached control-plane binaries).
	rm -f $(BIN)/webhook $(IMAGE_TAR)
