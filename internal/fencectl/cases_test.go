package fencectl

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestKubectlFenceTestJudgesEachCase runs `kubectl fence test` as a user
// would: every case the repository ships passes against the policies the
// binary embeds (exit 0), a shipped request with the opposite expectation
// fails with its problem (exit 1), and a case that is not one cannot run
// (exit 2).
func TestKubectlFenceTestJudgesEachCase(t *testing.T) {
	shipped, err := filepath.Glob("../../policies/*/tests")
	if err != nil || len(shipped) == 0 {
		t.Fatalf("no policies/*/tests: %v", err)
	}
	dir := t.TempDir()
	denied, err := os.ReadFile("../../policies/holder-epoch/tests/update-lower-denied.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wrong := strings.Replace(string(denied), "allowed: false", "allowed: true", 1)
	wrong = wrong[:strings.Index(wrong, "  code:")]
	for name, body := range map[string]string{"wrong.yaml": wrong, "bad/not-a-case.yaml": "request: {operation: PATCH}\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"every shipped case passes, through the embedded policies", []string{"-f", strings.Join(shipped, ",")}, 0, []string{"PASS", " 0 failed."}},
		{"a verdict other than expected fails", []string{"-f", filepath.Join(dir, "wrong.yaml")}, 1,
			[]string{"FAIL", "denied (422 Invalid)", "; want admitted", "0 passed, 1 failed."}},
		{"a file that is no case cannot run", []string{"-f", filepath.Join(dir, "bad")}, 2, []string{"request.operation"}},
		{"no cases named cannot run", nil, 2, []string{"name case files"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			cmd := NewCommand(Streams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
			cmd.SetArgs(append([]string{"test"}, c.args...))
			cmd.SetContext(context.Background())
			if code := ExitCode(cmd.Execute(), &out); code != c.code {
				t.Errorf("exit %d, want %d:\n%s", code, c.code, out.String())
			}
			for _, w := range c.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// Contradictory flags are refused before the cluster is read: -n names one
// namespace and -A all of them; --write writes policy reports, of the whole
// cluster.
func TestAuditRefusesContradictoryFlags(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"-n sbx -A", "-n and -A contradict each other"},
		{"--write", "--write writes policy reports: add -o policyreport"},
		{"-o policyreport --write -l a=b", "--write replaces the whole cluster's reports"},
		{"-o policyreport --write -n sbx", "--write replaces the whole cluster's reports"},
	} {
		var out bytes.Buffer
		cmd := NewCommand(Streams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
		cmd.SetArgs(append([]string{"--kubeconfig", filepath.Join(t.TempDir(), "none"), "audit"}, strings.Fields(c.args)...))
		if code := ExitCode(cmd.Execute(), &out); code != 2 || !strings.Contains(out.String(), c.want) {
			t.Errorf("audit %s: exit %d, want 2 with %q:\n%s", c.args, code, c.want, out.String())
		}
	}
}

// -o takes kubectl's template formats, through kubectl's printers, and
// names the formats when it gets one it does not know.
func TestOutputTakesKubectlsTemplateFormats(t *testing.T) {
	for format, want := range map[string]string{
		"jsonpath={.client.platform}":         runtime.GOOS + "/" + runtime.GOARCH,
		"go-template={{.client.platform}}":    runtime.GOOS + "/" + runtime.GOARCH,
		"jsonpath-as-json={.client.platform}": `"` + runtime.GOOS + "/" + runtime.GOARCH + `"`,
		"xml":                                 `error: -o "xml": must be one of table, json, yaml, or a template format as kubectl takes`,
	} {
		var out bytes.Buffer
		cmd := NewCommand(Streams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
		cmd.SetArgs([]string{"version", "--client", "-o", format})
		ExitCode(cmd.Execute(), &out)
		if !strings.Contains(out.String(), want) {
			t.Errorf("kubectl fence version --client -o %s printed %q, want %q in it", format, out.String(), want)
		}
	}
}
