// Package yamldocs decodes multi-document YAML into objects: the files the
// offline evaluator loads (internal/vapeval) and what kubectl kustomize
// prints for the tests (internal/testing). A package of its own so that
// neither pulls the other's dependencies in.
package yamldocs

import (
	"errors"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Decode reads every document of a YAML (or JSON) stream, skipping empty
// ones.
func Decode(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}
