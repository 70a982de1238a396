package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fence/sandbox-fence/hack/chart/render"
	"github.com/sandbox-fence/sandbox-fence/internal/enforcement"
	"github.com/sandbox-fence/sandbox-fence/internal/kubeversion"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
)

// kubeVersion is the pinned release (hack/tools/kubernetes): Helm's client-only
// default, v1.20, is below the chart's kubeVersion.
var kubeVersion = &chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}

const (
	root     = "../.."
	chartDir = "../../charts/sandbox-fence"
)

// The committed chart is the generator's output (make chart): a change to
// config/ that was not regenerated fails here.
func TestChartIsCurrent(t *testing.T) {
	want, err := Generate(filepath.Join(root, "config"), "0.0.0-dev", "", "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	err = filepath.Walk(chartDir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(chartDir, p)
		got[rel], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		t.Fatalf("%v (run make chart)", err)
	}
	for name := range want {
		if !bytes.Equal(want[name], got[name]) {
			t.Errorf("charts/sandbox-fence/%s is stale or missing: run make chart", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("charts/sandbox-fence/%s is not generated: run make chart", name)
		}
	}
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// helmTemplate is `helm template -n sandbox-fence-system --include-crds`
// through Helm's own install action (dry run, no cluster), parsed into
// objects.
func helmTemplate(t *testing.T, ch *chart.Chart, vals map[string]any, apiVersions ...string) []*unstructured.Unstructured {
	t.Helper()
	return helmTemplateIn(t, ch, render.Namespace, vals, apiVersions...)
}

func helmTemplateIn(t *testing.T, ch *chart.Chart, namespace string, vals map[string]any, apiVersions ...string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render.TemplateIn(ch, namespace, vals, kubeVersion, apiVersions...)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, m := range objs {
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out
}

// byKey indexes objects as kind/namespace/name, normalized through JSON.
func byKey(t *testing.T, objs []*unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, o := range objs {
		b, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		collapseBlankLines(m)
		k := o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
		if _, dup := out[k]; dup {
			t.Errorf("%s rendered twice", k)
		}
		out[k] = m
	}
	return out
}

// compare holds Helm's rendering to kustomize's, object by object, to the
// byte but for what Helm's conventions add: the release namespace is
// Helm's (helm install -n X --create-namespace), not an object of the chart,
// and every object, and the webhook's pod template, carries the standard
// labels (standardLabels), which compare removes where kustomize has none.
func compare(t *testing.T, what string, kustomize, helm []*unstructured.Unstructured) {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, o := range kustomize {
		if o.GetKind() != "Namespace" {
			objs = append(objs, o)
		}
	}
	k, h := byKey(t, objs), byKey(t, helm)
	for key, o := range h {
		if o["kind"] == "CustomResourceDefinition" {
			continue // crds/ is untemplated
		}
		md, _ := o["metadata"].(map[string]any)
		kmd, _ := k[key]["metadata"].(map[string]any)
		if msg := standardLabels(md, kmd); msg != "" {
			t.Errorf("%s: %s: %s", what, key, msg)
		}
		if o["kind"] == "Deployment" {
			pod := o["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)
			var kpod map[string]any
			if k[key] != nil {
				kpod = k[key]["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)
			}
			if msg := standardLabels(pod, kpod); msg != "" {
				t.Errorf("%s: %s pod template: %s", what, key, msg)
			}
		}
	}
	var keys []string
	for key := range k {
		keys = append(keys, key)
	}
	for key := range h {
		if _, ok := k[key]; !ok {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		switch {
		case h[key] == nil:
			t.Errorf("%s: %s rendered by kustomize, not by Helm", what, key)
		case k[key] == nil:
			t.Errorf("%s: %s rendered by Helm, not by kustomize", what, key)
		case !reflect.DeepEqual(k[key], h[key]):
			t.Errorf("%s: %s differs: %s", what, key, firstDiff("", k[key], h[key]))
		}
	}
}

// standardLabels checks that Helm's metadata md carries the standard labels,
// then removes those kustomize's kmd lacks.
func standardLabels(md, kmd map[string]any) string {
	labels, _ := md["labels"].(map[string]any)
	klabels, _ := kmd["labels"].(map[string]any)
	want := map[string]any{
		"app.kubernetes.io/name":       nil, // config/'s where it has one
		"app.kubernetes.io/instance":   "sandbox-fence",
		"app.kubernetes.io/version":    "0.0.0-dev",
		"app.kubernetes.io/managed-by": "Helm",
		"helm.sh/chart":                "sandbox-fence-0.0.0-dev",
	}
	for k, v := range want {
		got, ok := labels[k]
		if !ok || (v != nil && got != v) {
			return fmt.Sprintf("label %s is %v, want %v", k, got, v)
		}
		if _, ok := klabels[k]; !ok {
			delete(labels, k)
		}
	}
	if len(labels) == 0 {
		delete(md, "labels")
	}
	return ""
}

// helm template with the default values renders the same objects as
// kustomize build config/default.
func TestChartDefaultsRenderConfigDefault(t *testing.T) {
	compare(t, "default values", tst.Render(t, filepath.Join(root, "config"), "default"), helmTemplate(t, loadChart(t), nil))
}

// Combo is one value of every switch kustomize offers: webhook on/off,
// cert-controller or cert-manager, strict delete on/off, the webhook's
// network policy on/off, the Cilium baseline on/off, monitoring on/off.
type Combo [6]string

// Combos lists every combination of the switches.
func Combos() []Combo {
	var out []Combo
	for _, w := range []string{"on", "off"} {
		for _, c := range []string{"cert-controller", "cert-manager"} {
			for _, s := range []string{"off", "on"} {
				for _, n := range []string{"off", "on"} {
					for _, b := range []string{"on", "off"} {
						out = append(out, Combo{w, c, s, n, b, "off"})
						// Monitoring needs the webhook with cert-controller.
						if w == "on" && c == "cert-controller" {
							out = append(out, Combo{w, c, s, n, b, "on"})
						}
					}
				}
			}
		}
	}
	return out
}

// Kustomization is what an admin writes for a combo: config/ as config/.
func Kustomization(c Combo, components ...string) map[string]any {
	res := []string{"config/vap"}
	if c[0] == "on" {
		if c[1] == "cert-manager" {
			res = append(res, "config/webhook/overlays/cert-manager")
		} else {
			res = append(res, "config/webhook")
		}
	}
	k := map[string]any{"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": res}
	if c[2] == "on" {
		components = append([]string{"config/vap/components/strict-delete"}, components...)
	}
	if c[0] == "on" && c[3] == "on" {
		components = append(components, "config/components/network-policy")
	}
	if c[4] == "on" {
		components = append(components, "config/components/cilium-baseline")
	}
	if c[5] == "on" {
		components = append(components, "config/components/monitoring")
	}
	if len(components) > 0 {
		k["components"] = components
	}
	return k
}

// Every combination of the switches (Combos), in each enforcement mode (its
// config/components/enforcement component), against the kustomization an
// admin would write for it: this holds the generator's hand-written layer
// conditions, a switch the webhook is off for included.
func TestChartRendersTheKustomizeBundle(t *testing.T) {
	ch := loadChart(t)
	for _, c := range Combos() {
		for _, m := range enforcement.Modes {
			name := fmt.Sprintf("%v/%s", c, m)
			t.Run(name, func(t *testing.T) {
				var comps []string
				if m != enforcement.Deny {
					comps = append(comps, "config/components/enforcement/"+string(m))
				}
				k := Kustomization(c, comps...)
				kobjs := tst.RenderKustomization(t, filepath.Join(root, "config"), k)
				// The strict-delete component binds; the FenceConfig switch
				// is the admin's (docs/install.md): the chart sets both.
				for _, o := range kobjs {
					if o.GetKind() == "FenceConfig" && c[2] == "on" {
						o.Object["spec"] = map[string]any{"strictDelete": true}
					}
				}
				vals := map[string]any{
					"enforcement":   string(m),
					"webhook":       map[string]any{"enabled": c[0] == "on", "certificates": c[1]},
					"strictDelete":  map[string]any{"enabled": c[2] == "on"},
					"networkPolicy": map[string]any{"enabled": c[3] == "on"},
					"monitoring":    map[string]any{"enabled": c[5] == "on"},
				}
				// The baseline's switch is the API server's answer: on
				// where it serves Cilium's clusterwide policies.
				var apis []string
				if c[4] == "on" {
					apis = []string{CiliumClusterwidePolicyAPI}
				}
				compare(t, name, kobjs, helmTemplate(t, ch, vals, apis...))
			})
		}
	}
}

// Any release namespace, any image, no YAML edits: every reference
// follows (the same check as config/install_test.go's for kustomize),
// with either certificate source.
func TestChartAnyNamespaceAnyImage(t *testing.T) {
	ch := loadChart(t)
	const img = "registry.example/x/webhook@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, certs := range []string{"cert-controller", "cert-manager"} {
		t.Run(certs, func(t *testing.T) {
			repo, digest, _ := strings.Cut(img, "@")
			objs := helmTemplateIn(t, ch, "platform-admission", map[string]any{
				"image":   map[string]any{"repository": repo, "digest": digest},
				"webhook": map[string]any{"certificates": certs},
			})
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					t.Errorf("Namespace %s rendered: the release namespace is Helm's", o.GetName())
				}
			}
			// What helm install -n platform-admission --create-namespace creates.
			objs = append(objs, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "platform-admission"},
			}})
			// Helm installs crds/ untemplated: the CRD's rule keeps naming
			// the webhook in sandbox-fence-system (docs/install.md, "Install
			// with Helm"); everything else must follow.
			for _, b := range tst.InstallReferences(objs, tst.Install{Namespace: "platform-admission", Image: img, CertManager: certs == "cert-manager"}) {
				if !strings.Contains(b, "CustomResourceDefinition") {
					t.Error(b)
				}
			}
			if !slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "CustomResourceDefinition" }) {
				t.Error("no CRD rendered")
			}
		})
	}
}

