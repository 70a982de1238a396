package fence

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParseEpoch reads the committed corpus (testdata/epochs.jsonl), the
// same lines the holder-epoch policy's generated cases and the differential
// fuzz target in policies/ use; their loader (internal/testing/epochs, in
// the product module) also checks the corpus's own consistency.
func TestParseEpoch(t *testing.T) {
	f, err := os.Open("testdata/epochs.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type line struct {
		Raw       string
		Epoch     uint64
		Malformed bool
		Why       string
	}
	var corpus []line
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var e line
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("testdata/epochs.jsonl line %d: %v", len(corpus)+1, err)
		}
		corpus = append(corpus, e)
	}
	var wellFormed, malformed int
	for _, e := range corpus {
		got, err := ParseEpoch(e.Raw)
		switch {
		case e.Malformed && err == nil:
			t.Errorf("ParseEpoch(%q) (%s) = %d, nil; want an error", e.Raw, e.Why, got)
		case e.Malformed && !errors.Is(err, errEpochSyntax):
			t.Errorf("ParseEpoch(%q) (%s) error %v does not state the grammar", e.Raw, e.Why, err)
		case !e.Malformed && (err != nil || got != e.Epoch):
			t.Errorf("ParseEpoch(%q) (%s) = %d, %v; want %d, nil", e.Raw, e.Why, got, err, e.Epoch)
		}
		if e.Malformed {
			malformed++
		} else {
			wellFormed++
		}
	}
	if wellFormed == 0 || malformed == 0 {
		t.Errorf("the corpus holds %d well-formed and %d malformed epochs; it needs both", wellFormed, malformed)
	}
	if got, err := ParseEpoch(FormatEpoch(MaxEpoch)); err != nil || got != MaxEpoch {
		t.Errorf("MaxEpoch does not round-trip: %d, %v", got, err)
	}
}

func TestReadHolderEpoch(t *testing.T) {
	tests := []struct {
		name string
		obj  *sandboxBuilder
		want Reading
	}{
		{"a well-formed value reads as its number", makeSandbox("a").RV("7").Epoch("42"),
			Reading{State: EpochWellFormed, Epoch: 42, Raw: "42", HasAnnotations: true, ResourceVersion: "7"}},
		{"the final epoch is well-formed", makeSandbox("a").RV("7").Epoch("9007199254740991"),
			Reading{State: EpochWellFormed, Epoch: MaxEpoch, Raw: "9007199254740991", HasAnnotations: true, ResourceVersion: "7"}},
		{"a malformed value is never read as 0", makeSandbox("a").RV("7").Epoch("007"),
			Reading{State: EpochMalformed, Raw: "007", HasAnnotations: true, ResourceVersion: "7"}},
		{"an empty value is malformed, not absent", makeSandbox("a").RV("7").Epoch(""),
			Reading{State: EpochMalformed, Raw: "", HasAnnotations: true, ResourceVersion: "7"}},
		{"a map without the key reads as absent", makeSandbox("a").RV("7").Annotation("other", "x"),
			Reading{State: EpochAbsent, HasAnnotations: true, ResourceVersion: "7"}},
		{"an empty map is still a map", makeSandbox("a").RV("7").EmptyAnnotations(),
			Reading{State: EpochAbsent, HasAnnotations: true, ResourceVersion: "7"}},
		{"no map reads as absent without a map", makeSandbox("a").RV("1001"),
			Reading{State: EpochAbsent, ResourceVersion: "1001"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, ReadHolderEpoch(tt.obj.Obj())); diff != "" {
				t.Errorf("ReadHolderEpoch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadingAllows(t *testing.T) {
	tests := []struct {
		name  string
		read  Reading
		epoch uint64
		want  bool
	}{
		{"an absent epoch allows epoch 0", Reading{State: EpochAbsent}, 0, true},
		{"a lower stored epoch allows", Reading{State: EpochWellFormed, Epoch: 2}, 3, true},
		{"an equal stored epoch allows a re-stamp", Reading{State: EpochWellFormed, Epoch: 3}, 3, true},
		{"a higher stored epoch refuses", Reading{State: EpochWellFormed, Epoch: 4}, 3, false},
		{"a malformed stored epoch refuses even the final epoch", Reading{State: EpochMalformed, Raw: "x"}, MaxEpoch, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.read.Allows(tt.epoch); got != tt.want {
				t.Errorf("Allows(%d) = %v, want %v", tt.epoch, got, tt.want)
			}
		})
	}
}

func TestReadingCheckErrors(t *testing.T) {
	stale := Reading{State: EpochWellFormed, Epoch: 5, Raw: "5"}.check("ns/a", 3)
	var se *StaleEpochError
	if !errors.As(stale, &se) || !errors.Is(stale, ErrStaleEpoch) || se.Stored != 5 || se.Held != 3 {
		t.Errorf("stale check = %#v, want a StaleEpochError carrying 5 and 3", stale)
	}
	bad := Reading{State: EpochMalformed, Raw: "01"}.check("ns/a", 3)
	var ue *UnreadableEpochError
	if !errors.As(bad, &ue) || !errors.Is(bad, ErrUnreadableEpoch) || ue.Value != "01" {
		t.Errorf("malformed check = %#v, want an UnreadableEpochError carrying \"01\"", bad)
	}
	if err := (Reading{State: EpochWellFormed, Epoch: 3}).check("ns/a", 3); err != nil {
		t.Errorf("equal epochs refused: %v", err)
	}
}
