// Package fencetest is a fake fence.Interface for hosts' unit tests.
//
// The fake records every call and answers with what its hooks return; it
// does not emulate the API server or the fence (no epochs are compared, no
// patch is built). A host test sets the hook of the call it cares about,
// for example to return fence.ErrStaleEpoch, and asserts on Calls.
// Behaviour on a real API server is what the project's e2e suite proves.
package fencetest

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// Call is one recorded call: the method's name and its arguments after ctx.
type Call struct {
	Method string
	Args   []any
}

// Fake implements fence.Interface. The zero value answers every call with
// (nil, nil) or nil; a non-nil hook answers instead. Safe for concurrent use.
type Fake struct {
	CreateWorkspaceFunc  func(sandbox *unstructured.Unstructured, opts fence.WriteOptions) (*unstructured.Unstructured, error)
	SuspendFunc          func(namespace, name string, opts fence.WriteOptions) (*unstructured.Unstructured, error)
	ResumeFunc           func(namespace, name string, opts fence.WriteOptions) (*unstructured.Unstructured, error)
	StampFunc            func(namespace, name string, opts fence.WriteOptions) (*unstructured.Unstructured, error)
	RefreshTemplateFunc  func(namespace, name string, template any, opts fence.WriteOptions) (*unstructured.Unstructured, error)
	DeleteFunc           func(namespace, name string, opts fence.WriteOptions) error
	DeleteClaimFunc      func(namespace, name string, opts fence.WriteOptions) error
	ApplyEgressFunc      func(in fence.PolicyInput) (*unstructured.Unstructured, error)
	RemoveEgressFunc     func(namespace, ownerUID string) error
	CheckEgressFenceFunc func() error

	mu    sync.Mutex
	calls []Call
}

var _ fence.Interface = (*Fake)(nil)

// Calls returns the calls so far, in order.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

func (f *Fake) record(method string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, Call{Method: method, Args: args})
}

// CreateWorkspace records the call and answers with CreateWorkspaceFunc.
func (f *Fake) CreateWorkspace(_ context.Context, sandbox *unstructured.Unstructured, opts fence.WriteOptions) (*unstructured.Unstructured, error) {
	f.record("CreateWorkspace", sandbox, opts)
	if f.CreateWorkspaceFunc == nil {
		return nil, nil
	}
	return f.CreateWorkspaceFunc(sandbox, opts)
}

// Suspend records the call and answers with SuspendFunc.
func (f *Fake) Suspend(_ context.Context, namespace, name string, opts fence.WriteOptions) (*unstructured.Unstructured, error) {
	f.record("Suspend", namespace, name, opts)
	return f.write(f.SuspendFunc, namespace, name, opts)
}

// Resume records the call and answers with ResumeFunc.
func (f *Fake) Resume(_ context.Context, namespace, name string, opts fence.WriteOptions) (*unstructured.Unstructured, error) {
	f.record("Resume", namespace, name, opts)
	return f.write(f.ResumeFunc, namespace, name, opts)
}

// Stamp records the call and answers with StampFunc.
func (f *Fake) Stamp(_ context.Context, namespace, name string, opts fence.WriteOptions) (*unstructured.Unstructured, error) {
	f.record("Stamp", namespace, name, opts)
	return f.write(f.StampFunc, namespace, name, opts)
}

func (f *Fake) write(hook func(namespace, name string, opts fence.WriteOptions) (*unstructured.Unstructured, error), namespace, name string, opts fence.WriteOptions) (*unstructured.Unstructured, error) {
	if hook == nil {
		return nil, nil
	}
	return hook(namespace, name, opts)
}

// RefreshTemplate records the call and answers with RefreshTemplateFunc.
func (f *Fake) RefreshTemplate(_ context.Context, namespace, name string, template any, opts fence.WriteOptions) (*unstructured.Unstructured, error) {
	f.record("RefreshTemplate", namespace, name, template, opts)
	if f.RefreshTemplateFunc == nil {
		return nil, nil
	}
	return f.RefreshTemplateFunc(namespace, name, template, opts)
}

// Delete records the call and answers with DeleteFunc.
func (f *Fake) Delete(_ context.Context, namespace, name string, opts fence.WriteOptions) error {
	f.record("Delete", namespace, name, opts)
	if f.DeleteFunc == nil {
		return nil
	}
	return f.DeleteFunc(namespace, name, opts)
}

// DeleteClaim records the call and answers with DeleteClaimFunc.
func (f *Fake) DeleteClaim(_ context.Context, namespace, name string, opts fence.WriteOptions) error {
	f.record("DeleteClaim", namespace, name, opts)
	if f.DeleteClaimFunc == nil {
		return nil
	}
	return f.DeleteClaimFunc(namespace, name, opts)
}

// ApplyEgress records the call and answers with ApplyEgressFunc.
func (f *Fake) ApplyEgress(_ context.Context, in fence.PolicyInput) (*unstructured.Unstructured, error) {
	f.record("ApplyEgress", in)
	if f.ApplyEgressFunc == nil {
		return nil, nil
	}
	return f.ApplyEgressFunc(in)
}

// RemoveEgress records the call and answers with RemoveEgressFunc.
func (f *Fake) RemoveEgress(_ context.Context, namespace, ownerUID string) error {
	f.record("RemoveEgress", namespace, ownerUID)
	if f.RemoveEgressFunc == nil {
		return nil
	}
	return f.RemoveEgressFunc(namespace, ownerUID)
}

// CheckEgressFence records the call and answers with CheckEgressFenceFunc.
func (f *Fake) CheckEgressFence(_ context.Context) error {
	f.record("CheckEgressFence")
	if f.CheckEgressFenceFunc == nil {
		return nil
	}
	return f.CheckEgressFenceFunc()
}
