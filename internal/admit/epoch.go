package admit

import "strconv"

// EpochAnnotation is the holder-epoch annotation on a Sandbox (contract §2).
const EpochAnnotation = "sandbox.namzu.ai/holder-epoch"

// maxEpoch is 2^53-1: the host is JavaScript, and a larger value would round
// on its side (contract §3.1).
const maxEpoch = 9007199254740991

// EpochState is how a stored epoch reads (contract §3.1).
type EpochState int

const (
	// EpochAbsent: no annotation (reads as 0).
	EpochAbsent EpochState = iota
	// EpochWell: a canonical decimal within the safe-integer bound.
	EpochWell
	// EpochMalformed: anything else; never read as 0.
	EpochMalformed
)

// ReadEpoch classifies the holder epoch in annotations. It never parses
// through a float, and refuses signs, leading zeros and whitespace, which
// strconv.ParseUint alone would not all refuse.
func ReadEpoch(annotations map[string]string) (EpochState, uint64) {
	s, ok := annotations[EpochAnnotation]
	if !ok {
		return EpochAbsent, 0
	}
	if s == "" || len(s) > 16 || (len(s) > 1 && s[0] == '0') {
		return EpochMalformed, 0
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return EpochMalformed, 0
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > maxEpoch {
		return EpochMalformed, 0
	}
	return EpochWell, n
}
