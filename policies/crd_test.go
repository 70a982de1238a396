package policies_test

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/sandbox-fence/sandbox-fence/config"
	"github.com/sandbox-fence/sandbox-fence/internal/kubeversion"
	"github.com/sandbox-fence/sandbox-fence/internal/policyconfig"
	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

const fenceConfigCRD = "../config/" + config.FenceConfigCRD

// TestCRDsAreValid: the test CRDs (and the FenceConfig CRD) pass the API
// server's CRD validation, so the end-to-end control plane accepts them.
func TestCRDsAreValid(t *testing.T) {
	paths, err := filepath.Glob("../config/crd/testdata/*_*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, fenceConfigCRD)
	for _, crd := range loadCRDs(t, paths...) {
		errs, err := vapeval.ValidateCRD(crd)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range errs {
			t.Errorf("%s: %v", crd.Name, e)
		}
	}
}

// TestFenceConfigsAreValid: every FenceConfig the tests run under, and the
// shipped default, is one the API server would store; a case under an
// impossible configuration would prove nothing.
func TestFenceConfigsAreValid(t *testing.T) {
	crd := loadCRDs(t, fenceConfigCRD)[0]
	shipped, err := vapeval.LoadObjects("../config/vap/fenceconfig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	def := defaultParams(t)
	configs := map[string]*unstructured.Unstructured{
		"config/vap/fenceconfig.yaml":        shipped[0],
		"policies/testdata/fenceconfig.yaml": def,
		"TestCELCost's largest config":       bigParams(def),
	}
	for _, dir := range policyDirs(t) {
		cases, err := vapeval.LoadCases(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			if c.Params.Spec != nil && !c.Params.Preexisting {
				o := def.DeepCopy()
				o.Object["spec"] = runtime.DeepCopyJSONValue(c.Params.Spec)
				configs[c.File] = o
			}
		}
	}
	for name, o := range configs {
		errs, err := vapeval.ValidateObject(crd, o.Object)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range errs {
			t.Errorf("%s: %v", name, e)
		}
	}
}

// TestFenceConfigValidationRefuses shows the check above can fail: the
// schema's patterns and its CEL rule are both applied.
func TestFenceConfigValidationRefuses(t *testing.T) {
	crd := loadCRDs(t, fenceConfigCRD)[0]
	tests := []struct {
		name string
		spec map[string]any
		want []string
	}{
		{"a host listed as break-glass user", map[string]any{
			"hosts":      []any{map[string]any{"username": "system:serviceaccount:a:h", "namespaces": []any{"a"}}},
			"breakGlass": map[string]any{"users": []any{"system:serviceaccount:a:h"}},
		}, []string{"spec.breakGlass.users"}},
		{"a namespace that is not a DNS label and a host without namespaces", map[string]any{
			"hosts": []any{map[string]any{"username": "system:serviceaccount:a:h", "namespaces": []any{"Bad_NS"}}, map[string]any{"username": "system:serviceaccount:a:g"}},
		}, []string{"spec.hosts[0].namespaces[0]", "spec.hosts[1].namespaces"}},
		{"a label key that is not a qualified name", map[string]any{"perSandboxLabelKey": "a b"}, []string{"spec.perSandboxLabelKey"}},
		// Labels Cilium derives itself select pods nobody labelled.
		{"a label key Cilium derives: a pod's namespace", map[string]any{"perSandboxLabelKey": "io.kubernetes.pod.namespace"}, []string{"spec.perSandboxLabelKey"}},
		{"a label key Cilium derives: a policy's name", map[string]any{"perSandboxLabelKey": "io.cilium.k8s.policy.name"}, []string{"spec.perSandboxLabelKey"}},
		// Break-glass is for a named few.
		{"break-glass groups everyone or every ServiceAccount is in, and system:masters", map[string]any{
			"breakGlass": map[string]any{"groups": []any{"system:authenticated", "ops"}},
		}, []string{"spec.breakGlass.groups"}},
		{"break-glass for the ServiceAccounts of a namespace", map[string]any{
			"breakGlass": map[string]any{"groups": []any{"system:serviceaccounts:sandboxes"}},
		}, []string{"spec.breakGlass.groups"}},
		{"break-glass for system:masters", map[string]any{
			"breakGlass": map[string]any{"groups": []any{"system:masters"}},
		}, []string{"spec.breakGlass.groups"}},
		{"a break-glass user with a control character", map[string]any{
			"breakGlass": map[string]any{"users": []any{"alice\nbob"}},
		}, []string{"spec.breakGlass.users[0]"}},
		// docs/install.md, Limits: the rendering must fit one CEL expression.
		{"513 namespaces in all", map[string]any{"hosts": manyNamespaces(513)}, []string{"spec.hosts"}},
		{"33 namespaceSelector terms in all", map[string]any{"hosts": manySelectorTerms(33)}, []string{"spec.hosts"}},
		{"5 matchLabels, 5 matchExpressions and 9 values in one selector", map[string]any{
			"hosts": []any{map[string]any{"username": "system:serviceaccount:a:h", "namespaceSelector": map[string]any{
				"matchLabels": map[string]any{"a": "v", "b": "v", "c": "v", "d": "v", "e": "v"},
				"matchExpressions": []any{
					map[string]any{"key": "a", "operator": "In", "values": []any{"1", "2", "3", "4", "5", "6", "7", "8", "9"}},
					map[string]any{"key": "b", "operator": "Exists"}, map[string]any{"key": "c", "operator": "Exists"},
					map[string]any{"key": "d", "operator": "Exists"}, map[string]any{"key": "e", "operator": "Exists"},
				}}}},
		}, []string{"spec.hosts[0].namespaceSelector.matchExpressions", "spec.hosts[0].namespaceSelector.matchExpressions[0].values",
			"spec.hosts[0].namespaceSelector.matchLabels"}},
		// An empty selector would bind the host in every namespace; a
		// requirement's values follow its operator, as in metav1.LabelSelector.
		{"an empty namespaceSelector, an operator In without values, Exists with values, an unknown operator", map[string]any{
			"hosts": []any{
				map[string]any{"username": "system:serviceaccount:a:h", "namespaceSelector": map[string]any{}},
				map[string]any{"username": "system:serviceaccount:a:g", "namespaceSelector": map[string]any{"matchExpressions": []any{
					map[string]any{"key": "tier", "operator": "In"},
					map[string]any{"key": "tier", "operator": "Exists", "values": []any{"gold"}},
					map[string]any{"key": "tier", "operator": "Gt"},
				}}},
			},
		}, []string{"spec.hosts[0].namespaceSelector", "spec.hosts[1].namespaceSelector.matchExpressions[0]",
			"spec.hosts[1].namespaceSelector.matchExpressions[1]", "spec.hosts[1].namespaceSelector.matchExpressions[2].operator"}},
		{"a matchLabels value that is no label value and a key over 317 characters", map[string]any{
			"hosts": []any{map[string]any{"username": "system:serviceaccount:a:h", "namespaceSelector": map[string]any{
				"matchLabels": map[string]any{"tier": "a b", strings.Repeat("k", 318): "v"}}}},
		}, []string{"spec.hosts[0].namespaceSelector.matchLabels", "spec.hosts[0].namespaceSelector.matchLabels.tier"}},
		// The webhook routes only ServiceAccounts outside kube-system, so
		// the schema refuses every other host identity.
		{"hosts that are no ServiceAccount: an x509 user, an OIDC user, a group-like name", map[string]any{
			"hosts": []any{
				map[string]any{"username": "sandbox-host", "namespaces": []any{"a"}},
				map[string]any{"username": "oidc:alice@example.com", "namespaces": []any{"a"}},
				map[string]any{"username": "system:serviceaccounts:a", "namespaces": []any{"a"}},
			},
		}, []string{"spec.hosts[0].username", "spec.hosts[1].username", "spec.hosts[2].username"}},
		{"ServiceAccount names cut short or not DNS names", map[string]any{
			"hosts": []any{
				map[string]any{"username": "system:serviceaccount:a", "namespaces": []any{"a"}},
				map[string]any{"username": "system:serviceaccount:a:", "namespaces": []any{"a"}},
				map[string]any{"username": "system:serviceaccount:A:h", "namespaces": []any{"a"}},
				map[string]any{"username": "system:serviceaccount:a:h:x", "namespaces": []any{"a"}},
			},
		}, []string{"spec.hosts[0].username", "spec.hosts[1].username", "spec.hosts[2].username", "spec.hosts[3].username"}},
		{"a kube-system ServiceAccount and the webhook's own", map[string]any{
			"hosts": []any{
				map[string]any{"username": "system:serviceaccount:kube-system:generic-garbage-collector", "namespaces": []any{"a"}},
				map[string]any{"username": "system:serviceaccount:sandbox-fence-system:sandbox-fence-webhook", "namespaces": []any{"a"}},
			},
		}, []string{"spec.hosts[0].username", "spec.hosts[1].username"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := defaultParams(t)
			o.Object["spec"] = tt.spec
			errs, err := vapeval.ValidateObject(crd, o.Object)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range errs {
				got = append(got, e.Field)
			}
			sort.Strings(got)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("refused fields (-want +got):\n%s\n%v", diff, errs)
			}
		})
	}
}

// TestPreexistingFenceConfigsAreRefused: a case marked params.preexisting
// runs under a configuration from before the current schema (kept by CRD
// validation ratcheting). It shows something only if today's schema really
// refuses that configuration; otherwise it must be an ordinary case.
func TestPreexistingFenceConfigsAreRefused(t *testing.T) {
	crd := loadCRDs(t, fenceConfigCRD)[0]
	def := defaultParams(t)
	n := 0
	for _, dir := range policyDirs(t) {
		cases, err := vapeval.LoadCases(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			if !c.Params.Preexisting {
				continue
			}
			n++
			o := def.DeepCopy()
			o.Object["spec"] = runtime.DeepCopyJSONValue(c.Params.Spec)
			errs, err := vapeval.ValidateObject(crd, o.Object)
			if err != nil {
				t.Fatal(err)
			}
			if len(errs) == 0 {
				t.Errorf("%s: params.preexisting, but the FenceConfig schema accepts this spec: drop preexisting", c.File)
			}
		}
	}
	if n == 0 {
		t.Error("no case runs under a preexisting FenceConfig: the policies' handling of one is untested")
	}
}

// The label key is defined once: the FenceConfig CRD defaults it to the
// host library's key, the API server fills it into every FenceConfig it
// serves (the shipped one, with spec: {}, included), and the egress policy
// and the webhook read it without a fallback of their own.
func TestTheCRDDefaultIsTheHostLibrarysLabelKey(t *testing.T) {
	crd := loadCRDs(t, fenceConfigCRD)[0]
	shipped, err := vapeval.LoadObjects("../config/vap/fenceconfig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	custom := shipped[0].DeepCopy()
	custom.Object["spec"] = map[string]any{"perSandboxLabelKey": "example.com/egress"}
	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		want string
	}{
		{"the shipped FenceConfig, spec: {}, gets the host library's key", shipped[0], fence.DefaultPerSandboxLabelKey},
		{"a FenceConfig naming its own key keeps it", custom, "example.com/egress"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := tc.obj.DeepCopy()
			if err := vapeval.DefaultObject(crd, obj.Object); err != nil {
				t.Fatal(err)
			}
			got, _, _ := unstructured.NestedString(obj.Object, "spec", "perSandboxLabelKey")
			if got != tc.want {
				t.Errorf("served spec.perSandboxLabelKey = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestFenceConfigCRDCompilesFromTheMinimumOnly: the FenceConfig CRD is the
// install's version gate (its first rule, api/v1alpha1). An API server of
// the oldest supported release (kubeversion.Minimum) and this library's own
// compile every rule of it for a new CRD; one a minor older refuses exactly
// the gate, whose message names the minimum. So kubectl's first install
// step and Helm's crds/ stop on an older cluster before anything else is
// created, with that message (docs/install.md, Prerequisites).
func TestFenceConfigCRDCompilesFromTheMinimumOnly(t *testing.T) {
	crd := loadCRDs(t, fenceConfigCRD)[0]
	oldest := kubeversion.MinimumCompatibility()
	for _, v := range []*version.Version{oldest, environment.DefaultCompatibilityVersion()} {
		problems, err := vapeval.CompileCRDForCreate(crd, v)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("compatibility version %s (a server of the supported releases) refuses the CRD: %s", v, p)
		}
	}
	below := version.MajorMinor(oldest.Major(), oldest.Minor()-1)
	problems, err := vapeval.CompileCRDForCreate(crd, below)
	if err != nil {
		t.Fatal(err)
	}
	minimum := version.MustParseGeneric(kubeversion.Minimum)
	wantMessage := fmt.Sprintf("sandbox-fence needs Kubernetes %d.%d or later", minimum.Major(), minimum.Minor())
	if len(problems) != 1 || !strings.Contains(problems[0], "properties[spec].x-kubernetes-validations[0].rule:") || !strings.Contains(problems[0], wantMessage) {
		t.Errorf("at compatibility version %s (a server one minor older than %s) the CRD must fail on exactly its version gate, "+
			"spec's first rule, whose message says %q; it fails on %d rules: %q", below, kubeversion.Minimum, wantMessage, len(problems), problems)
	}
}

// TestTheLargestConfigurationRenders holds the FenceConfig schema's bounds
// to what the policies can carry: a configuration at every limit at once
// (TestCELCost's largest, which TestFenceConfigsAreValid requires the
// schema to accept) renders into a CEL constant below the parser's limit,
// so no valid FenceConfig is ever left Invalid for its size.
func TestTheLargestConfigurationRenders(t *testing.T) {
	c := bigConfig(t)
	if c.State != policyconfig.Rendered {
		t.Fatalf("the largest valid FenceConfig is %s: %s", c.State, c.Reason)
	}
	n := utf8.RuneCountInString(c.Expression())
	t.Logf("the largest valid FenceConfig renders to %d of %d code points", n, policyconfig.MaxExpressionSize)
	// One more namespace of the longest name, beyond the schema's 512, is
	// what the margin must hold for no reason; a tenth of the limit.
	if n > policyconfig.MaxExpressionSize*9/10 {
		t.Errorf("the largest valid FenceConfig renders to %d code points: less than a tenth of the limit (%d) is left", n, policyconfig.MaxExpressionSize)
	}
}

// manySelectorTerms is hosts whose namespaceSelectors hold n terms in all,
// 4 matchLabels entries to a host.
func manySelectorTerms(n int) []any {
	var hosts []any
	for i := 0; n > 0; i++ {
		ml := map[string]any{}
		for j := 0; j < 4 && n > 0; j, n = j+1, n-1 {
			ml[fmt.Sprintf("k%d", j)] = "v"
		}
		hosts = append(hosts, map[string]any{"username": fmt.Sprintf("system:serviceaccount:h%d:host", i),
			"namespaceSelector": map[string]any{"matchLabels": ml}})
	}
	return hosts
}

// manyNamespaces is hosts of 64 namespaces each, n namespaces in all.
func manyNamespaces(n int) []any {
	var hosts []any
	for i := 0; n > 0; i++ {
		var nss []any
		for j := 0; j < 64 && n > 0; j, n = j+1, n-1 {
			nss = append(nss, fmt.Sprintf("ns-%d-%d", i, j))
		}
		hosts = append(hosts, map[string]any{"username": fmt.Sprintf("system:serviceaccount:h%d:host", i), "namespaces": nss})
	}
	return hosts
}
