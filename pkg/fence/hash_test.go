package fence

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	vectorsFile   = "testdata/podtemplatehash_vectors.jsonl"
	vectorsScript = "testdata/gen_podtemplatehash_vectors.js"
)

type hashVector struct {
	Name      string `json:"name"`
	Input     string `json:"input"`
	Canonical string `json:"canonical"`
	Hash      string `json:"hash"`
}

func loadVectors(t *testing.T) []hashVector {
	t.Helper()
	data, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var out []hashVector
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var v hashVector
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", vectorsFile, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPodTemplateHashVectors compares the Go port with JavaScript on every
// vector Node computed: Go and TypeScript hosts must agree.
func TestPodTemplateHashVectors(t *testing.T) {
	vectors := loadVectors(t)
	if len(vectors) < 500 {
		t.Fatalf("%d vectors; the generator must write at least 500", len(vectors))
	}
	for _, v := range vectors {
		canonical, err := canonicalJSON([]byte(v.Input))
		if err != nil {
			t.Errorf("%s: %v", v.Name, err)
			continue
		}
		if diff := cmp.Diff(v.Canonical, string(canonical)); diff != "" {
			t.Errorf("%s: input %q canonical (-node +go):\n%s", v.Name, v.Input, diff)
			continue
		}
		if got, err := PodTemplateHashJSON([]byte(v.Input)); err != nil || got != v.Hash {
			t.Errorf("%s: hash %q, %v; node says %q", v.Name, got, err, v.Hash)
		}
	}
}

// TestPodTemplateHashVectorsAreCurrent re-runs the generator so the committed
// vectors are exactly what JavaScript computes today. Node is required: the
// check never skips (.ci/run installs Debian's nodejs).
func TestPodTemplateHashVectorsAreCurrent(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on PATH, so the committed vectors cannot be checked against %s (apt-get install nodejs): %v", vectorsScript, err)
	}
	got, err := exec.Command(node, vectorsScript).Output()
	if err != nil {
		t.Fatalf("%s: %v", vectorsScript, err)
	}
	want, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run `go generate` in pkg/fence and commit it", vectorsFile)
	}
}

func TestPodTemplateHashMarshalsGoValues(t *testing.T) {
	template := map[string]any{
		"spec": map[string]any{"nodeSelector": map[string]string{"a": "c", "10": "a", "9": "b"}},
	}
	got, err := PodTemplateHash(template)
	if want := "sha256:82a444e63998d49fe84f66cfff11f30bb4507540b445d30dca81df306912f5b9"; err != nil || got != want {
		t.Errorf("PodTemplateHash = %q, %v; want the contract's %q", got, err, want)
	}
	if _, err := PodTemplateHash(map[string]any{"f": func() {}}); err == nil {
		t.Error("a template that is not JSON was hashed")
	}
}

func TestPodTemplateHashJSONRefusesWhatJSONParseRefuses(t *testing.T) {
	for _, in := range []string{
		``, ` `, `{`, `{"a"}`, `{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `-`, `1e`, `+1`, `NaN`, `Infinity`,
		`"\x01"`, `"\u12"`, `"\x"`, `'a'`, `{a:1}`, `nul`, `[1] [2]`, "\"\xff\"", `"abc`, "\x00",
	} {
		if got, err := PodTemplateHashJSON([]byte(in)); err == nil {
			t.Errorf("PodTemplateHashJSON(%q) = %q, want an error", in, got)
		}
	}
}
