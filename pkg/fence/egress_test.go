package fence

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestNormalizeHost(t *testing.T) {
	accepted := map[string]string{
		"api.example.com":                "api.example.com",
		"Registry.NPMjs.org":             "registry.npmjs.org",
		".example.com":                   ".example.com",
		".EXAMPLE.com":                   ".example.com",
		"localhost":                      "localhost",
		"a-b.c0":                         "a-b.c0",
		"1.2.3.example":                  "1.2.3.example",
		"x.com":                          "x.com",
		strings.Repeat("a.", 126) + "b":  strings.Repeat("a.", 126) + "b",
		strings.Repeat("a", 63) + ".com": strings.Repeat("a", 63) + ".com",
	}
	for in, want := range accepted {
		got, err := NormalizeHost(in)
		if err != nil || got != want {
			t.Errorf("NormalizeHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	refused := []string{
		"https://example.com", "*.example.com", "example.com:443", ".", "", ".com", "..example.com",
		"*", "10.0.0.1", "example.com.", "-a.com", "a-.com", "a..com", "a_b.com", "exa mple.com",
		"example.com/path", "\u212Aexample.com", "ex\u00e4mple.com", "1.2.3.4", "a.123",
		"." + strings.Repeat("a.", 126) + "bc", strings.Repeat("a.", 126) + "bc",
		strings.Repeat("a", 64) + ".com", "." + strings.Repeat("a", 64) + ".com", "x." + strings.Repeat("b", 64),
	}
	for _, in := range refused {
		if got, err := NormalizeHost(in); err == nil {
			t.Errorf("NormalizeHost(%q) = %q, nil; want an error", in, got)
		}
	}
}

// specPolicy is the contract's per-sandbox policy body with its placeholders filled in.
const specPolicy = `{"apiVersion":"cilium.io/v2","kind":"CiliumNetworkPolicy",
 "metadata":{"name":"namzu-sbx-<uid>","namespace":"<ns>","ownerReferences":[{"apiVersion":"extensions.agents.x-k8s.io/v1beta1","kind":"SandboxClaim","name":"<claim>","uid":"<uid>"}]},
 "spec":{"endpointSelector":{"matchLabels":{"sandbox.namzu.ai/per-sandbox-egress":"<claim>"}},
  "egress":[
   {"toEndpoints":[{"matchLabels":{"k8s:io.kubernetes.pod.namespace":"kube-system","k8s:k8s-app":"kube-dns"}}],
    "toPorts":[{"ports":[{"port":"53","protocol":"ANY"}],"rules":{"dns":[{"matchPattern":"*"}]}}]},
   {"toFQDNs":[{"matchName":"registry.npmjs.org"},{"matchName":"example.com"},{"matchPattern":"*.example.com"}]}]}}`

func parseJSON(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return v
}

func TestBuildPerSandboxPolicy(t *testing.T) {
	claim := PolicyOwner{Kind: OwnerKindSandboxClaim, Name: "claim-1", UID: "0c9a7c6e-5b0e-4c1a-9f57-3c2b1f0e8d11"}
	fill := func(body string, r ...string) string { return strings.NewReplacer(r...).Replace(body) }
	specFor := func(o PolicyOwner) string {
		return fill(specPolicy, "<uid>", o.UID, "<ns>", "work", "<claim>", o.Name)
	}
	tests := []struct {
		name     string
		in       PolicyInput
		want     string
		wantErrs field.ErrorList
	}{
		{
			name: "a claim-owned policy is the contract's body",
			in:   PolicyInput{Owner: claim, Namespace: "work", Hosts: []string{"registry.npmjs.org", ".example.com"}},
			want: specFor(claim),
		},
		{
			name: "a sandbox-owned policy pairs kind Sandbox with agents.x-k8s.io/v1beta1",
			in:   PolicyInput{Owner: PolicyOwner{Kind: OwnerKindSandbox, Name: "sb", UID: "u1"}, Namespace: "work", Hosts: []string{"Registry.NPMjs.org", ".example.com"}},
			want: fill(specPolicy, "extensions.agents.x-k8s.io/v1beta1", "agents.x-k8s.io/v1beta1", `"SandboxClaim"`, `"Sandbox"`,
				"<uid>", "u1", "<ns>", "work", "<claim>", "sb"),
		},
		{
			name: "a configured label key replaces the default",
			in:   PolicyInput{Owner: claim, Namespace: "work", LabelKey: "egress.example/owner", Hosts: []string{"registry.npmjs.org", ".example.com"}},
			want: fill(specFor(claim), DefaultPerSandboxLabelKey, "egress.example/owner"),
		},
		{
			name: "repeated selectors are dropped and input order is kept",
			in: PolicyInput{Owner: claim, Namespace: "work",
				Hosts: []string{"registry.npmjs.org", "REGISTRY.npmjs.org", "example.com", ".example.com", ".Example.com"}},
			want: specFor(claim),
		},
		{
			name: "every bad host is named by index and value",
			in:   PolicyInput{Owner: claim, Namespace: "work", Hosts: []string{"ok.com", "*.example.com", "10.0.0.1"}},
			wantErrs: field.ErrorList{
				field.Invalid(field.NewPath("hosts").Index(1), "*.example.com", ""),
				field.Invalid(field.NewPath("hosts").Index(2), "10.0.0.1", ""),
			},
		},
		{
			name:     "no host at all is refused: removing egress is a DELETE",
			in:       PolicyInput{Owner: claim, Namespace: "work"},
			wantErrs: field.ErrorList{field.Required(field.NewPath("hosts"), "")},
		},
		{
			name: "a foreign owner kind, a missing uid and a missing namespace are refused",
			in:   PolicyInput{Owner: PolicyOwner{Kind: "Pod", Name: "p"}, Hosts: []string{"a.com"}},
			wantErrs: field.ErrorList{
				field.NotSupported[string](field.NewPath("owner", "kind"), "Pod", nil),
				field.Required(field.NewPath("owner", "uid"), ""),
				field.Required(field.NewPath("namespace"), ""),
			},
		},
		{
			name: "an owner name that is no label value and a bad label key are refused",
			in: PolicyInput{Owner: PolicyOwner{Kind: OwnerKindSandbox, Name: strings.Repeat("n", 64), UID: "u"},
				Namespace: "work", LabelKey: "bad key", Hosts: []string{"a.com"}},
			wantErrs: field.ErrorList{
				field.Invalid(field.NewPath("owner", "name"), strings.Repeat("n", 64), ""),
				field.Invalid(field.NewPath("labelKey"), "bad key", ""),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj, errs := buildPerSandboxPolicy(tt.in)
			if diff := cmp.Diff(tt.wantErrs, errs, ignoreDetail); diff != "" {
				t.Fatalf("errors (-want +got):\n%s", diff)
			}
			if tt.want == "" {
				return
			}
			body, err := json.Marshal(obj.Object)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(parseJSON(t, tt.want), parseJSON(t, string(body))); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildPerSandboxPolicyErrorNamesEntry(t *testing.T) {
	_, err := BuildPerSandboxPolicy(PolicyInput{Owner: PolicyOwner{Kind: OwnerKindSandbox, Name: "a", UID: "u"}, Namespace: "n", Hosts: []string{"a.com", "https://b.com"}})
	if err == nil || !strings.Contains(err.Error(), `hosts[1]: Invalid value: "https://b.com"`) {
		t.Errorf("error %v does not name hosts[1] and its value", err)
	}
}
