package fence

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

//go:generate sh -c "node testdata/gen_podtemplatehash_vectors.js > testdata/podtemplatehash_vectors.jsonl"

// PodTemplateHash returns the pod-template-hash annotation value of a
// template: "sha256:" + lowercase hex SHA-256 of
// JSON.stringify(canonical(template)) exactly as the TypeScript host computes
// it (contract §5), so Go and TypeScript hosts agree on drift. The template is
// marshalled with encoding/json first; pass the template as written (after the
// template label and runtimeClassName overlays).
func PodTemplateHash(template any) (string, error) {
	data, err := json.Marshal(template)
	if err != nil {
		return "", fmt.Errorf("pod template does not marshal to JSON: %w", err)
	}
	return PodTemplateHashJSON(data)
}

// PodTemplateHashJSON is PodTemplateHash of a JSON text, read as JavaScript's
// JSON.parse reads it: numbers as float64 (1e400 is Infinity and hashes as
// null), the last of duplicate keys wins, and lone surrogate escapes such as
// "\ud800" survive (encoding/json would turn them into U+FFFD and the hash
// would no longer match the host's).
func PodTemplateHashJSON(data []byte) (string, error) {
	canonical, err := canonicalJSON(data)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canonical)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// canonicalJSON returns JSON.stringify(canonical(JSON.parse(data))).
func canonicalJSON(data []byte) ([]byte, error) {
	d := &jsDecoder{data: data}
	v, err := d.document()
	if err != nil {
		return nil, fmt.Errorf("pod template is not JSON: %w", err)
	}
	var b bytes.Buffer
	writeCanonical(&b, v)
	return b.Bytes(), nil
}

// A decoded JSON value: nil, bool, float64, jsString or *jsObject, []any.
type (
	// jsString is a JavaScript string: UTF-16 code units, so lone surrogates
	// and code-unit ordering are both exact.
	jsString []uint16
	// jsObject maps a key (its code units as big-endian bytes, so that Go
	// string order IS code-unit order) to the last value given for it.
	jsObject map[string]any
)

var (
	literals     = map[string]any{"null": nil, "true": true, "false": false}
	shortEscapes = map[byte]uint16{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}
)

// maxDepth bounds nesting; JavaScript's own recursion fails well before it
// for the canonicalisation the host runs.
const maxDepth = 10000

type jsDecoder struct {
	data  []byte
	pos   int
	depth int
}

func (d *jsDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("at byte %d: %s", d.pos, fmt.Sprintf(format, args...))
}

func (d *jsDecoder) document() (any, error) {
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	d.space()
	if d.pos != len(d.data) {
		return nil, d.errorf("unexpected data after the top-level value")
	}
	return v, nil
}

// space skips the four whitespace bytes JSON.parse accepts.
func (d *jsDecoder) space() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *jsDecoder) value() (any, error) {
	d.space()
	if d.pos >= len(d.data) {
		return nil, d.errorf("unexpected end of input")
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		return d.object()
	case c == '[':
		return d.array()
	case c == '"':
		return d.string()
	case c == '-' || '0' <= c && c <= '9':
		return d.number()
	}
	for lit, v := range literals {
		if bytes.HasPrefix(d.data[d.pos:], []byte(lit)) {
			d.pos += len(lit)
			return v, nil
		}
	}
	return nil, d.errorf("unexpected character %q", d.data[d.pos])
}

func (d *jsDecoder) enter() error {
	if d.depth++; d.depth > maxDepth {
		return d.errorf("nested deeper than %d levels", maxDepth)
	}
	d.pos++
	d.space()
	return nil
}

func (d *jsDecoder) object() (any, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	obj := jsObject{}
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		d.depth--
		return obj, nil
	}
	for {
		d.space()
		if d.pos >= len(d.data) || d.data[d.pos] != '"' {
			return nil, d.errorf("expected a member name")
		}
		key, err := d.string()
		if err != nil {
			return nil, err
		}
		d.space()
		if d.pos >= len(d.data) || d.data[d.pos] != ':' {
			return nil, d.errorf("expected ':' after a member name")
		}
		d.pos++
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		obj[key.sortKey()] = v
		if done, err := d.next('}'); done || err != nil {
			return obj, err
		}
	}
}

