package policies_test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandbox-fence/sandbox-fence/internal/policyconfig"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
)

// installed summarises what a rendering installs: kind/name of every object,
// for each binding the policy it names, and for each policy the controller
// renders the FenceConfig it is rendered from.
type installed struct {
	Objects  []string
	Bindings map[string]string
	Configs  map[string]string
}

func summarise(t *testing.T, objs []*unstructured.Unstructured) installed {
	t.Helper()
	out := installed{Bindings: map[string]string{}, Configs: map[string]string{}}
	for _, r := range objs {
		out.Objects = append(out.Objects, r.GetKind()+"/"+r.GetName())
		if c, ok := r.GetLabels()[policyconfig.RenderLabel]; ok && r.GetKind() == "ValidatingAdmissionPolicy" {
			out.Configs[r.GetName()] = c
		}
		if r.GetKind() != "ValidatingAdmissionPolicyBinding" {
			continue
		}
		policy, ok, err := unstructured.NestedString(r.Object, "spec", "policyName")
		if err != nil || !ok {
			t.Fatalf("binding %s: spec.policyName: %v", r.GetName(), err)
		}
		out.Bindings[r.GetName()] = policy
	}
	sort.Strings(out.Objects)
	return out
}

// overlayDirs holds the directory overlay writes into, one per test.
var overlayDirs = map[*testing.T]string{}

