package fence

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"math/big"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

var epochGrammar = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)

// FuzzReadHolderEpoch checks ReadHolderEpoch against an oracle that shares no
// code with it: the contract's epoch regexp and an arbitrary-precision bound.
func FuzzReadHolderEpoch(f *testing.F) {
	for _, s := range []string{"0", "1", "01", "-1", "+1", " 1", "9007199254740991", "9007199254740992", "18446744073709551616", "١", ""} {
		f.Add(s, true, true, "1001")
	}
	f.Add("", false, false, "")
	f.Fuzz(func(t *testing.T, raw string, hasMap, hasKey bool, rv string) {
		b := makeSandbox("a").RV(rv)
		if hasMap {
			b.EmptyAnnotations()
			if hasKey {
				b.Epoch(raw)
			}
		}
		r := ReadHolderEpoch(b.Obj())
		if r.HasAnnotations != hasMap || r.ResourceVersion != rv {
			t.Fatalf("reading %+v lost the map's presence or the resourceVersion", r)
		}
		if !hasMap || !hasKey {
			if r != (Reading{HasAnnotations: hasMap, ResourceVersion: rv}) || !r.Allows(0) {
				t.Fatalf("absent key read as %+v", r)
			}
			return
		}
		n, ok := new(big.Int).SetString(raw, 10)
		wellFormed := epochGrammar.MatchString(raw) && ok && n.Cmp(new(big.Int).SetUint64(MaxEpoch)) <= 0
		switch {
		case wellFormed && (r.State != EpochWellFormed || r.Epoch != n.Uint64() || FormatEpoch(r.Epoch) != raw):
			t.Fatalf("%q is well-formed, read as %+v", raw, r)
		case !wellFormed && (r.State != EpochMalformed || r.Allows(MaxEpoch)):
			t.Fatalf("%q is malformed, read as %+v", raw, r)
		case r.Raw != raw:
			t.Fatalf("raw %q read as %q", raw, r.Raw)
		}
	})
}

// FuzzPodTemplateHashJSON: never panics; accepts exactly what a strict JSON
// parser accepts; the canonical text is a fixed point and hashes the same;
// and Node, running the committed generator as an oracle (Go and
// TypeScript hosts must agree), refuses the same inputs and computes the
// same canonical text and hash for every other.
func FuzzPodTemplateHashJSON(f *testing.F) {
	if data, err := os.ReadFile(vectorsFile); err == nil {
		for line := range bytes.Lines(data) {
			var v hashVector
			if json.Unmarshal(line, &v) == nil && len(v.Input) < 4096 {
				f.Add([]byte(v.Input))
			}
		}
	}
	f.Add([]byte(`{"\ud800":1e400,"__proto__":{}}`))
	node := startNodeOracle(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		canonical, err := canonicalJSON(data)
		// encoding/json's Valid does not check UTF-8; JSON.parse gets a
		// string and never sees invalid UTF-8, so we refuse it.
		if valid := json.Valid(data) && utf8.Valid(data); valid != (err == nil) && len(data) < 5000 {
			t.Fatalf("%q: json.Valid=%v but canonicalJSON error %v", data, valid, err)
		}
		if utf8.Valid(data) && len(data) <= maxOracleInput {
			want := node.eval(t, string(data))
			switch {
			case strings.HasPrefix(want.Error, "RangeError"):
				// Nesting deeper than V8's stack: JavaScript cannot say.
			case want.Error != "" && err == nil:
				t.Fatalf("%q: Node refuses it (%s), Go hashes it", data, want.Error)
			case want.Error == "" && err != nil:
				t.Fatalf("%q: Node hashes it, Go refuses it: %v", data, err)
			case want.Error == "":
				if string(canonical) != want.Canonical {
					t.Fatalf("%q: canonical text\n go:   %q\n node: %q", data, canonical, want.Canonical)
				}
				if got, _ := PodTemplateHashJSON(data); got != want.Hash {
					t.Fatalf("%q: hash %s, Node says %s", data, got, want.Hash)
				}
			}
		}
		if err != nil {
			return
		}
		again, err := canonicalJSON(canonical)
		if err != nil || !bytes.Equal(again, canonical) {
			t.Fatalf("canonical %q re-canonicalises to %q, %v", canonical, again, err)
		}
		h1, _ := PodTemplateHashJSON(data)
		h2, _ := PodTemplateHashJSON(canonical)
		if h1 != h2 {
			t.Fatalf("hash of %q is %s, of its canonical form %s", data, h1, h2)
		}
	})
}

