package webhook_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fence/sandbox-fence/internal/policyconfig"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

const configDir = "../../config"

// entry is what a shipped webhook entry routes, and how it fails.
type entry struct {
	Name, Path               string
	Rules                    []admissionregistrationv1.RuleWithOperations
	FailurePolicy            admissionregistrationv1.FailurePolicyType
	MatchPolicy              admissionregistrationv1.MatchPolicyType
	SideEffects              admissionregistrationv1.SideEffectClass
	TimeoutSeconds           int32
	AdmissionReviewVersions  []string
	NamespaceSelector        *metav1.LabelSelector
	MatchConditions          []admissionregistrationv1.MatchCondition
	ServiceName, ServiceNS   string
	ServicePort              int32
	CABundleLeftForInjection bool
}

func entries(t *testing.T, dir string, components ...string) []entry {
	t.Helper()
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if !tst.Find(t, tst.Render(t, configDir, dir, components...), "ValidatingWebhookConfiguration", "sandbox-fence-webhook", &vwc) {
		t.Fatalf("config/%s renders no ValidatingWebhookConfiguration sandbox-fence-webhook", dir)
	}
	var out []entry
	for _, w := range vwc.Webhooks {
		e := entry{
			Name: w.Name, Rules: w.Rules, FailurePolicy: ptr.Deref(w.FailurePolicy, ""), MatchPolicy: ptr.Deref(w.MatchPolicy, ""),
			SideEffects: ptr.Deref(w.SideEffects, ""), TimeoutSeconds: ptr.Deref(w.TimeoutSeconds, 0),
			AdmissionReviewVersions: w.AdmissionReviewVersions, NamespaceSelector: w.NamespaceSelector, MatchConditions: w.MatchConditions,
			CABundleLeftForInjection: len(w.ClientConfig.CABundle) == 0,
		}
		if s := w.ClientConfig.Service; s != nil {
			e.Path, e.ServiceName, e.ServiceNS, e.ServicePort = ptr.Deref(s.Path, ""), s.Name, s.Namespace, ptr.Deref(s.Port, 0)
		}
		out = append(out, e)
	}
	return out
}

func wantEntry(name, path string, rule admissionregistrationv1.RuleWithOperations) entry {
	return entry{
		Name: name, Path: path, Rules: []admissionregistrationv1.RuleWithOperations{rule},
		// Fail closed: an unverified host write is refused (docs/webhook.md).
		FailurePolicy: admissionregistrationv1.Fail,
		// Equivalent, so writes through every served version are seen.
		MatchPolicy: admissionregistrationv1.Equivalent, SideEffects: admissionregistrationv1.SideEffectClassNone,
		TimeoutSeconds: 5, AdmissionReviewVersions: []string{"v1"},
		// No namespaceSelector, whose lookup would refuse
		// a request in a namespace gone with objects still stored, for
		// everyone and whatever the failurePolicy.
		NamespaceSelector: &metav1.LabelSelector{},
		// Only the bound hosts, as the controller renders them
		// (internal/policyconfig); any host's per-sandbox write as shipped.
		MatchConditions: []admissionregistrationv1.MatchCondition{
			{Name: policyconfig.MatchCondition, Expression: policyconfig.ShippedMatchCondition},
		},
		ServiceName: "sandbox-fence-webhook", ServiceNS: "sandbox-fence-system", ServicePort: 443, CABundleLeftForInjection: true,
	}
}

func rule(group, version, resource string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
		APIGroups: []string{group}, APIVersions: []string{version}, Resources: []string{resource}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)}}
}

func TestShippedWebhookConfiguration(t *testing.T) {
	cilium := wantEntry("cilium-egress.fence.sandbox.namzu.ai", webhook.CiliumEgressPath,
		rule("cilium.io", "v2", "ciliumnetworkpolicies", admissionregistrationv1.Create, admissionregistrationv1.Update))
	cases := []struct {
		name       string
		dir        string
		components []string
		want       []entry
	}{{
		// No Sandbox or claim request ever reaches the webhook: strict
		// delete is a ValidatingAdmissionPolicy, and so is every rule on
		// deletes.
		name: "the default install routes only policy writes to the webhook",
		dir:  "webhook",
		want: []entry{cilium},
	}, {
		name: "the cert-manager overlay routes the same requests",
		dir:  "webhook/overlays/cert-manager",
		want: []entry{cilium},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, entries(t, tc.dir, tc.components...)); diff != "" {
				t.Errorf("webhook entries (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEveryManifestUnderConfigIsInAKustomization fails on a file under
// config/ that no kustomization lists (as a resource, component, patch,
// configuration, CRD or generator file): a manifest nobody renders is never
// installed, nor dry-run by the e2e case
// TestEveryManifestUnderConfigIsAcceptedByTheServer, which renders the
// kustomizations. config/crd/testdata holds test inputs, not manifests, and
// neither are config's Go files nor a *_test.yaml (promtool's rule tests).
func TestEveryManifestUnderConfigIsInAKustomization(t *testing.T) {
	root, err := filepath.Abs(configDir)
	if err != nil {
		t.Fatal(err)
	}
	referenced := map[string]bool{}
	var files []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == filepath.Join(root, "crd", "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if filepath.Ext(p) == ".go" || strings.HasSuffix(p, "_test.yaml") {
			return nil
		}
		if d.Name() != "kustomization.yaml" {
			files = append(files, p)
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var k struct {
			Resources      []string `json:"resources"`
			Components     []string `json:"components"`
			Configurations []string `json:"configurations"`
			CRDs           []string `json:"crds"`
			Patches        []struct {
				Path string `json:"path"`
			} `json:"patches"`
			ConfigMapGenerator []struct {
				Files []string `json:"files"`
			} `json:"configMapGenerator"`
		}
		if err := yaml.Unmarshal(b, &k); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		refs := append(append(append(k.Resources, k.Components...), k.Configurations...), k.CRDs...)
		for _, pt := range k.Patches {
			refs = append(refs, pt.Path)
		}
		for _, g := range k.ConfigMapGenerator {
			for _, f := range g.Files {
				if i := strings.Index(f, "="); i >= 0 {
					f = f[i+1:]
				}
				refs = append(refs, f)
			}
		}
		for _, r := range refs {
			if r != "" {
				referenced[filepath.Join(filepath.Dir(p), r)] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found only %d manifests under %s", len(files), root)
	}
	for _, f := range files {
		if !referenced[f] {
			rel, _ := filepath.Rel(root, f)
			t.Errorf("config/%s is listed by no kustomization.yaml: add it to its directory's resources (or patches, components, generator files), or remove it", rel)
		}
	}
}
