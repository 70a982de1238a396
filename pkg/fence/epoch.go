package fence

import (
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EpochState is what reading the holder-epoch annotation found.
type EpochState int

const (
	// EpochAbsent: no key, or no annotations map at all. Reads as epoch 0.
	EpochAbsent EpochState = iota
	// EpochWellFormed: a canonical decimal at most MaxEpoch.
	EpochWellFormed
	// EpochMalformed: a value that is not well-formed. Never read as 0: a
	// host that treated garbage as 0 would let any epoch overwrite it.
	EpochMalformed
)

// String names the state for messages and test output.
func (s EpochState) String() string {
	switch s {
	case EpochAbsent:
		return "Absent"
	case EpochWellFormed:
		return "WellFormed"
	case EpochMalformed:
		return "Malformed"
	}
	return fmt.Sprintf("EpochState(%d)", int(s))
}

// Reading is everything one GET tells a fenced write: the epoch
// state, the exact stored string (the test clause must send it verbatim), the
// presence of the annotations map (decides per-key adds versus one whole-map
// add) and the resourceVersion (the fallback test clause). Build every patch
// from the Reading of ONE GET; mixing two reads would test one state and
// write over another.
type Reading struct {
	State EpochState
	// Epoch is the stored value when State is EpochWellFormed, else 0.
	Epoch uint64
	// Raw is the stored string when the key is present (well-formed or not).
	Raw string
	// HasAnnotations reports whether the object carries an annotations map.
	HasAnnotations bool
	// ResourceVersion is the object's resourceVersion at the read.
	ResourceVersion string
}

// ReadHolderEpoch reads the holder epoch of obj in one of the four shapes of
// contract §3.1: well-formed, malformed, a map without the key, or no map.
func ReadHolderEpoch(obj metav1.Object) Reading {
	annotations := obj.GetAnnotations()
	r := Reading{HasAnnotations: annotations != nil, ResourceVersion: obj.GetResourceVersion()}
	raw, ok := annotations[AnnotationHolderEpoch]
	if !ok {
		return r
	}
	r.Raw = raw
	n, err := ParseEpoch(raw)
	if err != nil {
		r.State = EpochMalformed
		return r
	}
	r.State, r.Epoch = EpochWellFormed, n
	return r
}

// Allows reports whether a write carrying epoch may go ahead on what was read:
// the stored epoch (0 when absent) is at most epoch. A malformed stored value
// allows nothing, since only break-glass identities may repair it.
func (r Reading) Allows(epoch uint64) bool {
	return r.State != EpochMalformed && r.Epoch <= epoch
}

// check turns a refused Reading into the typed error a caller branches on.
func (r Reading) check(object string, epoch uint64) error {
	switch {
	case r.State == EpochMalformed:
		_, err := ParseEpoch(r.Raw)
		return &UnreadableEpochError{Object: object, Value: r.Raw, Err: err}
	case r.Epoch > epoch:
		return &StaleEpochError{Object: object, Stored: r.Epoch, Held: epoch}
	}
	return nil
}

// moved reports whether anything a patch built from r tests could have changed
// since: the stored annotation, the resourceVersion, or the map's presence. A
// 422 on an unmoved object is not a lost race, so it must not be retried.
func (r Reading) moved(now Reading) bool {
	return r.State != now.State || r.Raw != now.Raw || r.HasAnnotations != now.HasAnnotations ||
		r.ResourceVersion != now.ResourceVersion
}

// errEpochSyntax is wrapped by every ParseEpoch error.
var errEpochSyntax = fmt.Errorf("a holder epoch is a decimal integer from 0 to %d without sign, leading zero, exponent or whitespace", MaxEpoch)

// ParseEpoch parses a holder epoch with the exact grammar of contract §3.1:
// ^(0|[1-9][0-9]*)$ and at most MaxEpoch. It never goes through a float, whose
// rounding would make 9007199254740993 read as a smaller, admissible value.
func ParseEpoch(s string) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty value: %w", errEpochSyntax)
	}
	for i := 0; i < len(s); i++ {
		// Byte-wise on purpose: ParseUint accepts "+1" and "0x1" in base 0,
		// unicode digits are multi-byte, and neither may pass.
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q has a non-digit at byte %d: %w", s, i, errEpochSyntax)
		}
	}
	if s[0] == '0' && len(s) > 1 {
		return 0, fmt.Errorf("%q has a leading zero: %w", s, errEpochSyntax)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > MaxEpoch {
		return 0, fmt.Errorf("%q is above %d: %w", s, MaxEpoch, errEpochSyntax)
	}
	return n, nil
}

// FormatEpoch writes an epoch in canonical decimal.
func FormatEpoch(epoch uint64) string { return strconv.FormatUint(epoch, 10) }
