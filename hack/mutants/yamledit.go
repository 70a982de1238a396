package main

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// The YAML edits are textual, so every other byte of the file (comments,
// layout, the other expressions) stays as committed: a test that reads the
// file sees exactly one change. Each result is checked by decoding both
// files: they must be equal except for that one edit, applied to the
// decoded original.

// replaceYAML returns src with the value at path (mapping keys and sequence
// indexes) replaced by repl, a YAML value written as it should appear on one
// line: a scalar, a flow sequence or a flow mapping.
func replaceYAML(src []byte, path []any, repl string) ([]byte, error) {
	fs, lines, err := locate(src, path)
	if err != nil {
		return nil, err
	}
	f := fs[len(fs)-1]
	val := f.node
	if val.Kind == yamlv3.MappingNode && val.Style&yamlv3.FlowStyle == 0 || val.Kind == yamlv3.SequenceNode && val.Style&yamlv3.FlowStyle == 0 {
		return nil, fmt.Errorf("%v: only scalars, flow sequences and flow mappings are replaced", path)
	}
	first, col := val.Line-1, val.Column-1
	// The value runs until the first non-blank line indented no deeper than
	// its key, or than the item itself in a sequence (the next key of the
	// same mapping, the next sequence item, a comment before it): block
	// scalars and wrapped flow values are indented deeper than their key.
	key := f.key
	if key == nil {
		key = val
	}
	last := first
	for i := first + 1; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" {
			continue
		}
		if indent(l) <= key.Column-1 {
			break
		}
		last = i
	}
	var out []string
	out = append(out, lines[:first]...)
	out = append(out, lines[first][:col]+repl)
	out = append(out, lines[last+1:]...)
	res := []byte(strings.Join(out, "\n"))
	var want any
	if err := yaml.Unmarshal([]byte(repl), &want); err != nil {
		return nil, err
	}
	if err := checkEdit(src, res, path, func(doc any) error { return setPath(doc, path, want) }); err != nil {
		return nil, err
	}
	return res, nil
}

// deleteYAML returns src without the entry at path: a mapping key with its
// value, or a block sequence's item. Comments above the entry stay.
func deleteYAML(src []byte, path []any) ([]byte, error) {
	fs, lines, err := locate(src, path)
	if err != nil {
		return nil, err
	}
	f := fs[len(fs)-1]
	var first int
	switch {
	case f.key != nil:
		first = f.key.Line - 1
		if strings.HasPrefix(strings.TrimSpace(lines[first][:f.key.Column-1]), "-") {
			return nil, fmt.Errorf("%v: the first key of a sequence item is not deleted (delete the item)", path)
		}
	case f.parent != nil && f.parent.Style&yamlv3.FlowStyle == 0:
		first = f.node.Line - 1
		if !strings.HasPrefix(strings.TrimSpace(lines[first][:f.node.Column-1]), "-") {
			return nil, fmt.Errorf("%v: the item does not start on its dash's line", path)
		}
	default:
		return nil, fmt.Errorf("%v: only mapping keys and block sequence items are deleted", path)
	}
	last := extentEnd(fs, len(fs)-1, lines)
	var out []string
	out = append(out, lines[:first]...)
	out = append(out, lines[last+1:]...)
	res := []byte(strings.Join(out, "\n"))
	if err := checkEdit(src, res, path, func(doc any) error { return deletePath(doc, path) }); err != nil {
		return nil, err
	}
	return res, nil
}

// insertYAML returns src with key: value added, on a line of its own, at
// the end of the block mapping at path; value is written on one line.
func insertYAML(src []byte, path []any, key, value string) ([]byte, error) {
	fs, lines, err := locate(src, path)
	if err != nil {
		return nil, err
	}
	m := fs[len(fs)-1].node
	if m.Kind != yamlv3.MappingNode || m.Style&yamlv3.FlowStyle != 0 || len(m.Content) == 0 {
		return nil, fmt.Errorf("%v: keys are added to non-empty block mappings only", path)
	}
	for i := 0; i < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return nil, fmt.Errorf("%v: already has %s", path, key)
		}
	}
	last := extentEnd(fs, len(fs)-1, lines)
	line := strings.Repeat(" ", m.Content[0].Column-1) + key + ": " + value
	var out []string
	out = append(out, lines[:last+1]...)
	out = append(out, line)
	out = append(out, lines[last+1:]...)
	res := []byte(strings.Join(out, "\n"))
	var want any
	if err := yaml.Unmarshal([]byte(value), &want); err != nil {
		return nil, err
	}
	if err := checkEdit(src, res, path, func(doc any) error { return setPath(doc, append(append([]any{}, path...), key), want) }); err != nil {
		return nil, err
	}
	return res, nil
}

