package testing

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandbox-fence/sandbox-fence/internal/admit"
)

// FakeOwners is an in-memory admit.OwnerLookup.
type FakeOwners struct {
	Objects []*unstructured.Unstructured
	// GetErr and ListErr, when set, are returned by every call.
	GetErr, ListErr error
}

// NewFakeOwners returns a lookup holding objs.
func NewFakeOwners(objs ...*unstructured.Unstructured) *FakeOwners {
	return &FakeOwners{Objects: objs}
}

// GetOwner implements admit.OwnerLookup; it matches by kind, namespace and
// name only, as a real lookup would, so a kind mismatch in a stored object
// reaches the validator.
func (f *FakeOwners) GetOwner(_ context.Context, k admit.OwnerKind, namespace, name string, _ admit.Expected) (*unstructured.Unstructured, error) {
	if f.GetErr != nil {
		return nil, f.GetErr
	}
	for _, o := range f.Objects {
		if o.GetKind() == k.GVK.Kind && o.GetNamespace() == namespace && o.GetName() == name {
			return o.DeepCopy(), nil
		}
	}
	return nil, apierrors.NewNotFound(k.GVK.GroupVersion().WithResource(k.GVK.Kind).GroupResource(), name)
}

// OwnersLabelled implements admit.OwnerLookup.
func (f *FakeOwners) OwnersLabelled(_ context.Context, k admit.OwnerKind, namespace, key, value string) ([]unstructured.Unstructured, error) {
	if f.ListErr != nil {
		return nil, f.ListErr
	}
	var out []unstructured.Unstructured
	for _, o := range f.Objects {
		if o.GetKind() == k.GVK.Kind && o.GetNamespace() == namespace {
			out = append(out, *o.DeepCopy())
		}
	}
	return k.Labelled(out, key, value), nil
}
