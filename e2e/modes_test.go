//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// modeCase is one write of the shared mode cases. Each is written once, with
// its Deny-mode verdict, and run in every enforcement mode; what a mode
// implies for that verdict is framework.Outcome.ViolationIn's.
type modeCase struct {
	name string
	// by and want are the Deny-mode refusal; by == "" is a write every
	// mode admits.
	by   string
	want []string
	// write sends the write as id.
	write func(t *testing.T, id *framework.Identity) written
}

// written is what a case's write did: its error, whether it took effect
// on the cluster, and the name of the object written.
type written struct {
	err    error
	landed func() bool
	name   string
}

func modeCases() []modeCase {
	ns := func() string { return env.HostNamespace }
	return []modeCase{{
		name: "a merge patch lowering the epoch 4 to 3", by: framework.PolicyHolderEpoch, want: []string{`epoch may not decrease from "4" to "3"`},
		write: func(t *testing.T, id *framework.Identity) written {
			sbx := sandboxWithEpoch(t, "4")
			err := patch(t, id, framework.SandboxGVR, ns(), sbx.GetName(), types.MergePatchType,
				[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"3"}}}`, fence.AnnotationHolderEpoch)))
			return written{err, func() bool { return epochOf(t, ns(), sbx.GetName()) == "3" }, sbx.GetName()}
		},
	}, {
		name: "a create with the malformed epoch 01", by: framework.PolicyHolderEpoch, want: []string{`new value "01" is malformed`},
		write: func(t *testing.T, id *framework.Identity) written {
			n := name("mode-bad")
			_, err := create(t, id, framework.SandboxGVR, framework.MakeSandbox(ns(), n).Annotation(fence.AnnotationHolderEpoch, "01").Obj())
			return written{err, func() bool { return err == nil }, n}
		},
	}, {
		name: "a per-sandbox policy opening egress to the world entity", by: framework.PolicyCiliumEgress, want: []string{"a rule must be either toFQDNs", "toEntities"},
		write: func(t *testing.T, id *framework.Identity) written {
			p := perSandboxPolicy(t, ns(), "SandboxClaim", hostClaim(t))
			egress, _, _ := unstructured.NestedSlice(p.Object, "spec", "egress")
			_ = unstructured.SetNestedSlice(p.Object, append(egress, map[string]any{"toEntities": []any{"world"}}), "spec", "egress")
			_, err := create(t, id, framework.CNPGVR, p)
			return written{err, func() bool { return exists(t, p) }, p.GetName()}
		},
	}, {
		name: "a per-sandbox policy for an owner that does not exist", by: webhookSuffix, want: []string{"cilium-fence:", "no SandboxClaim named"},
		write: func(t *testing.T, id *framework.Identity) written {
			missing := &unstructured.Unstructured{}
			missing.SetName(name("ghost"))
			missing.SetUID(uuid.NewUUID())
			p := perSandboxPolicy(t, ns(), "SandboxClaim", missing)
			got, err := create(t, id, framework.CNPGVR, p)
			// Stored, then soon deleted by the garbage collector, whose
			// owner it names does not exist: the create's answer is what
			// says it landed.
			return written{err, func() bool { return err == nil && got.GetUID() != "" }, p.GetName()}
		},
	}, {
		name: "the host's own per-sandbox policy",
		write: func(t *testing.T, id *framework.Identity) written {
			p := perSandboxPolicy(t, ns(), "SandboxClaim", hostClaim(t))
			_, err := create(t, id, framework.CNPGVR, p)
			return written{err, func() bool { return exists(t, p) }, p.GetName()}
		},
	}}
}

func exists(t *testing.T, obj *unstructured.Unstructured) bool {
	t.Helper()
	_, err := env.Admin.Dynamic.Resource(framework.CNPGVR).Namespace(obj.GetNamespace()).Get(testContext(t), obj.GetName(), metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestEnforcementModes switches the installed bundle through the kustomize
// components of every mode (config/components/enforcement; the webhook
// restarted with the flag the component sets) and runs the shared cases in
// each, with the verdicts the mode implies:
//   - the client's verdict and warnings (framework.Outcome.ViolationIn);
//   - whether the write landed (refused only in Deny);
//   - for the policies, the API server's count of the violation under the
//     mode's enforcement_action (deny, warn, audit): in Audit mode the only
//     trace besides the audit log;
//   - for the webhook, an Event of the mode's reason on the policy, which
//     kubectl get events shows.
//
// Deny is restored at the end (and on failure) and enforcement waited for.
func TestEnforcementModes(t *testing.T) {
	requireShipped(t)
	if env.SetEnforcement == nil {
		t.Skip("this provider cannot switch the installed bundle's enforcement mode (the local provider does)")
	}
	// Three switches, each a rollout of the webhook Deployment on kind
	// (about a minute each under the suite's load): more than
	// testContext's 3 minutes, which the first kind run ran out of.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	t.Cleanup(cancel)
	t.Cleanup(func() {
		ctx := context.Background()
		if err := env.SetEnforcement(ctx, "deny"); err != nil {
			t.Errorf("restore deny: %v", err)
		}
		if err := env.WaitForEnforcement(ctx, logf); err != nil {
			t.Errorf("enforcement after restoring deny: %v", err)
		}
	})
	host, warnings, err := framework.WithWarnings(env.Host)
	if err != nil {
		t.Fatal(err)
	}
	// Audit first: from Deny, each switch is then observable on markers
	// (deny -> admitted silently -> admitted with warnings -> denied).
	for _, mode := range []string{"audit", "warn", "deny"} {
		t.Run(mode, func(t *testing.T) {
			if err := env.SetEnforcement(ctx, mode); err != nil {
				t.Fatal(err)
			}
			waitMode(t, mode, host, warnings)
			for _, tc := range modeCases() {
				t.Run(tc.name, func(t *testing.T) {
					before := policyChecks(t, tc.by, mode)
					warnings.Take()
					w := tc.write(t, host)
					o := framework.Outcome{Verdict: framework.VerdictOf(w.err), Warnings: warnings.Take()}
					if tc.by == "" {
						if e := o.AdmittedIn(mode); e != nil {
							t.Fatal(e)
						}
						if !w.landed() {
							t.Errorf("admitted, but the write did not land")
						}
						return
					}
					if e := o.ViolationIn(mode, tc.by, tc.want...); e != nil {
						t.Fatal(e)
					}
					if got, want := w.landed(), mode != "deny"; got != want {
						t.Errorf("%s mode: the write landed = %v, want %v", mode, got, want)
					}
					if tc.by == webhookSuffix {
						waitEvent(t, mode, w.name)
					} else if after := policyChecks(t, tc.by, mode); after-before != 1 {
						t.Errorf("apiserver_validating_admission_policy_check_total{policy=%s,enforcement_action=%s} went from %v to %v, want one more", tc.by, mode, before, after)
					}
				})
			}
		})
	}
}

// policyChecks reads the API server's count of violations of policy under
// the enforcement action of mode (0 for a write no policy refuses).
func policyChecks(t *testing.T, policy, mode string) float64 {
	t.Helper()
	if policy == "" || policy == webhookSuffix {
		return 0
	}
	body, err := env.APIServerMetrics(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	return framework.MetricSum(body, "apiserver_validating_admission_policy_check_total", `policy="`+policy+`"`, `enforcement_action="`+mode+`"`)
}

// waitEvent waits for the webhook's Event on the refused policy named
// policy, with the reason of mode.
func waitEvent(t *testing.T, mode, policy string) {
	t.Helper()
	reason := map[string]string{"deny": webhook.ReasonDenied, "warn": webhook.ReasonWarned, "audit": webhook.ReasonAudited}[mode]
	err := framework.Eventually(testContext(t), 30*time.Second, 200*time.Millisecond, "a "+reason+" Event", func(ctx context.Context) (bool, string, error) {
		evs, err := env.Admin.Kube.CoreV1().Events(env.HostNamespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason + ",involvedObject.name=" + policy})
		if err != nil {
			return false, "", err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "CiliumNetworkPolicy" && e.Type == "Warning" && e.Source.Component == "sandbox-fence-webhook" &&
				e.Message != "" && strings.Contains(e.Message, "no SandboxClaim named") && strings.Contains(e.Message, env.Host.Username) {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d %s Events, none about the refused policy", len(evs.Items), reason), nil
	})
	if err != nil {
		t.Error(err)
	}
}

// waitMode waits until every enforcer answers its marker as mode implies:
// policies and bindings reach the API server's admission caches
// asynchronously, and the webhook was restarted.
func waitMode(t *testing.T, mode string, host *framework.Identity, warnings *framework.Warnings) {
	t.Helper()
	ctx := testContext(t)
	if mode == "deny" {
		if err := env.WaitForEnforcement(ctx, logf); err != nil {
			t.Fatal(err)
		}
		return
	}
	markers, err := env.Markers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range markers {
		m.As = host
		err := framework.Eventually(ctx, 90*time.Second, 250*time.Millisecond, "marker "+m.Name+" in "+mode+" mode", func(ctx context.Context) (bool, string, error) {
			mapper, err := env.Mapper()
			if err != nil {
				return false, "", err
			}
			ri, err := framework.ResourceFor(mapper, m.As.Dynamic, m.Obj)
			if err != nil {
				return false, "", err
			}
			warnings.Take()
			_, err = ri.Create(ctx, m.Obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: framework.FieldManager})
			o := framework.Outcome{Verdict: framework.VerdictOf(err), Warnings: warnings.Take()}
			if !o.Admitted {
				return false, o.String(), nil
			}
			warned := o.AdmittedIn(mode) != nil // a fence warning
			return warned == (mode == "warn"), fmt.Sprintf("admitted with warnings %q", o.Warnings), nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
