package ciliumproof

import (
	"context"
	"runtime"
	"strings"
	"syscall"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"encoding/json"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

const (
	namespace      = "sbx"
	customLabelKey = "example.com/egress-owner"
	policiesDir    = "../../policies"
)

// bodies is the size of the deterministic run: CILIUMPROOF_BODIES, default
// 20,000 (what CI runs).
func bodies(t testing.TB) int {
	n := 20000
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

func startFence(t testing.TB, bundle []*vapeval.PolicyDir) *Fence {
	t.Helper()
	f, err := StartFence(context.Background(), bundle, namespace, fence.DefaultPerSandboxLabelKey, customLabelKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

// run generates n bodies from seed and tallies them against the bundle in
// dir.
func run(t testing.TB, f *Fence, n int, seed uint64) *Tally {
	t.Helper()
	g := NewGenerator(rand.NewPCG(seed, 18), namespace, fence.DefaultPerSandboxLabelKey, customLabelKey)
	bodies := make([]Body, n)
	for i := range bodies {
		bodies[i] = g.Next()
	}
	outs, err := RunAll(context.Background(), f, bodies, seed)
	if err != nil {
		t.Fatal(err)
	}
	tally := NewTally()
	for _, o := range outs {
		tally.Add(o)
	}
	return tally
}

// TestAdmittedBodiesStayWithinTheContract is the differential property of
// contract §4.6: every body the shipped bundle admits from a bound host is
// accepted by Cilium v1.20's own Parse and Sanitize, and Cilium reads it as
// no wider than contract §4.3 and §4.6 say (Check). Denied bodies that
// Cilium reads as within the contract are reported, by rule, not failed.
func TestAdmittedBodiesStayWithinTheContract(t *testing.T) {
	f := startFence(t, loadBundle(t))
	n := bodies(t)
	start, cpu := time.Now(), cpuTime()
	tally := run(t, f, n, 2026)
	t.Logf("%d bodies in %v (%v of CPU, %d processors) against %v", n, time.Since(start).Round(time.Millisecond),
		(cpuTime() - cpu).Round(time.Millisecond), runtime.GOMAXPROCS(0), f.Policies)
	t.Logf("\n%s", tally.Markdown())
	if rep := tally.OverStrictReport(); rep != "" {
		t.Logf("denied bodies Cilium reads as within the contract (candidates for an over-strict rule):\n%s", rep)
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
		t.Errorf("%v after %v:\n  %s", o.Defects(), o.Body.Mutations, js)
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

// TestTheProofCatchesAWeakenedFence removes one family of the shipped egress
// policy's checks at a time (every validation that reads the named
// variable or field) and requires the property to find defects: the test
// above would fail if the shipped policy lost that check.
func TestTheProofCatchesAWeakenedFence(t *testing.T) {
	for _, tt := range []struct {
		name, reads string
	}{
		{"toFQDNs entries of any form (contract §4.3 rule 7)", "variables.fqdnProblems"},
		{"any toPorts on a toFQDNs rule (contract §4.3 rule 6)", "variables.fqdnPortProblems"},
		{"any peer kind in an egress rule (contract §4.3 rule 6)", "variables.ruleProblems"},
		{"any endpointSelector (contract §4.3 rule 4)", "variables.selectorOK"},
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
			tally := run(t, startFence(t, bundle), 1000, 7)
			if len(tally.Defects) == 0 {
				t.Errorf("without the %d validations reading %s, 1000 bodies showed no defect", removed, tt.reads)
			}
			t.Logf("without %s: %d of %d bodies admitted and refused or read wider by Cilium", tt.reads, len(tally.Defects), tally.Bodies)
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
