package fence

import (
	"bytes"
	"encoding/json"
	"math/big"
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

var epochGrammar = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)

// FuzzReadHolderEpoch checks ReadHolderEpoch against an oracle that shares no
// code with it: the contract §3.1 regexp and an arbitrary-precision bound.
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
// parser accepts; the canonical text is a fixed point and hashes the same.
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
	f.Fuzz(func(t *testing.T, data []byte) {
		canonical, err := canonicalJSON(data)
		// encoding/json's Valid does not check UTF-8; JSON.parse gets a
		// string and never sees invalid UTF-8, so we refuse it.
		if valid := json.Valid(data) && utf8.Valid(data); valid != (err == nil) && len(data) < 5000 {
			t.Fatalf("%q: json.Valid=%v but canonicalJSON error %v", data, valid, err)
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

var (
	matchNameRE    = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	matchPatternRE = regexp.MustCompile(`^\*\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$`)
)

// FuzzNormalizeHost: a normalized host re-normalizes to itself, and every
// selector built from it is one the fence admits (contract §4.3 rule 7).
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