// The values an admin sets beside the switches, each against the
// kustomization that does the same (docs/install.md, "Install with Helm",
// the table's kustomize column), with either certificate source: replicas
// is kustomize's replicas field, priorityClassName a patch of the
// Deployment's pod template, fenceConfig the FenceConfig's spec (hosts and
// break-glass identities, docs/install.md "Configure"). Each kustomization
// must change the default rendering, or a value Helm ignored would compare
// equal to a patch kustomize ignored.
func TestChartValuesRenderTheirKustomizeEquivalent(t *testing.T) {
	ch := loadChart(t)
	fence := map[string]any{
		"hosts": []any{
			map[string]any{"username": "system:serviceaccount:team-a:sandbox-host", "namespaces": []any{"team-a"}},
			map[string]any{"username": "system:serviceaccount:team-b:sandbox-host", "namespaces": []any{"team-b", "team-b-batch"}},
		},
		"breakGlass": map[string]any{"users": []any{"alice@example.com"}, "groups": []any{"platform:sandbox-break-glass"}},
	}
	fenceYAML, err := yaml.Marshal(map[string]any{
		"apiVersion": "fence.sandbox.namzu.ai/v1alpha1", "kind": "FenceConfig",
		"metadata": map[string]any{"name": "sandbox-fence"}, "spec": fence,
	})
	if err != nil {
		t.Fatal(err)
	}
	affinity := map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
		"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "kubernetes.io/arch", "operator": "In", "values": []any{"amd64"}}}}},
	}}}
	affinityJSON, err := json.Marshal(affinity)
	if err != nil {
		t.Fatal(err)
	}
	// The same overrides as a JSON patch: resources merge with the
	// defaults (Helm merges maps; null deletes a key), the lists replace.
	podPatch := `[
{"op": "remove", "path": "/spec/template/spec/containers/0/resources/limits/cpu"},
{"op": "replace", "path": "/spec/template/spec/containers/0/resources/requests/cpu", "value": "100m"},
{"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"pool": "system"}},
{"op": "add", "path": "/spec/template/spec/tolerations", "value": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]},
{"op": "add", "path": "/spec/template/spec/affinity", "value": ` + string(affinityJSON) + `},
{"op": "remove", "path": "/spec/template/spec/topologySpreadConstraints"},
{"op": "add", "path": "/spec/template/spec/imagePullSecrets", "value": [{"name": "registry"}]},
{"op": "add", "path": "/spec/template/metadata/labels/team", "value": "platform"},
{"op": "add", "path": "/spec/template/metadata/annotations", "value": {"example.com/scrape": "true"}}
]`
	for _, certs := range []string{"cert-controller", "cert-manager"} {
		c := Combo{"on", certs, "off", "off", "off"}
		base := byKey(t, tst.RenderKustomization(t, filepath.Join(root, "config"), Kustomization(c)))
		for _, tc := range []struct {
			name   string
			vals   map[string]any
			edit   map[string]any // added to the kustomization
			object string         // what the value changes, kind/namespace/name
		}{
			{
				name:   "replicas 3 is kustomize's replicas",
				vals:   map[string]any{"replicas": 3},
				edit:   map[string]any{"replicas": []map[string]any{{"name": "sandbox-fence-webhook", "count": 3}}},
				object: "Deployment/sandbox-fence-system/sandbox-fence-webhook",
			},
			{
				name: "priorityClassName is a patch of the pod template",
				vals: map[string]any{"priorityClassName": "sandbox-fence-critical"},
				edit: map[string]any{"patches": []map[string]any{{
					"target": map[string]any{"kind": "Deployment", "name": "sandbox-fence-webhook"},
					"patch":  "[{\"op\": \"replace\", \"path\": \"/spec/template/spec/priorityClassName\", \"value\": \"sandbox-fence-critical\"}]",
				}}},
				object: "Deployment/sandbox-fence-system/sandbox-fence-webhook",
			},
			{
				name: "the pod's overrides are a patch of the pod template",
				vals: map[string]any{
					"resources":                 map[string]any{"limits": map[string]any{"cpu": nil}, "requests": map[string]any{"cpu": "100m"}},
					"nodeSelector":              map[string]any{"pool": "system"},
					"tolerations":               []any{map[string]any{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}},
					"affinity":                  affinity,
					"topologySpreadConstraints": []any{},
					"imagePullSecrets":          []any{map[string]any{"name": "registry"}},
					"podLabels":                 map[string]any{"team": "platform", "app.kubernetes.io/name": "ignored"},
					"podAnnotations":            map[string]any{"example.com/scrape": "true"},
				},
				edit: map[string]any{"patches": []map[string]any{{
					"target": map[string]any{"kind": "Deployment", "name": "sandbox-fence-webhook"},
					"patch":  podPatch,
				}}},
				object: "Deployment/sandbox-fence-system/sandbox-fence-webhook",
			},
			{
				name: "serviceAccount.annotations annotate the webhook's ServiceAccount",
				vals: map[string]any{"serviceAccount": map[string]any{"annotations": map[string]any{"iam.example.com/role": "webhook"}}},
				edit: map[string]any{"patches": []map[string]any{{
					"target": map[string]any{"kind": "ServiceAccount", "name": "sandbox-fence-webhook"},
					"patch":  `[{"op": "add", "path": "/metadata/annotations", "value": {"iam.example.com/role": "webhook"}}]`,
				}}},
				object: "ServiceAccount/sandbox-fence-system/sandbox-fence-webhook",
			},
			{
				name: "fenceConfig with hosts and breakGlass is the FenceConfig's spec",
				vals: map[string]any{"fenceConfig": fence},
				edit: map[string]any{"patches": []map[string]any{{
					"target": map[string]any{"kind": "FenceConfig", "name": "sandbox-fence"},
					"patch":  string(fenceYAML),
				}}},
				object: "FenceConfig//sandbox-fence",
			},
			{
				name: "policyReports is the component, its image kustomize's images, its schedule and pull secrets a patch",
				vals: map[string]any{
					"policyReports": map[string]any{"enabled": true, "schedule": "0 * * * *",
						"image": map[string]any{"repository": "registry.example/kubectl-fence", "digest": testDigest}},
					"imagePullSecrets": []any{map[string]any{"name": "registry"}},
				},
				edit: map[string]any{
					"components": []string{"config/components/policy-reports"},
					"images":     []map[string]any{{"name": "sandbox-fence/kubectl-fence", "newName": "registry.example/kubectl-fence", "digest": testDigest}},
					"patches": []map[string]any{{
						"target": map[string]any{"kind": "CronJob", "name": "sandbox-fence-reports"},
						"patch": `[{"op": "replace", "path": "/spec/schedule", "value": "0 * * * *"},
{"op": "add", "path": "/spec/jobTemplate/spec/template/spec/imagePullSecrets", "value": [{"name": "registry"}]}]`,
					}, {
						"target": map[string]any{"kind": "Deployment", "name": "sandbox-fence-webhook"},
						"patch":  `[{"op": "add", "path": "/spec/template/spec/imagePullSecrets", "value": [{"name": "registry"}]}]`,
					}},
				},
				object: "CronJob/sandbox-fence-system/sandbox-fence-reports",
			},
		} {
			t.Run(certs+"/"+tc.name, func(t *testing.T) {
				k := Kustomization(c)
				for key, v := range tc.edit {
					k[key] = v
				}
				kobjs := tst.RenderKustomization(t, filepath.Join(root, "config"), k)
				if got := byKey(t, kobjs)[tc.object]; got == nil || reflect.DeepEqual(got, base[tc.object]) {
					t.Fatalf("the kustomization %v leaves %s as the defaults render it", tc.edit, tc.object)
				}
				vals := map[string]any{"webhook": map[string]any{"certificates": certs}}
				for key, v := range tc.vals {
					vals[key] = v
				}
				compare(t, tc.name, kobjs, helmTemplate(t, ch, vals))
			})
		}
	}
}

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// Helm's own linter finds nothing above INFO, with the default values and
// with every switch flipped.
func TestChartLints(t *testing.T) {
	for _, vals := range []map[string]any{nil, {
		"enforcement":   "audit",
		"webhook":       map[string]any{"certificates": "cert-manager"},
		"strictDelete":  map[string]any{"enabled": true},
		"tolerations":   []any{map[string]any{"key": "dedicated", "operator": "Exists"}},
		"policyReports": map[string]any{"enabled": true},
	}} {
		res := lint.AllWithKubeVersion(chartDir, vals, "default", kubeVersion)
		for _, m := range res.Messages {
			if m.Severity > support.InfoSev {
				t.Errorf("helm lint %v: %s", vals, m)
			}
		}
	}
	// helm lint --set resources=1 fails on the schema.
	res := lint.AllWithKubeVersion(chartDir, map[string]any{"resources": 1}, "default", kubeVersion)
	if res.HighestSeverity < support.ErrorSev {
		t.Errorf("helm lint --set resources=1: %v, want an error from values.schema.json", res.Messages)
	}
}

