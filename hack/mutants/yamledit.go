package main

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// replaceYAML returns src with the value at path (mapping keys and sequence
// indexes) replaced by repl, a YAML value written as it should appear. The
// edit is textual, so every other byte of the file (comments, layout, the
// other expressions) stays as committed: a test that reads the file sees
// exactly one change. The result is checked by decoding both files: they
// must be equal except for that one value.
func replaceYAML(src []byte, path []any, repl string) ([]byte, error) {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yamlv3.DocumentNode || len(doc.Content) != 1 {
		return nil, fmt.Errorf("want one YAML document")
	}
	key, val, err := lookupNode(doc.Content[0], path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(src), "\n")
	first, col := val.Line-1, val.Column-1
	keyIndent := key.Column - 1
	// The value runs until the first non-blank line indented no deeper than
	// its key (the next key of the same mapping, the next sequence item, a
	// comment before it): block scalars and wrapped flow values are indented
	// deeper than their key.
	last := first
	for i := first + 1; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" {
			continue
		}
		if len(l)-len(strings.TrimLeft(l, " ")) <= keyIndent {
			break
		}
		last = i
	}
	var out []string
	out = append(out, lines[:first]...)
	out = append(out, lines[first][:col]+repl)
	out = append(out, lines[last+1:]...)
	res := []byte(strings.Join(out, "\n"))
	if err := checkOneChange(src, res, path, repl); err != nil {
		return nil, err
	}
	return res, nil
}

// lookupNode returns the key node and value node at path; for a sequence
// index the "key" is the item itself (its column is where the item starts).
func lookupNode(n *yamlv3.Node, path []any) (key, val *yamlv3.Node, err error) {
	key = n
	for _, p := range path {
		switch p := p.(type) {
		case string:
			if n.Kind != yamlv3.MappingNode {
				return nil, nil, fmt.Errorf("%v: %q of a non-mapping", path, p)
			}
			found := false
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == p {
					key, n, found = n.Content[i], n.Content[i+1], true
					break
				}
			}
			if !found {
				return nil, nil, fmt.Errorf("%v: no key %q", path, p)
			}
		case int:
			if n.Kind != yamlv3.SequenceNode || p >= len(n.Content) {
				return nil, nil, fmt.Errorf("%v: no item %d", path, p)
			}
			n = n.Content[p]
			key = n
		default:
			return nil, nil, fmt.Errorf("%v: path elements are strings and ints", path)
		}
	}
	if n.Kind == yamlv3.MappingNode || (n.Kind == yamlv3.SequenceNode && n.Style&yamlv3.FlowStyle == 0) {
		return nil, nil, fmt.Errorf("%v: only scalars and flow sequences are replaced", path)
	}
	return key, n, nil
}

// checkOneChange decodes both files and requires that they differ only at
// path, where the mutated one holds repl.
func checkOneChange(orig, mutated []byte, path []any, repl string) error {
	var a, b, want any
	if err := yaml.Unmarshal(orig, &a); err != nil {
		return err
	}
	if err := yaml.Unmarshal(mutated, &b); err != nil {
		return fmt.Errorf("the mutated file does not parse: %w", err)
	}
	if err := yaml.Unmarshal([]byte(repl), &want); err != nil {
		return err
	}
	if err := setPath(a, path, want); err != nil {
		return err
	}
	if !reflect.DeepEqual(a, b) {
		return fmt.Errorf("%v: the textual edit changed more than that value", path)
	}
	if bytes.Equal(orig, mutated) {
		return fmt.Errorf("%v: already %s", path, repl)
	}
	return nil
}

func setPath(v any, path []any, to any) error {
	for i, p := range path {
		last := i == len(path)-1
		switch p := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return fmt.Errorf("%v: not a mapping", path)
			}
			if last {
				m[p] = to
				return nil
			}
			v = m[p]
		case int:
			s, ok := v.([]any)
			if !ok || p >= len(s) {
				return fmt.Errorf("%v: not a sequence", path)
			}
			if last {
				s[p] = to
				return nil
			}
			v = s[p]
		}
	}
	return nil
}

// getPath reads the value at path of a decoded document.
func getPath(v any, path ...any) any {
	for _, p := range path {
		switch p := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[p]
		case int:
			s, _ := v.([]any)
			if p >= len(s) {
				return nil
			}
			v = s[p]
		}
	}
	return v
}