func (d *jsDecoder) array() (any, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	arr := []any{}
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		d.depth--
		return arr, nil
	}
	for {
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
		if done, err := d.next(']'); done || err != nil {
			return arr, err
		}
	}
}

// next consumes ',' (not done) or the closing byte (done).
func (d *jsDecoder) next(closing byte) (bool, error) {
	d.space()
	if d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ',':
			d.pos++
			return false, nil
		case closing:
			d.pos++
			d.depth--
			return true, nil
		}
	}
	return false, d.errorf("expected ',' or %q", closing)
}

func (d *jsDecoder) number() (any, error) {
	start := d.pos
	digits := func() int {
		n := 0
		for d.pos < len(d.data) && '0' <= d.data[d.pos] && d.data[d.pos] <= '9' {
			d.pos++
			n++
		}
		return n
	}
	if d.data[d.pos] == '-' {
		d.pos++
	}
	if d.pos < len(d.data) && d.data[d.pos] == '0' {
		d.pos++
	} else if digits() == 0 {
		return nil, d.errorf("a number needs digits")
	}
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		d.pos++
		if digits() == 0 {
			return nil, d.errorf("a fraction needs digits")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if digits() == 0 {
			return nil, d.errorf("an exponent needs digits")
		}
	}
	f, err := strconv.ParseFloat(string(d.data[start:d.pos]), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, d.errorf("number %q: %v", d.data[start:d.pos], err)
	}
	// On ErrRange ParseFloat returns ±Inf or ±0, as JSON.parse does.
	return f, nil
}

func (d *jsDecoder) string() (jsString, error) {
	d.pos++ // opening quote
	s := jsString{}
	for {
		if d.pos >= len(d.data) {
			return nil, d.errorf("unterminated string")
		}
		c := d.data[d.pos]
		switch {
		case c == '"':
			d.pos++
			return s, nil
		case c == '\\':
			u, err := d.escape()
			if err != nil {
				return nil, err
			}
			s = append(s, u)
		case c < 0x20:
			return nil, d.errorf("control character %#x in a string", c)
		case c < utf8.RuneSelf:
			s = append(s, uint16(c))
			d.pos++
		default:
			r, size := utf8.DecodeRune(d.data[d.pos:])
			if r == utf8.RuneError && size == 1 {
				return nil, d.errorf("invalid UTF-8")
			}
			s = utf16.AppendRune(s, r)
			d.pos += size
		}
	}
}

// escape decodes one escape to one code unit: \uXXXX yields a single unit, so
// a surrogate pair written as two escapes becomes a pair and a lone one stays
// lone, as in JavaScript.
func (d *jsDecoder) escape() (uint16, error) {
	if d.pos+1 >= len(d.data) {
		return 0, d.errorf("unterminated escape")
	}
	c := d.data[d.pos+1]
	d.pos += 2
	if u, ok := shortEscapes[c]; ok {
		return u, nil
	}
	if c != 'u' || d.pos+4 > len(d.data) {
		return 0, d.errorf("invalid escape")
	}
	var u uint16
	for _, h := range d.data[d.pos : d.pos+4] {
		var v byte
		switch {
		case '0' <= h && h <= '9':
			v = h - '0'
		case 'a' <= h && h <= 'f':
			v = h - 'a' + 10
		case 'A' <= h && h <= 'F':
			v = h - 'A' + 10
		default:
			return 0, d.errorf("invalid \\u escape")
		}
		u = u<<4 | uint16(v)
	}
	d.pos += 4
	return u, nil
}

// sortKey encodes the code units big-endian: byte order is code-unit order.
func (s jsString) sortKey() string {
	b := make([]byte, 0, 2*len(s))
	for _, u := range s {
		b = append(b, byte(u>>8), byte(u))
	}
	return string(b)
}

func keyString(k string) jsString {
	s := make(jsString, len(k)/2)
	for i := range s {
		s[i] = uint16(k[2*i])<<8 | uint16(k[2*i+1])
	}
	return s
}