// relTo is rel (from policies/) relative to the test's overlay directory:
// kustomize refuses an absolute path; a relative one may leave the root.
func relTo(t *testing.T, rel string) string {
	t.Helper()
	abs, err := filepath.Abs(rel)
	if err != nil {
		t.Fatal(err)
	}
	p, err := filepath.Rel(overlayDir(t), abs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func overlayDir(t *testing.T) string {
	if d, ok := overlayDirs[t]; ok {
		return d
	}
	d := t.TempDir()
	overlayDirs[t] = d
	t.Cleanup(func() { delete(overlayDirs, t) })
	return d
}

// overlay writes a kustomization over config/vap into a temporary directory.
func overlay(t *testing.T, body string) string {
	t.Helper()
	dir := overlayDir(t)
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " + relTo(t, "../config/vap") + "\n" + body
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// shippedBundle is what config/vap installs.
var shippedBundle = installed{
	Objects: []string{
		"ClusterRole/sandbox-fence-kubectl-fence",
		"CustomResourceDefinition/fenceconfigs.fence.sandbox.namzu.ai",
		"FenceConfig/sandbox-fence",
		"ValidatingAdmissionPolicy/sandbox-fence-cilium-egress",
		"ValidatingAdmissionPolicy/sandbox-fence-cilium-owner",
		"ValidatingAdmissionPolicy/sandbox-fence-holder-epoch",
		"ValidatingAdmissionPolicy/sandbox-fence-holder-epoch-repair",
		"ValidatingAdmissionPolicy/sandbox-fence-strict-delete",
		"ValidatingAdmissionPolicyBinding/sandbox-fence-cilium-egress-binding",
		"ValidatingAdmissionPolicyBinding/sandbox-fence-cilium-owner-binding",
		"ValidatingAdmissionPolicyBinding/sandbox-fence-holder-epoch-binding",
		"ValidatingAdmissionPolicyBinding/sandbox-fence-holder-epoch-repair-binding",
	},
	Bindings: map[string]string{
		"sandbox-fence-cilium-egress-binding":       "sandbox-fence-cilium-egress",
		"sandbox-fence-cilium-owner-binding":        "sandbox-fence-cilium-owner",
		"sandbox-fence-holder-epoch-binding":        "sandbox-fence-holder-epoch",
		"sandbox-fence-holder-epoch-repair-binding": "sandbox-fence-holder-epoch-repair",
	},
	Configs: map[string]string{
		"sandbox-fence-cilium-egress":       "sandbox-fence",
		"sandbox-fence-cilium-owner":        "sandbox-fence",
		"sandbox-fence-holder-epoch-repair": "sandbox-fence",
		"sandbox-fence-strict-delete":       "sandbox-fence",
	},
}

func TestKustomizeRendersTheBundle(t *testing.T) {
	want := shippedBundle
	if diff := cmp.Diff(want, summarise(t, tst.Kustomize(t, "../config/vap"))); diff != "" {
		t.Errorf("kustomize build config/vap (-want +got):\n%s", diff)
	}
	// config/default installs all of config/vap, unchanged, plus the webhook.
	def := summarise(t, tst.Kustomize(t, "../config/default"))
	have := map[string]bool{}
	for _, o := range def.Objects {
		have[o] = true
	}
	for _, o := range want.Objects {
		if !have[o] {
			t.Errorf("kustomize build config/default lacks %s", o)
		}
	}
	if diff := cmp.Diff(want.Bindings, def.Bindings); diff != "" {
		t.Errorf("kustomize build config/default bindings (-want +got):\n%s", diff)
	}
}

// TestKustomizeNamePrefixRenamesReferences: an installation renames the
// policies with namePrefix and every binding follows, and so does the
// FenceConfig each rendered policy names; the CRD keeps its name (the API server requires <plural>.<group>).
// The binding stays "<policy name>-binding", which the host looks up before
// writing its policy.
func TestKustomizeNamePrefixRenamesReferences(t *testing.T) {
	got := summarise(t, tst.Kustomize(t, overlay(t, "namePrefix: acme-\n")))
	want := installed{Bindings: map[string]string{}, Configs: map[string]string{}}
	for _, o := range shippedBundle.Objects {
		if kind, name, _ := strings.Cut(o, "/"); kind != "CustomResourceDefinition" {
			o = kind + "/acme-" + name
		}
		want.Objects = append(want.Objects, o)
	}
	for b, p := range shippedBundle.Bindings {
		want.Bindings["acme-"+b] = "acme-" + p
	}
	for p, c := range shippedBundle.Configs {
		want.Configs["acme-"+p] = "acme-" + c
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("namePrefix overlay (-want +got):\n%s", diff)
	}
}

// TestKustomizePatchRenamesReferences: a plain patch of a policy's name is
// followed by its binding too.
func TestKustomizePatchRenamesReferences(t *testing.T) {
	got := summarise(t, tst.Kustomize(t, overlay(t, `patches:
- target: {kind: ValidatingAdmissionPolicy, name: sandbox-fence-cilium-egress}
  patch: |-
    - op: replace
      path: /metadata/name
      value: egress-fence
- target: {kind: FenceConfig, name: sandbox-fence}
  patch: |-
    - op: replace
      path: /metadata/name
      value: fence-config
`)))
	want := installed{Objects: got.Objects,
		Bindings: map[string]string{
			"sandbox-fence-cilium-egress-binding":       "egress-fence",
			"sandbox-fence-cilium-owner-binding":        "sandbox-fence-cilium-owner",
			"sandbox-fence-holder-epoch-binding":        "sandbox-fence-holder-epoch",
			"sandbox-fence-holder-epoch-repair-binding": "sandbox-fence-holder-epoch-repair",
		},
		Configs: map[string]string{
			"egress-fence":                      "fence-config",
			"sandbox-fence-cilium-owner":        "fence-config",
			"sandbox-fence-holder-epoch-repair": "fence-config",
			"sandbox-fence-strict-delete":       "fence-config",
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rename patch (-want +got):\n%s", diff)
	}
}

// TestStrictDeleteComponentBindsThePolicy: config/vap installs the strict
// delete policy unbound (strict delete is off by default); the component adds
// exactly its binding, which follows a rename like the others.
func TestStrictDeleteComponentBindsThePolicy(t *testing.T) {
	got := summarise(t, tst.Kustomize(t, overlay(t, "namePrefix: acme-\ncomponents:\n- "+relTo(t, "../config/vap/components/strict-delete")+"\n")))
	if diff := cmp.Diff("acme-sandbox-fence-strict-delete", got.Bindings["acme-sandbox-fence-strict-delete-binding"]); diff != "" {
		t.Errorf("strict-delete binding (-want +got):\n%s", diff)
	}
	if _, ok := summarise(t, tst.Kustomize(t, "../config/default")).Bindings["sandbox-fence-strict-delete-binding"]; ok {
		t.Error("config/default binds strict delete: it must stay opt-in")
	}
}
