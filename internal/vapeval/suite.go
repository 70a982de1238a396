package vapeval

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/policyconfig"
)

// Suite runs cases (policies/README.md) as a cluster would judge them: the
// bundle with the configuration each case asks for rendered into it, as the
// controller renders a FenceConfig, every policy failing closed (so an
// expression error is a refusal a case sees), and the given namespaces. It
// starts one evaluator per distinct configuration, on first use.
type Suite struct {
	Bundle []*PolicyDir
	// Defaults is the FenceConfig a case runs under unless its params say
	// otherwise.
	Defaults *unstructured.Unstructured
	// CRD is the FenceConfig CRD: its defaults fill in a configuration as
	// the API server serves it.
	CRD        *apiextensionsv1.CustomResourceDefinition
	Namespaces []*corev1.Namespace

	mu      sync.Mutex
	started map[string]*Harness
}

// Config is the configuration params ask for, as the controller would
// render it: Defaults or the params' spec (with the CRD's defaults),
// missing, or the shipped placeholder.
func (s *Suite) Config(p CaseParams) (policyconfig.Config, error) {
	switch {
	case p.Unrendered:
		return policyconfig.Config{State: policyconfig.Unrendered}, nil
	case p.Absent:
		return policyconfig.FromFenceConfig(s.Defaults.GetName(), nil), nil
	}
	o := s.Defaults.DeepCopy()
	if p.Spec != nil { // spec: {} is the shipped empty configuration
		o.Object["spec"] = runtime.DeepCopyJSONValue(p.Spec)
	}
	if err := DefaultObject(s.CRD, o.Object); err != nil {
		return policyconfig.Config{}, err
	}
	cfg := &fencev1alpha1.FenceConfig{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, cfg); err != nil {
		return policyconfig.Config{}, err
	}
	return policyconfig.FromFenceConfig(cfg.Name, cfg), nil
}

// Harness is the evaluator of the configuration params ask for.
func (s *Suite) Harness(ctx context.Context, p CaseParams) (*Harness, error) {
	c, err := s.Config(p)
	if err != nil {
		return nil, err
	}
	key := c.Expression()
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.started[key]; ok {
		return h, nil
	}
	h, err := Start(ctx, Env{Policies: FailClosed(Rendered(s.Bundle, c)), Namespaces: s.Namespaces, Resources: Resources})
	if err != nil {
		return nil, err
	}
	if s.started == nil {
		s.started = map[string]*Harness{}
	}
	s.started[key] = h
	return h, nil
}

// Run evaluates c's request under the configuration c asks for.
func (s *Suite) Run(ctx context.Context, c *Case) (Verdict, error) {
	h, err := s.Harness(ctx, c.Params)
	if err != nil {
		return Verdict{}, err
	}
	return h.Run(ctx, c.Request)
}

// Stop stops every evaluator the suite started.
func (s *Suite) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.started {
		h.Stop()
	}
	s.started = nil
}

// NamespacesOf converts the Namespace documents among objs; other kinds
// are an error, so a file meant as the cluster's namespaces holds nothing
// else.
func NamespacesOf(objs []*unstructured.Unstructured) ([]*corev1.Namespace, error) {
	var out []*corev1.Namespace
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			return nil, fmt.Errorf("%s %q is not a Namespace", o.GetKind(), o.GetName())
		}
		ns := &corev1.Namespace{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, ns); err != nil {
			return nil, err
		}
		out = append(out, ns)
	}
	return out, nil
}
