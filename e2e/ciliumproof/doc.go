// Package ciliumproof proves with Cilium's own code that every
// CiliumNetworkPolicy the shipped egress fence admits confines a sandbox to
// what contract §4.3 and §4.6 say: a differential property test of
// generated bodies (the host's body of contract §4.1, then mutations of every
// field of the CiliumNetworkPolicy schema) through the shipped policies,
// offline in the API server's own admission plugin (internal/vapeval), and
// through Cilium v1.20's CiliumNetworkPolicy.Parse, Rule.Sanitize, the policy
// entries the agent hands its repository, and pkg/fqdn/matchpattern.
//
// # Why a module of its own
//
// github.com/sandbox-fence/sandbox-fence is the product: hosts import
// pkg/fence, and nothing there may depend on Cilium, whose module graph is
// larger than the product's own. This directory is a nested module
// (github.com/sandbox-fence/sandbox-fence/e2e/ciliumproof) that requires
// github.com/cilium/cilium and reaches the product through
// `replace github.com/sandbox-fence/sandbox-fence => ../..`, so it always
// tests the working tree, never a released copy. `go test ./...` at the
// repository root does not enter it; `make test-cilium` runs it. Under the
// product's module path, it may import the product's internal packages
// (the Go "internal" rule goes by import path), which is how it runs the
// shipped policies with internal/vapeval. When the harness moves into a
// module under e2e/, this module stays nested in it and keeps Cilium out of
// both.
//
// The Cilium version is pinned once, by the require line of this module's
// go.mod. Cilium's own go.mod has one replace directive
// (sigs.k8s.io/controller-tools => github.com/cilium/controller-tools),
// which does not apply to dependents; it is not copied, because no package
// this module builds imports controller-tools (it serves Cilium's code
// generators only).
//
// Versions: the product requires k8s.io/* v0.37, Cilium v1.20.2 was released
// against v0.36; minimal version selection builds Cilium's packages used
// here against v0.37, and they compile and behave as their own tests say
// (their label-selector code is Cilium's slim copy, not client-go's).
//
// # What is not computed offline: pkg/policy's repository
//
// Cilium's policy repository (pkg/policy: Repository, ResolvePolicy,
// DistillPolicy) cannot be built into this test binary. pkg/policy imports
// pkg/crypto/certificatemanager, which imports pkg/k8s/client, whose
// compositeClientset does not compile against client-go v0.37
// (kubernetes.Interface.Discovery now returns discovery.DiscoveryInterfaces;
// "duplicate method Discovery"). The offline evaluator needs
// k8s.io/apiserver v0.37, which needs client-go v0.37 (replacing client-go
// with v0.36 fails too: its informers import k8s.io/api/scheduling/v1alpha2,
// gone from k8s.io/api v0.37). One Go build holds one version of a module,
// so the two cannot share a binary. Check therefore asserts on the last
// step before the repository: the policy entries RulesToPolicyEntries
// produces (subject, peer selectors, port rules, verdict, default deny),
// matched with Cilium's own selector matcher against synthetic identities
// (the sandbox's pod, kube-dns, other pods, the reserved identities, CIDR and
// FQDN identities), which is what the repository's selector cache does. An
// FQDN selector matches an identity by its fqdn: label, and which names give
// an address that label is decided by FQDNSelector.ToRegex, checked
// directly.
package ciliumproof