// values.schema.json: a value outside the modes or the certificate sources,
// a key the chart does not have (namespace.name, which the release
// namespace replaced), a wrong type: the install fails and says which value.
func TestChartRefusesBadValues(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{
		{map[string]any{"enforcement": "enforce"}, `at '/enforcement': value must be one of 'deny', 'warn', 'audit'`},
		{map[string]any{"webhook": map[string]any{"certificates": "vault"}}, `at '/webhook/certificates': value must be one of 'cert-controller', 'cert-manager'`},
		// A key the chart does not have, a wrong type.
		{map[string]any{"namespace": map[string]any{"name": "platform-admission"}}, `additional properties 'namespace' not allowed`},
		{map[string]any{"replicas": "two"}, `replicas`},
		{map[string]any{"tolerations": map[string]any{"key": "dedicated"}}, `tolerations`},
		{map[string]any{"serviceAccount": map[string]any{"annotation": map[string]any{}}}, `additional properties 'annotation' not allowed`},
		// Monitoring the chart cannot render rightly: refused, not dropped.
		{map[string]any{"monitoring": map[string]any{"enabled": true}, "webhook": map[string]any{"certificates": "cert-manager"}}, `monitoring.enabled needs webhook.enabled`},
		{map[string]any{"monitoring": map[string]any{"enabled": true}, "webhook": map[string]any{"enabled": false}}, `monitoring.enabled needs webhook.enabled`},
	} {
		inst := action.NewInstall(&action.Configuration{})
		inst.DryRun, inst.ClientOnly, inst.ReleaseName, inst.Namespace = true, true, "sandbox-fence", "default"
		inst.KubeVersion = kubeVersion
		_, err := inst.Run(ch, tc.vals)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %v: error %v, want one containing %q", tc.vals, err, tc.want)
		}
	}
}

