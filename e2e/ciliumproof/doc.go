// Package ciliumproof proves with Cilium's own code what a sandbox pod can
// reach under every CiliumNetworkPolicy the shipped egress fence admits: a
// differential property test of generated bodies (the body a host writes, then
// mutations of every field of the CiliumNetworkPolicy schema), each run through
// the shipped policies, offline, in the API server's own admission plugin
// (internal/vapeval), then through Cilium v1.20's CiliumNetworkPolicy.Parse and
// its policy repository.
//
// # The property
//
// Under the shipped baseline (config/components/cilium-baseline) and one
// admitted per-sandbox policy, the sandbox's pod reaches
//
//   - an address a DNS answer gave for a name exactly when a toFQDNs selector
//     of the policy reaches that name (ContractReach: the contract's FQDN
//     table) on a port the selector's rule opens, and the address is not
//     link-local or a metadata address (169.254.0.0/16, fe80::/10,
//     fd00:ec2::254, IPv4-mapped forms included: the baseline's deny
//     prefixes, and no more), whichever name answered it;
//   - kube-dns of its own cluster on port 53, through the DNS proxy;
//   - and nothing else: no other pod, no reserved identity (world, host,
//     remote-node, kube-apiserver, health, ingress, ...), no address DNS did
//     not give it (public, private, link-local).
//
// Every pod the policy is not for (another sandbox, an unlabelled pod, the
// owner's name under another key or in another namespace, a namespace that
// carries the label) reaches kube-dns on port 53 and nothing else, and so
// does the sandbox with no per-sandbox policy at all. A peer the agent fills
// in from cluster state (toServices, toGroups) is reported, never read as
// "reaches nothing"; so is a selector whose reach the contract does not
// state, and a policy Cilium cannot compute for the pod.
// TestAPodReachesItsAllowlistAndDNSOnly checks it (contract.go holds the
// expectation, Plan.Check the comparison); TestTheProofCatchesAWeakenedFence
// shows that it fails once the fence loses any family of its checks.
//
// Reach is computed, not inferred from the rules. The program ciliumreach
// (the reach directory) does per body what the agent's components do:
// imports the baseline and the policy (the CIDR prefixes their selectors
// name into the ipcache, the entries RulesToPolicyEntries gives into the
// repository), resolves each pod's endpoint policy, hands the DNS answers to
// the FQDN name manager, which gives each answered address its identity
// through the ipcache (the selectors' fqdn: labels beside the cidr: label of
// every policy prefix that holds the address: that is how the baseline's
// deny reaches a *.nip.io name's metadata address), and looks each flow up
// in the source's endpoint policy, an address resolved to the identity of
// its longest prefix as the datapath resolves it.
//
// # Why a build tag and a module of its own
//
// github.com/sandbox-fence/sandbox-fence is the product: hosts import
// pkg/fence, and nothing there may depend on Cilium, whose module graph is
// larger than the product's own. This package belongs to the harness's
// module (github.com/sandbox-fence/sandbox-fence/e2e), which requires
// github.com/cilium/cilium and reaches the product through
// `replace github.com/sandbox-fence/sandbox-fence => ../`, so it always
// tests the working tree, never a released copy. Under the product's module
// path, it may import the product's internal packages (the Go "internal"
// rule goes by import path), which is how it runs the shipped policies with
// internal/vapeval. Its tests carry the build tag cilium: `go test ./...` in
// e2e/ (make test-unit) leaves them to `make test-cilium`, which runs them
// with -tags cilium.
//
// Cilium's policy repository cannot be built into that test binary.
// pkg/policy imports pkg/crypto/certificatemanager, which imports
// pkg/k8s/client, whose compositeClientset does not compile against
// client-go v0.37 (kubernetes.Interface.Discovery now returns
// discovery.DiscoveryInterfaces; "duplicate method Discovery"). The
// evaluator needs k8s.io/apiserver v0.37, which needs client-go v0.37, and
// one Go build holds one version of a module. So the repository runs in a
// program of a nested module, reach
// (github.com/sandbox-fence/sandbox-fence/e2e/ciliumproof/reach), which
// requires Cilium alone, builds it with Cilium's own k8s.io (v0.36;
// TestTheK8sModulesAreCiliumsOwn there keeps them Cilium's) and imports
// nothing of the product. The tests here build it once per test binary
// (go build with the environment they run under, so make's flags apply)
// and keep one process, asked one body at a time in JSON lines (helper.go;
// reach/protocol says what each field means).
//
// What this package still builds of Cilium against k8s.io v0.37, which
// compiles and behaves as Cilium's own tests say: CiliumNetworkPolicy.Parse,
// whose refusal of an admitted body is a defect of its own (the repository
// then never sees the body: the sandbox misses its allowlist), and
// FQDNSelector.ToRegex, which TestFQDNSemantics pins to the contract's FQDN
// table.
//
// # Versions
//
// The Cilium release is required in e2e/go.mod and reach/go.mod;
// TestTheReachModuleBuildsThisCilium fails when they differ, and
// internal/ciliumversion reads e2e/go.mod's. Cilium's own go.mod has one
// replace directive (sigs.k8s.io/controller-tools =>
// github.com/cilium/controller-tools), which does not apply to dependents
// and is not copied: nothing built here imports controller-tools. The reach
// module replaces gobgp by a released version, for go list -m all (its
// go.mod says why).
package ciliumproof