// frame is one step of a path through a YAML document: the node reached,
// its key node (for a mapping value) and the collection holding it, with
// its index in the collection's Content.
type frame struct {
	node, key, parent *yamlv3.Node
	index             int
}

// locate walks path (mapping keys and sequence indexes) from the document's
// root; the first frame is the root.
func locate(src []byte, path []any) ([]frame, []string, error) {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(src, &doc); err != nil {
		return nil, nil, err
	}
	if doc.Kind != yamlv3.DocumentNode || len(doc.Content) != 1 {
		return nil, nil, fmt.Errorf("want one YAML document")
	}
	fs := []frame{{node: doc.Content[0]}}
	n := doc.Content[0]
	for _, p := range path {
		switch p := p.(type) {
		case string:
			if n.Kind != yamlv3.MappingNode {
				return nil, nil, fmt.Errorf("%v: %q of a non-mapping", path, p)
			}
			found := false
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == p {
					fs = append(fs, frame{node: n.Content[i+1], key: n.Content[i], parent: n, index: i})
					n, found = n.Content[i+1], true
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
			fs = append(fs, frame{node: n.Content[p], parent: n, index: p})
			n = n.Content[p]
		default:
			return nil, nil, fmt.Errorf("%v: path elements are strings and ints", path)
		}
	}
	return fs, strings.Split(string(src), "\n"), nil
}

// extentEnd is the index of the last line of the entry of fs[k] (its key or
// dash through its value): the line before its next sibling, or the end of
// the collection holding it, less the blank and comment lines that open
// the next entry.
func extentEnd(fs []frame, k int, lines []string) int {
	end := len(lines) - 1
	if k > 0 {
		f := fs[k]
		next := -1
		switch f.parent.Kind {
		case yamlv3.MappingNode:
			if f.index+2 < len(f.parent.Content) {
				next = f.parent.Content[f.index+2].Line - 1
			}
		case yamlv3.SequenceNode:
			if f.index+1 < len(f.parent.Content) {
				next = f.parent.Content[f.index+1].Line - 1
			}
		}
		if next >= 0 {
			end = next - 1
		} else {
			end = extentEnd(fs, k-1, lines)
		}
	}
	for end > 0 {
		t := strings.TrimSpace(lines[end])
		if t != "" && !strings.HasPrefix(t, "#") {
			break
		}
		end--
	}
	return end
}

func indent(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }

// checkEdit decodes both files and requires the mutated one to equal the
// original with edit applied, and to differ from it.
func checkEdit(orig, mutated []byte, path []any, edit func(any) error) error {
	var a, b any
	if err := yaml.Unmarshal(orig, &a); err != nil {
		return err
	}
	if err := yaml.Unmarshal(mutated, &b); err != nil {
		return fmt.Errorf("%v: the mutated file does not parse: %w", path, err)
	}
	if err := edit(a); err != nil {
		return err
	}
	if !reflect.DeepEqual(a, b) {
		return fmt.Errorf("%v: the textual edit changed more than that value", path)
	}
	var before any
	if err := yaml.Unmarshal(orig, &before); err != nil {
		return err
	}
	if bytes.Equal(orig, mutated) || reflect.DeepEqual(before, b) {
		return fmt.Errorf("%v: the edit changes nothing", path)
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

// deletePath removes the key or sequence item at path of a decoded
// document.
func deletePath(v any, path []any) error {
	if len(path) == 0 {
		return fmt.Errorf("an empty path")
	}
	parent := path[:len(path)-1]
	switch p := path[len(path)-1].(type) {
	case string:
		m, ok := getPath(v, parent...).(map[string]any)
		if !ok {
			return fmt.Errorf("%v: not a mapping", path)
		}
		if _, ok := m[p]; !ok {
			return fmt.Errorf("%v: no key %q", path, p)
		}
		delete(m, p)
		return nil
	case int:
		s, ok := getPath(v, parent...).([]any)
		if !ok || p >= len(s) {
			return fmt.Errorf("%v: not a sequence", path)
		}
		s = append(s[:p:p], s[p+1:]...)
		if len(parent) == 0 {
			return fmt.Errorf("%v: the document is a sequence", path)
		}
		return setPath(v, parent, s)
	}
	return fmt.Errorf("%v: path elements are strings and ints", path)
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