// firstDiff names the first field where kustomize's a and Helm's b differ.
func firstDiff(path string, a, b any) string {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: kustomize %v, helm %v", path, a, b)
		}
		keys := map[string]bool{}
		for k := range av {
			keys[k] = true
		}
		for k := range bv {
			keys[k] = true
		}
		var sorted []string
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			if !reflect.DeepEqual(av[k], bv[k]) {
				return firstDiff(path+"."+k, av[k], bv[k])
			}
		}
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return fmt.Sprintf("%s: kustomize %v, helm %v", path, a, b)
		}
		for i := range av {
			if !reflect.DeepEqual(av[i], bv[i]) {
				return firstDiff(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i])
			}
		}
	}
	return fmt.Sprintf("%s: kustomize %q, helm %q", path, fmt.Sprint(a), fmt.Sprint(b))
}

// collapseBlankLines turns "\n\n" into "\n" in every string: kustomize's
// patches (the enforcement components) re-encode the policies' folded CEL
// with an extra line break before a more-indented line. CEL reads line
// breaks as blanks, so the expressions mean the same; everything else must
// match to the byte.
func collapseBlankLines(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok {
				x[k] = collapse(s)
			} else {
				collapseBlankLines(e)
			}
		}
	case []any:
		for i, e := range x {
			if s, ok := e.(string); ok {
				x[i] = collapse(s)
			} else {
				collapseBlankLines(e)
			}
		}
	}
}

