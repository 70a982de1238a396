package policies_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"sigs.k8s.io/yaml"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/policyconfig"
	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// policyDirs are the directories under policies/ that hold a policy.yaml.
func policyDirs(t testing.TB) []string {
	t.Helper()
	matches, err := filepath.Glob("*/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, m := range matches {
		dirs = append(dirs, filepath.Dir(m))
	}
	sort.Strings(dirs)
	if len(dirs) == 0 {
		t.Fatal("no policies/*/policy.yaml found")
	}
	return dirs
}

func loadBundle(t testing.TB) []*vapeval.PolicyDir {
	t.Helper()
	var out []*vapeval.PolicyDir
	for _, d := range policyDirs(t) {
		p, err := vapeval.LoadPolicyDir(d)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func defaultParams(t testing.TB) *unstructured.Unstructured {
	t.Helper()
	objs, err := vapeval.LoadObjects("testdata/fenceconfig.yaml")
	if err != nil || len(objs) != 1 {
		t.Fatalf("testdata/fenceconfig.yaml: want one FenceConfig: %v", err)
	}
	return served(t, objs[0])
}

// served is params as the API server serves it: with the FenceConfig
// CRD's defaults filled in.
func served(t testing.TB, params *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	out := params.DeepCopy()
	if err := vapeval.DefaultObject(paramCRDs(t)[0], out.Object); err != nil {
		t.Fatal(err)
	}
	return out
}

// paramCRDs default the params as the API server serves them: the
// FenceConfig CRD fills in spec.perSandboxLabelKey.
func paramCRDs(t testing.TB) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	return loadCRDs(t, fenceConfigCRD)
}

func namespaces(t testing.TB) []*corev1.Namespace {
	t.Helper()
	objs, err := vapeval.LoadObjects("testdata/namespaces.yaml")
	if err != nil {
		t.Fatal(err)
	}
	nss, err := vapeval.NamespacesOf(objs)
	if err != nil {
		t.Fatal(err)
	}
	return nss
}

// suite runs cases with the whole shipped bundle loaded, as on a cluster,
// under testdata/fenceconfig.yaml and testdata/namespaces.yaml.
func suite(t testing.TB) *vapeval.Suite {
	s := &vapeval.Suite{Bundle: loadBundle(t), Defaults: defaultParams(t), CRD: paramCRDs(t)[0], Namespaces: namespaces(t)}
	t.Cleanup(s.Stop)
	return s
}

// harness is s's evaluator of the configuration p asks for.
func harness(t testing.TB, s *vapeval.Suite, p vapeval.CaseParams) *vapeval.Harness {
	t.Helper()
	h, err := s.Harness(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// caseConfig is the configuration a case asks for, as the controller would
// render it (vapeval.Suite.Config) over defaults.
func caseConfig(t testing.TB, defaults *unstructured.Unstructured, p vapeval.CaseParams) policyconfig.Config {
	t.Helper()
	c, err := (&vapeval.Suite{Defaults: defaults, CRD: paramCRDs(t)[0]}).Config(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPolicyCases runs every policies/<name>/tests/<case>.yaml through the
// API server's validating admission policy plugin with the whole bundle
// loaded, and compares the verdict.
func TestPolicyCases(t *testing.T) {
	s := suite(t)
	total := 0
	for _, dir := range policyDirs(t) {
		cases, err := vapeval.LoadCases(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(cases) == 0 {
			t.Errorf("%s has no test cases: add %s/tests/<case>.yaml", dir, dir)
		}
		total += len(cases)
		for _, c := range cases {
			t.Run(dir+"/"+c.Name(), func(t *testing.T) {
				v, err := s.Run(context.Background(), c)
				if err != nil {
					t.Fatalf("%s: %v", c.File, err)
				}
				for _, p := range c.Problems(v) {
					t.Errorf("%s (%s): %s", c.File, c.Description, p)
				}
			})
		}
	}
	t.Logf("%d cases", total)
}

// TestEveryPolicyIsInstalled fails when a policy directory is missing from
// config/vap, or config/vap installs a directory without cases.
func TestEveryPolicyIsInstalled(t *testing.T) {
	b, err := os.ReadFile("../config/vap/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, r := range k.Resources {
		if name, ok := strings.CutPrefix(r, "../../policies/"); ok {
			listed[strings.TrimSuffix(name, "/")] = true
		}
	}
	for _, d := range policyDirs(t) {
		if !listed[d] {
			t.Errorf("policies/%s is not installed: add ../../policies/%s to config/vap/kustomization.yaml resources", d, d)
		}
		delete(listed, d)
	}
	for d := range listed {
		t.Errorf("config/vap installs ../../policies/%s, which has no policy.yaml", d)
	}
	for _, d := range policyDirs(t) {
		if _, err := os.Stat(filepath.Join(d, "kustomization.yaml")); err != nil {
			t.Errorf("policies/%s needs a kustomization.yaml listing policy.yaml and binding.yaml: %v", d, err)
		}
		cases, err := vapeval.LoadCases(d)
		if err != nil {
			t.Fatal(err)
		}
		if len(cases) == 0 {
			t.Errorf("policies/%s is installed but has no cases in tests/", d)
		}
	}
}

// TestNamespaceSelectorIsOneRule holds the two enforcers of the binding by
// namespaceSelector (contract §4.7) to one meaning, metav1.LabelSelector's:
// for every host and namespace of the table, the egress policy refuses the
// host's write as outside its namespaces exactly when
// fencev1alpha1.Host.Binds (the webhook's, through apimachinery's own
// selector) says it is not bound.
func TestNamespaceSelectorIsOneRule(t *testing.T) {
	req := func(key, op string, values ...string) fencev1alpha1.NamespaceSelectorRequirement {
		return fencev1alpha1.NamespaceSelectorRequirement{Key: key, Operator: op, Values: values}
	}
	selectors := []fencev1alpha1.NamespaceSelector{
		{MatchLabels: map[string]fencev1alpha1.LabelValue{"tier": "gold"}},
		{MatchLabels: map[string]fencev1alpha1.LabelValue{"tier": "gold", "example.com/tenant": "acme"}},
		{MatchLabels: map[string]fencev1alpha1.LabelValue{"tier": ""}},
		{MatchExpressions: []fencev1alpha1.NamespaceSelectorRequirement{req("example.com/tenant", "In", "acme", "initech")}},
		{MatchExpressions: []fencev1alpha1.NamespaceSelectorRequirement{req("tier", "NotIn", "gold")}},
		{MatchExpressions: []fencev1alpha1.NamespaceSelectorRequirement{req("tier", "Exists")}},
		{MatchExpressions: []fencev1alpha1.NamespaceSelectorRequirement{req("tier", "DoesNotExist")}},
		{MatchLabels: map[string]fencev1alpha1.LabelValue{"example.com/tenant": "acme"},
			MatchExpressions: []fencev1alpha1.NamespaceSelectorRequirement{req("tier", "NotIn", "silver")}},
	}
	nsLabels := map[string]map[string]string{
		"gold-acme":   {"tier": "gold", "example.com/tenant": "acme"},
		"silver":      {"tier": "silver"},
		"initech":     {"example.com/tenant": "initech"},
		"bare":        {},
		"empty-tier":  {"tier": ""},
		"acme":        {"example.com/tenant": "acme"},
		"silver-acme": {"tier": "silver", "example.com/tenant": "acme"},
	}
	var hosts []fencev1alpha1.Host
	for i := range selectors {
		hosts = append(hosts, fencev1alpha1.Host{Username: fmt.Sprintf("system:serviceaccount:h%d:host", i), NamespaceSelector: &selectors[i]})
	}
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&fencev1alpha1.FenceConfigSpec{Hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	var nss []*corev1.Namespace
	for name, l := range nsLabels {
		labels := maps.Clone(l)
		labels[fencev1alpha1.FencedNamespaceLabel] = fencev1alpha1.FencedNamespaceValue
		nss = append(nss, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
	}
	s := &vapeval.Suite{Bundle: loadBundle(t), Defaults: defaultParams(t), CRD: paramCRDs(t)[0], Namespaces: nss}
	t.Cleanup(s.Stop)
	h := harness(t, s, vapeval.CaseParams{Spec: spec})
	cnpGVK := schema.GroupVersionKind{Group: "cilium.io", Version: "v2", Kind: "CiliumNetworkPolicy"}
	for _, host := range hosts {
		for ns, l := range nsLabels {
			cnp, err := fence.BuildPerSandboxPolicy(fence.PolicyInput{
				Owner:     fence.PolicyOwner{Kind: "SandboxClaim", Name: "claim-a", UID: "6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"},
				Namespace: ns, Hosts: []string{"github.com"},
			})
			if err != nil {
				t.Fatal(err)
			}
			err = h.Validate(context.Background(), vapeval.Request{Operation: admission.Create, Kind: cnpGVK,
				Resource: cnpGVK.GroupVersion().WithResource("ciliumnetworkpolicies"), Namespace: ns, Name: cnp.GetName(),
				Object: cnp, User: &user.DefaultInfo{Name: host.Username}})
			policyBinds := err == nil || !strings.Contains(err.Error(), "may not write CiliumNetworkPolicies in namespace")
			// Host.Binds matches with apimachinery's own label selector.
			if goBinds := host.Binds(ns, l); policyBinds != goBinds {
				t.Errorf("selector %+v in namespace %s %v: the egress policy binds %v, Host.Binds (metav1.LabelSelector) %v",
					*host.NamespaceSelector, ns, l, policyBinds, goBinds)
			}
		}
	}
}
