package vapeval

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The verdict comparison is what every case relies on; these show it fails
// when it should.
func TestCaseProblems(t *testing.T) {
	denied := func(msgs ...string) *Case {
		return &Case{Expect: Expect{Code: 422, Messages: msgs, Policy: "p"}}
	}
	const prefix = `x "y" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'p-binding' denied request: `
	tests := []struct {
		name string
		c    *Case
		v    Verdict
		want []string
	}{
		{"an expected denial with its code, message and policy has no problem", denied("holder-epoch: a"),
			Verdict{Code: 422, Reason: metav1.StatusReasonInvalid, Message: prefix + "holder-epoch: a b"}, nil},
		{"an admission where a denial is expected is a problem", denied("holder-epoch: a"),
			Verdict{Allowed: true}, []string{"admitted, want denied"}},
		{"a denial where an admission is expected is a problem", &Case{Expect: Expect{Allowed: true}},
			Verdict{Code: 422, Reason: metav1.StatusReasonInvalid, Message: prefix + "holder-epoch: a"},
			[]string{"denied (422 Invalid): " + prefix + "holder-epoch: a; want admitted"}},
		{"a missing substring, another policy, a wrong code and an unprefixed 403 are all reported", denied("zzz"),
			Verdict{Code: 403, Reason: metav1.StatusReasonForbidden, Message: `x "y" is forbidden: ValidatingAdmissionPolicy 'q' with binding 'q-binding' denied request: oops`},
			[]string{
				`code 403, want 422 (message: x "y" is forbidden: ValidatingAdmissionPolicy 'q' with binding 'q-binding' denied request: oops)`,
				`message "x \"y\" is forbidden: ValidatingAdmissionPolicy 'q' with binding 'q-binding' denied request: oops" does not contain "zzz"`,
				`message "x \"y\" is forbidden: ValidatingAdmissionPolicy 'q' with binding 'q-binding' denied request: oops" is not from policy p`,
				`a policy denial must start with holder-epoch: or cilium-fence: (contract §8.1): x "y" is forbidden: ValidatingAdmissionPolicy 'q' with binding 'q-binding' denied request: oops`,
				`a policy denial must be 422 Invalid (contract §8.1), got 403 Forbidden`,
			}},
		{"a compilation error fails even an admitted case", &Case{Expect: Expect{Allowed: true}},
			Verdict{Allowed: true, Message: "compilation error: x"}, []string{"the policy did not compile: compilation error: x"}},
		{"the plugin's own missing-param denial needs no family prefix", denied("failed to configure binding"),
			Verdict{Code: 422, Reason: metav1.StatusReasonInvalid, Message: prefix + "failed to configure binding: no params found"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.c.Problems(tt.v)); diff != "" {
				t.Errorf("Problems (-want +got):\n%s", diff)
			}
		})
	}
}

// A case may start from a base object beside the cases and state how it
// differs (objectFrom plus objectPatch, oldObjectFrom plus oldObjectPatch);
// LoadCases builds the object and the old object, and refuses the
// combinations that would leave them ambiguous.
func TestLoadCasesBuildsTheObjectFromABaseAndAPatch(t *testing.T) {
	base := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: ns}\ndata: {k: v, other: x}\n"
	head := "description: d\nrequest:\n  operation: CREATE\n  user: u\n"
	tail := "expect: {allowed: true}\n"
	cases := []struct {
		name    string
		request string
		want    map[string]any
		wantOld map[string]any
		wantErr string
	}{
		{
			name:    "the base with a patch applied is the object",
			request: "  objectFrom: cm\n  objectPatch:\n  - {op: replace, path: /data/k, value: w}\n  - {op: remove, path: /data/other}\n",
			want:    map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a", "namespace": "ns"}, "data": map[string]any{"k": "w"}},
		},
		{
			name:    "the base alone is the object",
			request: "  objectFrom: cm\n",
			want:    map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a", "namespace": "ns"}, "data": map[string]any{"k": "v", "other": "x"}},
		},
		{
			name:    "a base and an object are refused",
			request: "  objectFrom: cm\n  object: {apiVersion: v1, kind: ConfigMap}\n",
			wantErr: "objectFrom and object are exclusive",
		},
		{
			name:    "a patch without a base is refused",
			request: "  objectPatch:\n  - {op: remove, path: /data}\n",
			wantErr: "objectPatch changes the base objectFrom names",
		},
		{
			name:    "a missing base names its file",
			request: "  objectFrom: nope\n",
			wantErr: "bases/nope.yaml",
		},
		{
			name:    "a patch that does not apply names the base",
			request: "  objectFrom: cm\n  objectPatch:\n  - {op: remove, path: /spec}\n",
			wantErr: "request.objectPatch (on bases/cm.yaml)",
		},
		{
			name:    "the base with a patch applied is the old object",
			request: "  oldObjectFrom: cm\n  oldObjectPatch:\n  - {op: remove, path: /data/other}\n",
			wantOld: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a", "namespace": "ns"}, "data": map[string]any{"k": "v"}},
		},
		{
			name:    "a base for each side builds both",
			request: "  oldObjectFrom: cm\n  objectFrom: cm\n  objectPatch:\n  - {op: remove, path: /data}\n",
			want:    map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a", "namespace": "ns"}},
			wantOld: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a", "namespace": "ns"}, "data": map[string]any{"k": "v", "other": "x"}},
		},
		{
			name:    "a JSON patch applies to an old object built from a base",
			request: "  oldObjectFrom: cm\n  jsonPatch:\n  - {op: remove, path: /data}\n",
			wantOld: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a", "namespace": "ns"}, "data": map[string]any{"k": "v", "other": "x"}},
		},
		{
			name:    "an old base and an old object are refused",
			request: "  oldObjectFrom: cm\n  oldObject: {apiVersion: v1, kind: ConfigMap}\n",
			wantErr: "oldObjectFrom and oldObject are exclusive",
		},
		{
			name:    "an old patch without an old base is refused",
			request: "  oldObjectPatch:\n  - {op: remove, path: /data}\n",
			wantErr: "oldObjectPatch changes the base oldObjectFrom names",
		},
		{
			name:    "a JSON patch and a new object from a base are refused",
			request: "  oldObjectFrom: cm\n  objectFrom: cm\n  jsonPatch:\n  - {op: remove, path: /data}\n",
			wantErr: "a patch applies to oldObject and replaces object",
		},
		{
			name:    "an old patch that does not apply names its field and base",
			request: "  oldObjectFrom: cm\n  oldObjectPatch:\n  - {op: remove, path: /spec}\n",
			wantErr: "request.oldObjectPatch (on bases/cm.yaml)",
		},
		{
			name:    "a missing old base names its field",
			request: "  oldObjectFrom: nope\n",
			wantErr: "request.oldObjectFrom",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "tests", "bases"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "tests", "bases", "cm.yaml"), []byte(base), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "tests", "c.yaml"), []byte(head+tc.request+tail), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := LoadCases(dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("LoadCases: %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 {
				t.Fatalf("%d cases, want 1 (a base is not a case)", len(got))
			}
			if diff := cmp.Diff(tc.want, got[0].Request.Object); diff != "" {
				t.Errorf("object (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantOld, got[0].Request.OldObject); diff != "" {
				t.Errorf("old object (-want +got):\n%s", diff)
			}
		})
	}
}