func collapse(s string) string {
	for strings.Contains(s, "\n\n") {
		s = strings.ReplaceAll(s, "\n\n", "\n")
	}
	return s
}

// On a cluster older than the policies support (internal/kubeversion)
// helm install stops before it creates anything, naming the version it
// needs; the supported minimum installs.
func TestTheChartRefusesAClusterOlderThanThePoliciesSupport(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range []struct {
		name    string
		version *chartutil.KubeVersion
		refused bool
	}{
		{"v1.32.9, one minor below the minimum, is refused", &chartutil.KubeVersion{Version: "v1.32.9", Major: "1", Minor: "32"}, true},
		{"the minimum installs", &chartutil.KubeVersion{Version: kubeversion.Minimum, Major: "1", Minor: "33"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := action.NewInstall(&action.Configuration{})
			inst.DryRun, inst.ClientOnly, inst.IncludeCRDs, inst.Replace = true, true, true, true
			inst.ReleaseName, inst.Namespace = "sandbox-fence", "default"
			inst.KubeVersion = tc.version
			_, err := inst.Run(ch, nil)
			switch {
			case tc.refused && (err == nil || !strings.Contains(err.Error(), ">="+strings.TrimPrefix(kubeversion.Minimum, "v"))):
				t.Errorf("helm install on %s: got %v, want a refusal naming >=%s", tc.version.Version, err, kubeversion.Minimum)
			case !tc.refused && err != nil:
				t.Errorf("helm install on %s: %v", tc.version.Version, err)
			}
		})
	}
}
