//go:build cilium

package ciliumproof

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"

	"github.com/sandbox-fence/sandbox-fence/e2e/ciliumproof/reach/protocol"
)

const (
	namespace      = "sbx"
	customLabelKey = "example.com/egress-owner"
	policiesDir    = "../../policies"
	baselineFile   = "../../config/components/cilium-baseline/baseline.yaml"
)

// bodies is the size of the deterministic run: CILIUMPROOF_BODIES, default
// 5,000 (make test). The weekly workflow runs 20,000, and make fuzz-cilium
// for an hour: a cold CI run has no time for the rare shapes, and
// TestTheProofCatchesAWeakenedFence shows 1,000 bodies find a fence that
// lost any family of its checks.
func bodies(t testing.TB) int {
	n := 5000
	if s := os.Getenv("CILIUMPROOF_BODIES"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("CILIUMPROOF_BODIES=%q: want a positive number", s)
		}
	}
	return n
}

func loadBundle(t testing.TB) []*vapeval.PolicyDir {
	t.Helper()
	bundle, err := LoadBundle(policiesDir)
	if err != nil {
		t.Fatal(err)
	}
	return bundle
}

func baselinePath(t testing.TB) string {
	t.Helper()
	abs, err := filepath.Abs(baselineFile)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func startFence(t testing.TB, bundle []*vapeval.PolicyDir) *Fence {
	t.Helper()
	f, err := StartFence(context.Background(), bundle, namespace, fence.DefaultPerSandboxLabelKey, customLabelKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

func prover(t testing.TB, bundle []*vapeval.PolicyDir) *Prover {
	t.Helper()
	return &Prover{Fence: startFence(t, bundle), Reach: startReach(t), Baseline: baselinePath(t)}
}

// run generates n bodies from seed and tallies them against the prover.
func run(t testing.TB, p *Prover, n int, seed uint64) *Tally {
	t.Helper()
	g := NewGenerator(rand.NewPCG(seed, 18), namespace, fence.DefaultPerSandboxLabelKey, customLabelKey)
	bodies := make([]Body, n)
	for i := range bodies {
		bodies[i] = g.Next()
	}
	outs, err := RunAll(context.Background(), p, bodies, seed)
	if err != nil {
		t.Fatal(err)
	}
	tally := NewTally()
	for _, o := range outs {
		tally.Add(o)
	}
	return tally
}

// hostBody is the body pkg/fence writes for hosts, the one body a bound host
// sends.
func hostBody(t testing.TB, hosts ...string) Body {
	t.Helper()
	s := Subject{Namespace: namespace, LabelKey: fence.DefaultPerSandboxLabelKey, Owner: "claim-a"}
	u, err := fence.BuildPerSandboxPolicy(fence.PolicyInput{
		Owner:     fence.PolicyOwner{Kind: fence.OwnerKindSandboxClaim, Name: s.Owner, UID: "4a3b2c1d-0000-4000-8000-000000000001"},
		Namespace: s.Namespace, LabelKey: s.LabelKey, Hosts: hosts,
	})
	if err != nil {
		t.Fatal(err)
	}
	return Body{Object: u.Object, Subject: s, Hosts: hosts}
}

// nipAnswers are names under nip.io whose DNS answers are link-local and
// metadata addresses, as nip.io gives them for any address.
var nipAnswers = []protocol.DNSAnswer{
	{Name: "169-254-169-254.nip.io", IPs: []string{"169.254.169.254"}},
	{Name: "169-254-170-2.nip.io", IPs: []string{"169.254.170.2"}},
	{Name: "fe80--1.nip.io", IPs: []string{"fe80::1"}},
	{Name: "fd00-ec2--254.nip.io", IPs: []string{"fd00:ec2::254"}},
	{Name: "ffff-169-254-169-254.nip.io", IPs: []string{"::ffff:169.254.169.254"}},
}

// TestAPodReachesItsAllowlistAndDNSOnly is the contract's reach property (what
// FQDN selectors reach, under the baseline), computed with Cilium's own policy
// repository (ciliumreach): under the shipped baseline and a per-sandbox policy
// the shipped bundle admits from a bound host, the sandbox's pod reaches an
// address a DNS answer gave for a name exactly when a selector of its policy
// reaches that name (ContractReach) on a port the selector's rule opens, and
// the address is neither denied by the baseline nor link-local or metadata; it
// reaches kube-dns on port 53 through the DNS proxy, and nothing else: no other
// pod, no reserved identity, no raw address. Every pod the policy is not for
// reaches kube-dns on port 53 only. Checked for no per-sandbox policy, for the
// host's body (with and without a *.nip.io entry whose names answer metadata
// addresses), and for generated bodies (pkg/fence's body for random hosts and
// owners, mutated in every field of the schema). Every admitted body must also
// be accepted by Cilium's Parse. Denied bodies under which the pods reach what
// the contract says are reported, by rule, not failed.
func TestAPodReachesItsAllowlistAndDNSOnly(t *testing.T) {
	p := prover(t, loadBundle(t))
	p.OverStrict = true
	start, cpu, reachCPU, flows := time.Now(), cpuTime(), p.Reach.CPU(), p.Reach.Flows
	fixed := 0
	for _, tt := range []struct {
		name  string
		body  *Body
		extra []protocol.DNSAnswer
	}{
		{name: "no per-sandbox policy"},
		{name: "the host's body", body: new(hostBody(t, "registry.npmjs.org", ".example.com"))},
		{name: "the host's body with .nip.io, whose names answer metadata addresses",
			body: new(hostBody(t, "registry.npmjs.org", ".example.com", ".nip.io")), extra: nipAnswers},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := Subject{Namespace: namespace, LabelKey: fence.DefaultPerSandboxLabelKey, Owner: "claim-a"}
			var policy map[string]any
			if tt.body != nil {
				v, err := p.Fence.Evaluate(context.Background(), *tt.body)
				if err != nil {
					t.Fatal(err)
				}
				if !v.Allowed {
					t.Fatalf("the fence denies the host's body: %s", v.Message)
				}
				policy, s = tt.body.Object, tt.body.Subject
			}
			plan := NewPlan(policy, s, p.Baseline, rand.New(rand.NewPCG(1, 2)), tt.extra...)
			ans, err := p.Reach.Ask(plan.Request)
			if err != nil {
				t.Fatal(err)
			}
			fixed++
			for _, f := range plan.Check(ans) {
				t.Error(f)
			}
			// What keeps *.nip.io off metadata addresses is the identity the
			// ipcache gives an answered address: the FQDN selector's label
			// and the cidr: label of the baseline's deny prefix holding it.
			for _, a := range tt.extra {
				r := ans.Peers[protocol.Peer{IP: a.IPs[0]}.Key()]
				if !slices.Contains(r.Labels, "fqdn:*.nip.io") || !slices.ContainsFunc(r.Labels, func(l string) bool { return strings.HasPrefix(l, "cidr:") }) {
					t.Errorf("%s answered %s, whose identity %d has labels %v: want fqdn:*.nip.io and the baseline's cidr: label", a.Name, a.IPs[0], r.Identity, r.Labels)
				}
			}
		})
	}

	n := bodies(t)
	tally := run(t, p, n, 2026)
	t.Logf("%d generated bodies, %d of them checked for reach, and %d fixed cases: %d flows looked up in %v (%v of CPU in this process, %v in ciliumreach, %d processors) against %v",
		n, tally.Reached, fixed, p.Reach.Flows-flows, time.Since(start).Round(time.Millisecond),
		(cpuTime() - cpu).Round(time.Millisecond), (p.Reach.CPU() - reachCPU).Round(time.Millisecond), runtime.GOMAXPROCS(0), p.Fence.Policies)
	t.Logf("\n%s", tally.Markdown())
	if rep := tally.OverStrictReport(); rep != "" {
		t.Logf("denied bodies under which the pods reach what the contract says (candidates for an over-strict rule):\n%s", rep)
	}
	if out := os.Getenv("CILIUMPROOF_REPORT"); out != "" {
		if err := os.WriteFile(out, []byte(tally.Markdown()+"\n"+tally.OverStrictReport()), 0o644); err != nil {
			t.Error(err)
		}
	}
	for i, o := range tally.Defects {
		if i == 20 {
			t.Errorf("... and %d more", len(tally.Defects)-20)
			break
		}
		js, _ := json.Marshal(o.Body.Object)
		d := o.Defects()
		if len(d) > 8 {
			d = append(d[:8], fmt.Sprintf("... and %d more", len(d)-8))
		}
		t.Errorf("after %v:\n  %s\n  %s", o.Body.Mutations, strings.Join(d, "\n  "), js)
	}
	// A run that admits or denies almost nothing proves little either way.
	if n >= 1000 && (tally.Admitted < n/5 || tally.Denied < n/5) {
		t.Errorf("admitted %d and denied %d of %d: the generator no longer aims at both sides", tally.Admitted, tally.Denied, n)
	}
	if n >= 1000 {
		for _, cat := range Catalogues() {
			for _, m := range cat {
				if tally.MutationsSeen[m.name] == [2]int{} {
					t.Errorf("mutation %q never applied", m.name)
				}
			}
		}
	}
}

// TestWithoutTheBaselineAnUnselectedPodReachesEverything states what removing
// the baseline costs (an admin's act that kubectl fence check reports):
// Cilium's default enforcement leaves a pod that no policy selects
// unconfined, so a sandbox whose per-sandbox policy is gone reaches every
// address, metadata ones included, and every pod. It also keeps the reach
// property honest: TestAPodReachesItsAllowlistAndDNSOnly's "no per-sandbox
// policy" case holds only because the baseline is there.
func TestWithoutTheBaselineAnUnselectedPodReachesEverything(t *testing.T) {
	r := startReach(t)
	s := Subject{Namespace: namespace, LabelKey: fence.DefaultPerSandboxLabelKey, Owner: "claim-a"}
	plan := NewPlan(nil, s, "", rand.New(rand.NewPCG(1, 2)))
	ans, err := r.Ask(plan.Request)
	if err != nil {
		t.Fatal(err)
	}
	if len(ans.Verdicts) != len(plan.expect) {
		t.Fatalf("%d verdicts for %d flows", len(ans.Verdicts), len(plan.expect))
	}
	flows, allowed := 0, 0
	for i, e := range plan.expect {
		if e.from != podSandbox {
			continue
		}
		flows++
		if ans.Verdicts[i].Allowed {
			allowed++
		} else {
			t.Errorf("%s → %s %s: denied without any policy selecting the pod (%s)", e.from, e.to, e.port, orDefault(ans.Verdicts[i].Rules))
		}
	}
	if flows == 0 || !slices.ContainsFunc(plan.expect, func(e expectation) bool { return e.from == podSandbox && e.to.IP == "169.254.169.254" }) {
		t.Fatalf("the plan asks %d flows from the sandbox, none to 169.254.169.254: it no longer says what an unselected pod reaches", flows)
	}
	t.Logf("without the baseline and a per-sandbox policy, the sandbox's pod reaches %d of %d flows (every pod, reserved identity and address tried)", allowed, flows)
}

// TestTheProofCatchesAWeakenedFence removes one family of the shipped egress
// policy's checks at a time (every validation that reads the named
// variable or field) and requires the reach property to fail on admitted
// bodies: TestAPodReachesItsAllowlistAndDNSOnly would fail if the shipped
// policy lost that check.
func TestTheProofCatchesAWeakenedFence(t *testing.T) {
	for _, tt := range []struct {
		name, reads string
	}{
		{"toFQDNs entries of any form, not only a host or a *.<domain>", "variables.fqdnProblems"},
		{"any toPorts on a toFQDNs rule, not only ports, serverNames and rules.dns", "variables.fqdnPortProblems"},
		{"any peer kind in an egress rule, not only toFQDNs and the kube-dns rule", "variables.ruleProblems"},
		{"the kube-dns rule's selector and ports, not only kube-dns on 53", "variables.dnsRuleProblems"},
		{"any endpointSelector, not only the owner's one label", "variables.selectorOK"},
		{"any spec keys, not only endpointSelector and egress", "variables.specKeysOK"},
		{"a second rule list, specs, which bypasses every check on spec", "object.specs"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bundle := loadBundle(t)
			removed := 0
			for _, p := range bundle {
				if p.Policy.Name != "sandbox-fence-cilium-egress" {
					continue
				}
				var kept []admissionregistrationv1.Validation
				for _, v := range p.Policy.Spec.Validations {
					if strings.Contains(v.Expression, tt.reads) {
						removed++
						continue
					}
					kept = append(kept, v)
				}
				p.Policy.Spec.Validations = kept
			}
			if removed == 0 {
				t.Fatalf("no validation of sandbox-fence-cilium-egress reads %s any more: update this test to the policy", tt.reads)
			}
			tally := run(t, prover(t, bundle), 1000, 7)
			reach := 0
			var example *Outcome
			for _, o := range tally.Defects {
				if o.Verdict.Allowed && len(o.Findings) > 0 {
					reach++
					if example == nil {
						example = &o
					}
				}
			}
			if reach == 0 {
				t.Fatalf("without the %d validations reading %s, no admitted body of 1000 gave a pod other reach than the contract's", removed, tt.reads)
			}
			t.Logf("without %s: %d of %d bodies admitted with a reach other than the contract's, e.g. after %v: %v",
				tt.reads, reach, tally.Bodies, example.Body.Mutations, example.Findings[0])
		})
	}
}

// TestGeneratorIsDeterministic: the CI run is the same run every time, so a
// failure reproduces from its seed.
func TestGeneratorIsDeterministic(t *testing.T) {
	a := NewGenerator(rand.NewPCG(2026, 18), namespace, fence.DefaultPerSandboxLabelKey, customLabelKey)
	b := NewGenerator(rand.NewPCG(2026, 18), namespace, fence.DefaultPerSandboxLabelKey, customLabelKey)
	for i := range 2000 {
		x, _ := json.Marshal(a.Next())
		y, _ := json.Marshal(b.Next())
		if string(x) != string(y) {
			t.Fatalf("body %d differs between two generators of the same seed:\n%s\n%s", i, x, y)
		}
	}
}

// cpuTime is the process's user and system time so far: on a shared machine
// the wall time of a run says little, its CPU time much more.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