// arrayIndex reports whether a key is a canonical array index (0..2^32-2, no
// leading zero): JavaScript enumerates those first, in numeric order, whatever
// order they were inserted in.
func arrayIndex(s jsString) (uint64, bool) {
	if len(s) == 0 || len(s) > 10 || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	var n uint64
	for _, u := range s {
		if u < '0' || u > '9' {
			return 0, false
		}
		n = n*10 + uint64(u-'0')
	}
	return n, n <= math.MaxUint32-1
}

var protoKey = jsString(utf16.Encode([]rune("__proto__"))).sortKey()

func writeCanonical(b *bytes.Buffer, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case float64:
		b.WriteString(numberToString(v))
	case jsString:
		writeString(b, v)
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, e)
		}
		b.WriteByte(']')
	case jsObject:
		b.WriteByte('{')
		for i, k := range objectKeys(v) {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, keyString(k))
			b.WriteByte(':')
			writeCanonical(b, v[k])
		}
		b.WriteByte('}')
	}
}

// objectKeys is the order JSON.stringify emits the canonical object in: the
// host inserts keys sorted by code units into a fresh object, whose own-key
// order then puts array indexes first in numeric order. Assigning
// out["__proto__"] sets the prototype instead of a member, so that key is
// dropped.
func objectKeys(o jsObject) []string {
	keys := make([]string, 0, len(o))
	for k := range o {
		if k != protoKey {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int {
		ia, aIdx := arrayIndex(keyString(a))
		ib, bIdx := arrayIndex(keyString(b))
		switch {
		case aIdx && bIdx:
			return compareUint(ia, ib)
		case aIdx:
			return -1
		case bIdx:
			return 1
		}
		return strings.Compare(a, b)
	})
	return keys
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// writeString is JSON.stringify's QuoteJSONString: short escapes, other
// controls as lowercase \u00xx, lone surrogates as \udxxx, everything else raw
// (no HTML escaping; U+2028 and U+2029 stay raw).
func writeString(b *bytes.Buffer, s jsString) {
	const hexDigits = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		u := s[i]
		switch {
		case u == '"':
			b.WriteString(`\"`)
		case u == '\\':
			b.WriteString(`\\`)
		case u == '\b':
			b.WriteString(`\b`)
		case u == '\f':
			b.WriteString(`\f`)
		case u == '\n':
			b.WriteString(`\n`)
		case u == '\r':
			b.WriteString(`\r`)
		case u == '\t':
			b.WriteString(`\t`)
		case utf16.IsSurrogate(rune(u)):
			if u < 0xdc00 && i+1 < len(s) && 0xdc00 <= s[i+1] && s[i+1] <= 0xdfff {
				b.WriteRune(utf16.DecodeRune(rune(u), rune(s[i+1])))
				i++
				continue
			}
			fallthrough
		case u < 0x20:
			b.WriteString(`\u`)
			b.WriteByte(hexDigits[u>>12])
			b.WriteByte(hexDigits[u>>8&0xf])
			b.WriteByte(hexDigits[u>>4&0xf])
			b.WriteByte(hexDigits[u&0xf])
		default:
			b.WriteRune(rune(u))
		}
	}
	b.WriteByte('"')
}

// numberToString is ECMAScript Number::toString(x) for radix 10, which
// JSON.stringify uses for finite numbers (and null for the others).
// strconv's shortest round-trip digits are the digits k, n, s of the
// specification; only the layout is ECMAScript's own.
func numberToString(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return "null"
	case x == 0: // and -0
		return "0"
	case x < 0:
		return "-" + numberToString(-x)
	}
	e := strconv.FormatFloat(x, 'e', -1, 64) // d.ddde±XX
	mantissa, exp, _ := strings.Cut(e, "e")
	digits := strings.Replace(mantissa, ".", "", 1)
	p, _ := strconv.Atoi(exp)
	k, n := len(digits), p+1 // x = digits × 10^(n-k)
	switch {
	case k <= n && n <= 21:
		return digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		return digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		return "0." + strings.Repeat("0", -n) + digits
	}
	sign := "+"
	if n-1 < 0 {
		sign = "-"
	}
	exponent := "e" + sign + strconv.Itoa(abs(n-1))
	if k == 1 {
		return digits + exponent
	}
	return digits[:1] + "." + digits[1:] + exponent
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