// maxOracleInput bounds what is sent to Node: fuzz inputs are small, and a
// pipe round trip per input must stay cheap.
const maxOracleInput = 1 << 20

// nodeOracle is the committed generator (testdata/gen_podtemplatehash_vectors.js)
// running with --oracle: one long-lived node process per test binary (each
// fuzz worker is one), one line out and one line back per input.
type nodeOracle struct {
	mu  sync.Mutex
	in  io.WriteCloser
	out *bufio.Reader
}

type oracleAnswer struct {
	Canonical, Hash, Error string
}

// startNodeOracle starts Node on the generator. Node is required, never
// skipped: without it the hash has no oracle (install Debian's nodejs; .ci/run
// does).
func startNodeOracle(tb testing.TB) *nodeOracle {
	tb.Helper()
	path, err := exec.LookPath("node")
	if err != nil {
		tb.Fatalf("node is not on PATH: the pod-template hash is checked against Node running %s (apt-get install nodejs): %v", vectorsScript, err)
	}
	cmd := exec.Command(path, vectorsScript, "--oracle")
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", path, err)
	}
	tb.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Wait()
	})
	return &nodeOracle{in: in, out: bufio.NewReaderSize(out, 1<<16)}
}

func (o *nodeOracle) eval(t *testing.T, input string) oracleAnswer {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	line, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.in.Write(append(line, '\n')); err != nil {
		t.Fatalf("write to the node oracle: %v", err)
	}
	reply, err := o.out.ReadBytes('\n')
	if err != nil {
		t.Fatalf("read from the node oracle: %v", err)
	}
	var a oracleAnswer
	if err := json.Unmarshal(reply, &a); err != nil {
		t.Fatalf("node oracle answered %q: %v", reply, err)
	}
	return a
}

var (
	matchNameRE    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	matchPatternRE = regexp.MustCompile(`^\*\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$`)
)

// FuzzNormalizeHost: a normalized host re-normalizes to itself, and every
// selector built from it is one the fence admits.
func FuzzNormalizeHost(f *testing.F) {
	for _, s := range []string{"api.example.com", ".example.com", "Registry.NPMjs.org", "*.example.com", "10.0.0.1", ".com", "..a.b", "a.b.", "\u212Aa.com", "-a.b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, entry string) {
		h, err := NormalizeHost(entry)
		if err != nil {
			return
		}
		if again, err := NormalizeHost(h); err != nil || again != h {
			t.Fatalf("%q normalized to %q, which re-normalizes to %q, %v", entry, h, again, err)
		}
		if h != strings.ToLower(entry) {
			t.Fatalf("%q normalized to %q, not just lowercased", entry, h)
		}
		obj, err := BuildPerSandboxPolicy(PolicyInput{Owner: PolicyOwner{Kind: OwnerKindSandbox, Name: "a", UID: "u"}, Namespace: "n", Hosts: []string{entry}})
		if err != nil {
			t.Fatalf("%q normalizes but the policy refuses it: %v", entry, err)
		}
		egress := obj.Object["spec"].(map[string]any)["egress"].([]any)
		for _, sel := range egress[1].(map[string]any)["toFQDNs"].([]any) {
			for kind, v := range sel.(map[string]any) {
				s := v.(string)
				ok := kind == "matchName" && matchNameRE.MatchString(s) && len(s) <= 253 && strings.Trim(s[strings.LastIndexByte(s, '.')+1:], "0123456789") != "" ||
					kind == "matchPattern" && matchPatternRE.MatchString(s)
				if !ok {
					t.Fatalf("%q emits %s %q, which the fence refuses", entry, kind, s)
				}
			}
		}
	})
}
