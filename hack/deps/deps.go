//go:build deps

// Package deps pins the module versions the project builds on, so that
// parallel work on different packages never races on go.mod. It is never
// compiled (build tag "deps"); go mod tidy still counts its imports. Remove a
// line once a real package imports the module.
package deps

import (
	_ "github.com/evanphx/json-patch/v5"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/google/go-containerregistry/pkg/v1/mutate"
	_ "github.com/open-policy-agent/cert-controller/pkg/rotator"
	_ "k8s.io/api/admissionregistration/v1"
	_ "k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	_ "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	_ "k8s.io/apiserver/pkg/cel/openapi/resolver"
	_ "k8s.io/client-go/dynamic"
	_ "k8s.io/client-go/dynamic/fake"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "k8s.io/component-base/featuregate"
	_ "sigs.k8s.io/controller-runtime/pkg/certwatcher"
	_ "sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	_ "sigs.k8s.io/kind/pkg/cluster"
	_ "sigs.k8s.io/yaml"
)
