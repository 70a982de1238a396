package fencectl

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/sandbox-fence/sandbox-fence/internal/lifecycle"
)

// readManifests decodes a multi-document YAML file ("-": in).
func readManifests(file string, in io.Reader) ([]*unstructured.Unstructured, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(in)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no object: pass what kubectl kustomize config/default renders", file)
	}
	return out, nil
}

func (r *root) runner() (*lifecycle.Runner, error) {
	cfg, err := r.flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	dc, err := r.flags.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &lifecycle.Runner{
		Dynamic:   dyn,
		Discovery: dc,
		Mapper:    restmapper.NewDeferredDiscoveryRESTMapper(dc),
		Logf: func(format string, args ...any) {
			fmt.Fprintf(r.streams.ErrOut, format+"\n", args...)
		},
	}, nil
}
